"""The AMD Instinct GPU models rocm-stack knows: one table that the host schema, the monitoring thresholds, the GPU
check floors, the partition modes and the per-family images all key on.

`line` is the exporter's metric set (ROCm/device-metrics-exporter metrics-support-matrix.yaml: junction temperature
and gpu_package_power on MI3xx, edge temperature and gpu_average_package_power on MI2xx). `gfx` is the LLVM target
AMD builds its images for (ROCm docs, "System requirements (Linux)", supported GPUs table: MI355X/MI350X gfx950,
MI325X/MI300X/MI308X gfx942, MI250X/MI250/MI210 gfx90a).

Alert defaults per model:
- `power_cap_watts`: the board's rated total board power (TBP), which `amd-smi static --limit` reports as its
  SOCKET_POWER cap out of the box (MI300X: "PwrCap 750.0W", rocm-smi output in ROCm/ROCm issue #5231).
  AMD product pages: MI355X 1400 W and MI350X 1000 W (amd.com/en/products/accelerators/instinct/mi350/mi355x.html
  and .../mi350x.html, "Total Board Power (TBP)"; AMD's launch figures as reported at ISC 2025 / Hot Chips 2025:
  "MI350X ... 1000W TBP ... MI355X ... 1400W TBP"), MI325X 1000 W, MI300X 750 W, MI250X/MI250 OAM 500 W,
  MI210 PCIe 300 W. MI308X: AMD publishes no board power for this export-market part, so there is no default: a
  stack monitoring MI308X hosts must set `monitoring.modelThresholds.MI308X.powerCapWatts` (its SOCKET_POWER).
- `gpu_temperature_celsius` (junction/hotspot on MI3xx, edge on MI2xx) and `memory_temperature_celsius` (HBM):
  warnings kept under the firmware's slowdown points. An MI300-series board reports SLOWDOWN_HOTSPOT_TEMPERATURE
  100 °C and SLOWDOWN_VRAM_TEMPERATURE 105 °C (ROCm/amdsmi docs/how-to/using-AMD-SMI-CLI-tool.md @ 397d8d93,
  `amd-smi static` on MI300A, gfx942); AMD publishes no different limits for the MI350 series (CDNA 4), so its
  warnings are the MI3xx ones. `amd-smi static --limit` shows a board's own points; tune via overrides.

GPU check floors (`min_tflops`, `min_busbw`) exist only where AMD publishes a figure (schema/checks.py says where).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

ModelName = Literal["MI300X", "MI325X", "MI308X", "MI350X", "MI355X", "MI250X", "MI250", "MI210"]
Line = Literal["MI3xx", "MI2xx"]
Gfx = Literal["gfx950", "gfx942", "gfx90a"]
GFX_TARGETS: tuple[str, ...] = get_args(Gfx)


@dataclass(frozen=True)
class GpuModel:
    name: ModelName
    line: Line
    gfx: Gfx
    gpu_temperature_celsius: float
    memory_temperature_celsius: float
    # None: no published board power; the stack must give it (monitoring.modelThresholds.<model>.powerCapWatts).
    power_cap_watts: float | None
    # gpucheck floors (bf16 TFLOP/s of an 8192^3 product, all-reduce bus GB/s at 1 GiB); None: no floor.
    min_tflops: float | None = None
    min_busbw: float | None = None


MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        GpuModel("MI300X", "MI3xx", "gfx942", 95, 85, 750, min_tflops=600, min_busbw=100),
        GpuModel("MI325X", "MI3xx", "gfx942", 95, 85, 1000, min_tflops=600, min_busbw=100),
        GpuModel("MI308X", "MI3xx", "gfx942", 95, 85, None),
        GpuModel("MI350X", "MI3xx", "gfx950", 95, 85, 1000),
        GpuModel("MI355X", "MI3xx", "gfx950", 95, 85, 1400),
        GpuModel("MI250X", "MI2xx", "gfx90a", 80, 85, 500),
        GpuModel("MI250", "MI2xx", "gfx90a", 80, 85, 500),
        GpuModel("MI210", "MI2xx", "gfx90a", 80, 85, 300),
    )
}
assert tuple(MODELS) == get_args(ModelName), "MODELS and ModelName list the same models"
