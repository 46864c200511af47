"""Default workload: a residual MLP learning a fixed random "teacher" function on synthetic data.

Needs no dataset, so it runs anywhere (a smoke test of the GPUs, RCCL and the checkpoint volume), its loss falls
visibly, and every batch is a pure function of (seed, global batch index) — which is what lets a resumed run reproduce
an uninterrupted one bit for bit. Size it with --hidden-size / --layers / --batch-size.
"""

from __future__ import annotations

import torch
from torch import nn

from programs.settings import TrainConfig
from programs.workload import Batch, Workload


class ResidualMLP(nn.Module):
    """Pre-norm transformer-style MLP blocks (LayerNorm → d×4d → GELU → 4d×d, plus skip)."""

    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(self._block(dim) for _ in range(layers))
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim))

    @staticmethod
    def _block(dim: int) -> nn.Sequential:
        # Each block starts as the identity (GPT-2/Fixup style), so depth cannot blow up the first updates.
        expand, output = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)  # created in this order: same init RNG
        nn.init.zeros_(output.weight)
        nn.init.zeros_(output.bias)
        return nn.Sequential(nn.LayerNorm(dim), expand, nn.GELU(), output)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


def _seed(*parts: int) -> int:
    # hash() of an int tuple does not depend on PYTHONHASHSEED, so every process derives the same seed.
    return hash(parts) & 0x7FFF_FFFF_FFFF_FFFF


def build(config: TrainConfig, device: torch.device) -> Workload:
    dim = config.hidden_size
    teacher_gen = torch.Generator(device="cpu").manual_seed(_seed(config.seed, -1))
    teacher = (torch.randn(dim, dim, generator=teacher_gen) / dim**0.5).to(device)
    torch.manual_seed(config.seed)  # same initial weights on every rank (DDP would broadcast rank 0's anyway)
    model = ResidualMLP(dim, config.layers)

    def batch(index: int) -> Batch:
        generator = torch.Generator(device=device).manual_seed(_seed(config.seed, index))
        inputs = torch.randn(config.batch_size, dim, generator=generator, device=device)
        return inputs, torch.tanh(inputs @ teacher)

    return Workload(model=model, batch=batch, loss=nn.functional.mse_loss)
