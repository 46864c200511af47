"""Training settings from command-line flags and environment variables (flags win over env, env over defaults).

Environment variables exist so a Kubernetes Job or a Docker container can configure the run without
rewriting its command. Every value is validated before any process group starts; a bad one exits with
status 2 and a message naming the flag or variable. `python programs/train.py --help` lists them all.
"""

from __future__ import annotations

import argparse
import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any
from collections.abc import Callable, Mapping, Sequence

# Importing nothing else of programs/ (above all not torch): the Kubernetes Job's settings-check init container runs
# parse_config() alone, and must fail fast on a bad value without paying for torch's import.
ENTRYPOINT_FORMAT = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
BACKENDS = ("auto", "nccl", "gloo")
PRECISIONS = ("fp32", "bf16")


@dataclass(frozen=True)
class TrainConfig:
    steps: int
    batch_size: int
    checkpoint_dir: Path
    checkpoint_every: int
    checkpoint_keep: int
    backend: str
    precision: str
    lr: float
    grad_clip: float
    seed: int
    hidden_size: int
    layers: int
    log_every: int
    entrypoint: str
    fail_at_step: int | None
    fail_rank: int


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


def _finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    value = _finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def _one_of(choices: Sequence[str]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(choices)}, got {text!r}")
        return text

    return parse


def _entrypoint(text: str) -> str:
    if not ENTRYPOINT_FORMAT.match(text):
        raise argparse.ArgumentTypeError(f"expected 'package.module:function', got {text!r}")
    return text


def _directory(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a directory path, got an empty string")
    return Path(text)


@dataclass(frozen=True)
class _Option:
    field: str
    env: str
    parse: Callable[[str], Any]
    default: Any
    help: str

    @property
    def flag(self) -> str:
        return "--" + self.field.replace("_", "-")


OPTIONS = (
    _Option(
        "steps",
        "TRAIN_STEPS",
        _int_at_least(1),
        100,
        "total optimizer steps of the run (a resumed run counts the steps already checkpointed)",
    ),
    _Option(
        "batch_size",
        "BATCH_SIZE",
        _int_at_least(1),
        32,
        "samples per step per process; the global batch is this times the world size",
    ),
    _Option(
        "checkpoint_dir",
        "CHECKPOINT_DIR",
        _directory,
        Path("checkpoints"),
        "directory of checkpoints; must be the same shared storage for every node of a multi-node run",
    ),
    _Option(
        "checkpoint_every",
        "CHECKPOINT_EVERY",
        _int_at_least(0),
        50,
        "save every N steps and at the last step; 0 disables checkpoints (and resume)",
    ),
    _Option("checkpoint_keep", "CHECKPOINT_KEEP", _int_at_least(1), 3, "how many newest checkpoints to keep"),
    _Option(
        "backend",
        "TRAIN_BACKEND",
        _one_of(BACKENDS),
        "auto",
        "torch.distributed backend: nccl (RCCL on ROCm) for GPUs, gloo for CPU; auto picks nccl when a GPU is visible",
    ),
    _Option(
        "precision",
        "TRAIN_PRECISION",
        _one_of(PRECISIONS),
        "fp32",
        "bf16 runs forward/loss under torch.autocast(bfloat16); weights and optimizer stay fp32",
    ),
    _Option("lr", "TRAIN_LR", _positive_float, 3e-4, "learning rate of the default AdamW optimizer"),
    _Option(
        "grad_clip", "TRAIN_GRAD_CLIP", _non_negative_float, 1.0, "clip the global gradient norm to this; 0 disables"
    ),
    _Option("seed", "TRAIN_SEED", _int_at_least(0), 0, "seed of initial weights and synthetic data"),
    _Option("hidden_size", "TRAIN_HIDDEN_SIZE", _int_at_least(1), 32, "width of the default synthetic model"),
    _Option("layers", "TRAIN_LAYERS", _int_at_least(1), 2, "residual MLP blocks of the default synthetic model"),
    _Option("log_every", "TRAIN_LOG_EVERY", _int_at_least(1), 1, "log loss and samples/s every N steps (rank 0)"),
    _Option(
        "entrypoint",
        "TRAIN_ENTRYPOINT",
        _entrypoint,
        "programs.synthetic:build",
        "module:function that returns a programs.workload.Workload (your model, data and loss)",
    ),
    _Option(
        "fail_at_step",
        "TRAIN_FAIL_AT_STEP",
        _int_at_least(1),
        None,
        "failure drill: SIGKILL the process of "
        "rank --fail-rank right after this step (tests, restart-policy checks); unset it for the restart",
    ),
    _Option("fail_rank", "TRAIN_FAIL_RANK", _int_at_least(0), 0, "rank that --fail-at-step kills"),
)
assert {option.field for option in OPTIONS} == {field.name for field in fields(TrainConfig)}


def build_parser(environ: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="train.py",
        description="DistributedDataParallel training with atomic checkpoints and resume; launch with torchrun.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for option in OPTIONS:
        default = option.default
        raw = environ.get(option.env)
        if raw is not None:
            try:
                default = option.parse(raw)
            except argparse.ArgumentTypeError as error:
                parser.error(f"environment variable {option.env}: {error}")
        parser.add_argument(
            option.flag, dest=option.field, type=option.parse, default=default, help=f"{option.help} [env {option.env}]"
        )
    return parser


def parse_config(argv: Sequence[str] | None, environ: Mapping[str, str]) -> TrainConfig:
    return TrainConfig(**vars(build_parser(environ).parse_args(argv)))
