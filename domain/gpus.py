"""The AMD Instinct GPU models rocm-stack knows: one table that the host schema, the monitoring thresholds, the GPU
check floors, the partition modes and the per-family images all key on.

`line` is the exporter's metric set (ROCm/device-metrics-exporter metrics-support-matrix.yaml: junction temperature
and gpu_package_power on MI3xx, edge temperature and gpu_average_package_power on MI2xx). `gfx` is the LLVM target
AMD builds its images for (ROCm docs, "System requirements (Linux)", supported GPUs table).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

ModelName = Literal["MI300X", "MI325X", "MI308X", "MI250X", "MI250", "MI210"]
Line = Literal["MI3xx", "MI2xx"]


@dataclass(frozen=True)
class GpuModel:
    name: ModelName
    line: Line
    gfx: str


MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel("MI300X", "MI3xx", "gfx942"),
        GpuModel("MI325X", "MI3xx", "gfx942"),
        GpuModel("MI308X", "MI3xx", "gfx942"),
        GpuModel("MI250X", "MI2xx", "gfx90a"),
        GpuModel("MI250", "MI2xx", "gfx90a"),
        GpuModel("MI210", "MI2xx", "gfx90a"),
    )
}
assert tuple(MODELS) == get_args(ModelName), "MODELS and ModelName list the same models"
