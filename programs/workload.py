"""The plug-in point for your own training code: an entry point returns a `Workload`.

`train.py` owns everything around the model — process group, DistributedDataParallel, the loop, mixed
precision, samples/s logging, checkpoints and resume. An entry point supplies only what is model-specific:

    # mypackage/train_entry.py  (importable: put it on PYTHONPATH in the container)
    from programs.settings import TrainConfig
    from programs.workload import Workload

    def build(config: TrainConfig, device: torch.device) -> Workload:
        model = MyModel()                                    # train.py moves it to `device` and wraps it in DDP
        def batch(index: int):                               # the index-th batch (0, 1, ...) of the run's stream,
            ...                                              # tensors on `device`; a pure function of `index`, so
            return inputs, targets                           # a resumed run (of any world size) sees the same data
        return Workload(model=model, batch=batch, loss=torch.nn.functional.cross_entropy)

and run with `--entrypoint mypackage.train_entry:build` (or TRAIN_ENTRYPOINT=...). Extra settings of your own
can come from your own environment variables. The default entry point is `programs.synthetic:build`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from collections.abc import Callable, Iterable

import torch

from programs.settings import ENTRYPOINT_FORMAT, TrainConfig

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class Workload:
    model: torch.nn.Module
    # global batch index -> (inputs, targets) of `batch_size` samples on the training device. Each step, rank r of a
    # world of W reads index `consumed + r` and `consumed` grows by W (train.py): the stream is the same whatever the
    # world size, so an elastic run that shrinks or grows neither skips nor repeats data. Must be deterministic in
    # `index` for resume to reproduce an uninterrupted run.
    batch: Callable[[int], Batch]
    # (model(inputs), targets) -> scalar loss
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    # parameters -> optimizer; None means AdamW with the configured learning rate
    make_optimizer: Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer] | None = None


EntryPoint = Callable[[TrainConfig, torch.device], Workload]


def load_entrypoint(spec: str) -> EntryPoint:
    """Import `module:function`; errors name the spec so a typo in TRAIN_ENTRYPOINT is obvious."""
    if not ENTRYPOINT_FORMAT.match(spec):
        raise ValueError(f"entry point {spec!r} must look like 'package.module:function'")
    module_name, function_name = spec.split(":")
    module = importlib.import_module(module_name)
    function = getattr(module, function_name, None)
    if not callable(function):
        raise ValueError(f"entry point {spec!r}: {module_name} has no callable {function_name!r}")
    return function
