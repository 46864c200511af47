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

`pci_device_id` is what the GPU Operator's node labeller puts in `amd.com/gpu.device-id` (e.g. `74a1` on MI300X),
which is how Kubernetes monitoring tells a node's model: AMD's acceptance guides (ROCm/system-acceptance-docs
docs/common/health-checks.md "Check GPU Presence": MI300X 1002:74a1, MI308X 1002:74a2, MI325X 1002:74a5, MI350X
1002:75a0, MI355X 1002:75a3; docs/gpus/mi250.md: "MI250X also shares the MI250 PCI vendor:device ID (1002:740c)");
MI210 1002:740f (lspci's pci.ids name "Instinct MI210 [1002:740f]"). A shared ID labels its first model here.

Partition modes. A compute mode splits one physical GPU into logical GPUs: SPX 1, DPX 2, QPX 4, CPX one per XCD
(compute die). A memory mode (NPS1/NPS2/NPS4) splits its HBM; the number of memory partitions cannot exceed the
number of compute partitions. The amdgpu driver's table of compatible pairs (Linux
drivers/gpu/drm/amd/amdgpu/aqua_vanjaram.c, `__aqua_vanjaram_get_px_mode_info`, patch "drm/amdgpu: Use compatible
NPS mode info", Lijo Lazar, amd-gfx 2025-05-09): SPX+NPS1; DPX+NPS1/NPS2; QPX+NPS1/NPS4; CPX+NPS1/NPS4; on GC 9.5.0
(MI350 series) QPX and CPX also take NPS2 ("drm/amdgpu: Update supported modes for GC v9.5.0", amd-gfx 2025-07-22).
Which modes a die count offers: 8 XCCs SPX/DPX/QPX/CPX, 4 XCCs SPX/DPX/CPX (`__aqua_vanjaram_update_supported_modes`,
"drm/amd: Add helper to get partition config modes", amd-gfx 2024-09-24). Each model's `modes` narrow this to what
AMD documents for it, each pair with its source; MI2xx GPUs have no partition modes (rocprofiler-compute docs,
"Compute and memory partition modes in analysis": partitioning applies to MI300A/MI300X/MI325X and MI350X/MI355X).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

ModelName = Literal["MI300X", "MI325X", "MI308X", "MI350X", "MI355X", "MI250X", "MI250", "MI210"]
Line = Literal["MI3xx", "MI2xx"]
Gfx = Literal["gfx950", "gfx942", "gfx90a"]
GFX_TARGETS: tuple[str, ...] = get_args(Gfx)
ComputePartition = Literal["SPX", "DPX", "QPX", "CPX"]
MemoryPartition = Literal["NPS1", "NPS2", "NPS4"]

# GPUs one host shows at most: an 8-GPU MI300X or MI355X node in CPX shows 64 (AMD SMI docs,
# rocm-systems projects/amdsmi/docs/conceptual/partition.md "How logical GPUs are numbered": "On an 8xMI300X system
# in CPX mode, 64 logical GPUs are reported (amd-smi IDs 0-63)").
MAX_GPUS_PER_HOST = 64

# Logical GPUs per physical GPU of the fixed-count modes; CPX gives one per XCD (GpuModel.xcds).
_PER_GPU = {"SPX": 1, "DPX": 2, "QPX": 4}


@dataclass(frozen=True)
class PartitionMode:
    compute: ComputePartition
    memory: MemoryPartition
    source: str

    def __str__(self) -> str:
        return f"{self.compute}/{self.memory}"


def _modes(source: str, *pairs: str) -> tuple[PartitionMode, ...]:
    """PartitionModes from "CPX/NPS4"-style pairs, all from one source."""
    modes = []
    for pair in pairs:
        compute, memory = pair.split("/")
        assert compute in get_args(ComputePartition) and memory in get_args(MemoryPartition), pair
        modes.append(PartitionMode(compute, memory, source))  # type: ignore[arg-type]
    return tuple(modes)


_MI300X = _modes(
    "AMD SMI docs, rocm-systems projects/amdsmi/docs/conceptual/partition.md, 'Compatibility matrix' (MI300X)",
    "SPX/NPS1",
    "DPX/NPS1",
    "DPX/NPS2",
    "QPX/NPS1",
    "QPX/NPS4",
    "CPX/NPS1",
    "CPX/NPS4",
)
# ROCm/amdgpu-docs docs/gpu-partitioning/index.rst, compatibility matrix note: "DPX + NPS2 bare-metal partitioning
# is supported on MI300X, MI350, and MI355, but NOT on MI300A or MI325".
_MI325X = tuple(m for m in _MI300X if str(m) != "DPX/NPS2")
_MI350 = _modes(
    "amdgpu driver table (module docstring); ROCm/amdgpu-docs docs/gpu-partitioning/index.rst validates "
    "SPX + NPS1 and DPX + NPS2 on MI350 and MI355",
    "SPX/NPS1",
    "DPX/NPS1",
    "DPX/NPS2",
    "QPX/NPS1",
    "CPX/NPS1",
) + _modes(
    "amdgpu GC 9.5.0 (MI350 series) adds NPS2 to QPX and CPX ('drm/amdgpu: Update supported modes for GC v9.5.0'); "
    "ROCm/amdgpu-docs gpu-partitioning/index.rst marks CPX + NPS4 'NA' on MI350 and MI355",
    "QPX/NPS2",
    "CPX/NPS2",
)
_MI308X = _modes(
    "MI308X has 4 XCDs: CPX shows 32 GPUs on an 8x MI308X (ROCm/rocm-systems issue #8529), 20 CUs each "
    "(ROCm/rocMLIR PR #2197); 4 XCCs offer SPX/DPX/CPX, no QPX; no source gives it a memory mode but "
    "NPS1",
    "SPX/NPS1",
    "DPX/NPS1",
    "CPX/NPS1",
)


@dataclass(frozen=True)
class GpuModel:
    name: ModelName
    line: Line
    gfx: Gfx
    gpu_temperature_celsius: float
    memory_temperature_celsius: float
    # None: no published board power; the stack must give it (monitoring.modelThresholds.<model>.powerCapWatts).
    power_cap_watts: float | None
    # The node labeller's amd.com/gpu.device-id (see above).
    pci_device_id: str
    # gpucheck floors (bf16 TFLOP/s of an 8192^3 product, all-reduce bus GB/s at 1 GiB); None: no floor.
    min_tflops: float | None = None
    min_busbw: float | None = None
    # Compute dies (XCDs): CPX makes each its own logical GPU.
    xcds: int = 1
    # The (compute, memory) partition modes the model supports, each with its source; () = none (MI2xx).
    modes: tuple[PartitionMode, ...] = ()

    def logical_per_gpu(self, compute: ComputePartition | None) -> int:
        """Logical GPUs one physical GPU shows in a compute mode (None: unpartitioned, 1)."""
        if compute is None:
            return 1
        return self.xcds if compute == "CPX" else _PER_GPU[compute]

    def mode(self, compute: ComputePartition | None, memory: MemoryPartition | None) -> PartitionMode | None:
        """The supported mode for this pair (unset = SPX / NPS1), or None if the model does not support it."""
        wanted = (compute or "SPX", memory or "NPS1")
        return next((m for m in self.modes if (m.compute, m.memory) == wanted), None)


MODELS: dict[str, GpuModel] = {
    model.name: model
    for model in (
        # XCDs: MI300X and MI325X 8 ("MI300X / MI325X (CDNA 3, gfx942): 8 XCDs. In CPX mode, 8 logical GPUs are
        # reported", AMD SMI partition.md); MI350X/MI355X 8 (aac.amd.com "GPU Partitioning Modes": MI355X SPX/DPX/
        # QPX/CPX = 1/2/4/8 logical GPUs per physical GPU, 64 on an 8-GPU node); MI308X 4 (above).
        GpuModel(
            "MI300X", "MI3xx", "gfx942", 95, 85, 750, "74a1", min_tflops=600, min_busbw=100, xcds=8, modes=_MI300X
        ),
        GpuModel(
            "MI325X", "MI3xx", "gfx942", 95, 85, 1000, "74a5", min_tflops=600, min_busbw=100, xcds=8, modes=_MI325X
        ),
        GpuModel("MI308X", "MI3xx", "gfx942", 95, 85, None, "74a2", xcds=4, modes=_MI308X),
        GpuModel("MI350X", "MI3xx", "gfx950", 95, 85, 1000, "75a0", xcds=8, modes=_MI350),
        GpuModel("MI355X", "MI3xx", "gfx950", 95, 85, 1400, "75a3", xcds=8, modes=_MI350),
        GpuModel("MI250X", "MI2xx", "gfx90a", 80, 85, 500, "740c"),
        GpuModel("MI250", "MI2xx", "gfx90a", 80, 85, 500, "740c"),
        GpuModel("MI210", "MI2xx", "gfx90a", 80, 85, 300, "740f"),
    )
}
assert tuple(MODELS) == get_args(ModelName), "MODELS and ModelName list the same models"


def logical_per_gpu(model: str, compute: ComputePartition | None) -> int:
    """Logical GPUs per physical GPU of `model` in a compute mode; 1 when unpartitioned or the model is unknown
    (`other`, which cannot declare a mode)."""
    known = MODELS.get(model)
    return known.logical_per_gpu(compute) if known is not None else 1


def gpu_ranges(gpus: Sequence[int]) -> str:
    """GPU indices as a person reads them: `0-3`, `0,2,4-5`."""
    runs: list[list[int]] = []
    for g in gpus:
        if runs and g == runs[-1][-1] + 1:
            runs[-1].append(g)
        else:
            runs.append([g])
    return ",".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)
