"""A user entry point as README describes it: plugged in with TRAIN_ENTRYPOINT=custom_entry:build."""

import torch

from programs.settings import TrainConfig
from programs.workload import Workload


def build(config: TrainConfig, device: torch.device) -> Workload:
    torch.manual_seed(config.seed)
    model = torch.nn.Linear(4, 3)

    def batch(index: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(index)
        inputs = torch.randn(config.batch_size, 4, generator=generator)
        return inputs.to(device), (inputs.sum(dim=1) > 0).long().to(device)

    return Workload(
        model=model,
        batch=batch,
        loss=torch.nn.functional.cross_entropy,
        make_optimizer=lambda params: torch.optim.SGD(params, lr=0.1),
    )
