"""`rocm-stack:checks`: the GPU check per partition (programs/gpucheck.py) and the host preflight
(programs/preflight.py) that gate every Docker partition's container, and the GPU check that starts every
Kubernetes GPU pod (components/workloads/gpu_check.py).

Performance floors are per GPU model, with defaults only where AMD publishes a figure (DEFAULT_FLOORS); every
other model is checked for its GPU count, a correct bf16 product and a correct all-reduce, without floors.
"""

from __future__ import annotations

import re
from typing import Annotated, get_args

from pydantic import Field

from domain.gpus import MODELS

from .base import ConfigModel, matching
from .bounds import MAX_FLOOR, MAX_ITEMS
from .docker import HostConfig, ImageRef, image_pin_problem, image_refs

GpuModel = HostConfig.model_fields["gpu_model"].annotation
GPU_MODELS: tuple[str, ...] = get_args(GpuModel)


class GpuFloors(ConfigModel):
    min_tflops: Annotated[float, Field(gt=0, le=MAX_FLOOR)] | None = None
    """gpucheck --min-tflops: the floor of every GPU's bf16 8192^3 matrix product."""
    min_busbw: Annotated[float, Field(gt=0, le=MAX_FLOOR)] | None = None
    """gpucheck --min-busbw: the floor of the all-reduce bus bandwidth at 1 GiB (partitions of 2 or more GPUs)."""


# AMD's Cluster Validation Suite preflight (ROCm/cvs cvs/input/config_file/preflight/preflight_config.json
# L209-216 @ dddd91430fe4db155e7ef78764e20955fdf706e3): `"gemm_tflops_min": 600` "MI300X healthy nodes typically
# exceed 600" for an 8192^3 bf16 torch.matmul (gpucheck's product), and `"rccl_gbs_min": 100` for a local RCCL
# all-reduce at 64 MB. gpucheck compares busbw at 1 GiB, where it is higher than at 64 MB (rccl-tests on 8x MI300X
# rise from ~161 GB/s at 8 MiB, crickett-hpe/hpc-ai-envs PR #30), so 100 there is the more lenient floor.
# MI325X: the same compute as MI300X (stas00/ml-engineering compute/accelerator/README.md, note 18) and the same
# 304 GB/s all-reduce acceptance criterion (ROCm/system-acceptance-docs docs/gpus/mi325x.md L143).
# No AMD floor for bf16 matmul is published for MI308X, MI350X/MI355X, MI250X/MI250 (per GCD) or MI210: none is
# assumed. The figures live in the model table (domain/gpus.py `min_tflops`, `min_busbw`).
DEFAULT_FLOORS: dict[str, GpuFloors] = {
    name: GpuFloors(min_tflops=model.min_tflops, min_busbw=model.min_busbw)
    for name, model in MODELS.items()
    if model.min_tflops is not None or model.min_busbw is not None
}

# A ROCm image tag names its ROCm release: rocm/pytorch:rocm7.0_ubuntu22.04_..., rocm/vllm:rocm7.0.0_vllm_...
_ROCM_IN_TAG = re.compile(r":rocm(\d+)\.(\d+)")


class ChecksConfig(ConfigModel):
    enable: bool = True
    """Run the host preflight and the GPU check per Docker partition before its container, and the GPU check as the
    init container of every Kubernetes GPU pod. On by default everywhere (a partition that sees the wrong GPUs is
    broken on a workstation too; a check costs a container start and seconds of GPU time); dev can switch it off."""
    floors: Annotated[dict[GpuModel, GpuFloors], Field(max_length=MAX_ITEMS)] = {}  # type: ignore[valid-type]
    """gpucheck floors per GPU model (`minTflops`, `minBusbw`); a model given here replaces its published default
    (MI300X and MI325X: 600 TFLOP/s, 100 GB/s, from AMD's Cluster Validation Suite)."""
    enforce_floors: bool | None = None
    """Apply the floors. Unset: in prod only; dev checks GPU count and correctness (a workstation's GPU is rarely the
    fleet's model)."""
    timeout_seconds: Annotated[int, Field(ge=60, le=7200)] = 900
    """How long gpucheck's ranks may take before the check fails as hung (its --timeout); `pulumi up` waits up to
    that plus 300 s for a Docker check's container (docs/workloads.md "Deadlines"), and that much longer for a
    vLLM Deployment's rollout."""
    image_rocm: Annotated[
        dict[str, Annotated[str, matching(r"\d+\.\d+", "a ROCm release such as 7.0")]], Field(max_length=MAX_ITEMS)
    ] = {}
    """ROCm release (major.minor) of an image (a key of `images`) whose tag does not name it; the preflight checks
    the host's amdgpu driver against it. Required in prod for such images."""

    def floors_for(self, gpu_model: str, environment: str, compute_partition: str | None = None) -> GpuFloors:
        """The floors of whole GPUs of a model; a GPU split by a compute mode other than SPX has a share of its
        compute and no published floor, so none."""
        enforce = self.enforce_floors if self.enforce_floors is not None else environment == "prod"
        if not enforce or compute_partition not in (None, "SPX"):
            return GpuFloors()
        return self.floors.get(gpu_model, DEFAULT_FLOORS.get(gpu_model, GpuFloors()))

    def rocm_version(self, image_key: str, reference: str) -> str | None:
        """The ROCm release an image is built on: `imageRocm`, else its tag; None when neither says."""
        if image_key in self.image_rocm:
            return self.image_rocm[image_key]
        match = _ROCM_IN_TAG.search(reference)
        return f"{match[1]}.{match[2]}" if match else None


def problems(checks: ChecksConfig, images: dict[str, ImageRef], environment: str) -> list[tuple[str, str]]:
    """Cross-field checks of `checks` (key paths relative to `rocm-stack:`). An image of unknown ROCm release is
    refused in prod, where the preflight fails on an incompatible driver; dev's preflight notes it and goes on."""
    found = [
        (f"checks.imageRocm.{key}", f"unknown image '{key}'; expected one of {sorted(images)}")
        for key in sorted(set(checks.image_rocm) - set(images))
    ]
    if checks.enable and environment == "prod":
        found += [
            (
                f"images.{key}",
                (
                    f"the preflight cannot tell which ROCm release '{ref}' is built on (its tag names none); "
                    f'set checks.imageRocm.{key.split(".")[0]} to it, e.g. "7.0"'
                ),
            )
            for key, ref in sorted(image_refs(images))
            # A reference that is no pin at all is refused once, for that (schema.docker.problems).
            if checks.rocm_version(key.split(".")[0], ref) is None and image_pin_problem(ref) is None
        ]
    # Floors that no check applies: a setting that would silently do nothing.
    enforced = checks.enforce_floors if checks.enforce_floors is not None else environment == "prod"
    if checks.floors and not (checks.enable and enforced):
        fix = "set checks.enable: true" if not checks.enable else "set checks.enforceFloors: true"
        why = "checks.enable is false" if not checks.enable else f"{environment} does not enforce the floors"
        found.append(("checks.floors", f"does nothing: {why}; {fix}, or remove it"))
    return found
