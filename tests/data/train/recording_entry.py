"""The default synthetic workload, plus a record of which global batch index each process asked for (one file per
process under RECORD_DIR, one index a line) and a pause per batch (STEP_PAUSE_S) so a test can act between steps."""

import os
import time
from pathlib import Path

import torch

from programs import synthetic
from programs.settings import TrainConfig
from programs.workload import Batch, Workload


def build(config: TrainConfig, device: torch.device) -> Workload:
    workload = synthetic.build(config, device)
    record = Path(os.environ["RECORD_DIR"]) / f"{os.getpid()}.txt"
    pause = float(os.environ.get("STEP_PAUSE_S", "0"))

    def batch(index: int) -> Batch:
        with record.open("a") as file:
            file.write(f"{index}\n")
        time.sleep(pause)
        return workload.batch(index)

    return Workload(model=workload.model, batch=batch, loss=workload.loss)
