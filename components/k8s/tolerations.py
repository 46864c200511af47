"""core/v1 Tolerations from the camelCase mappings the schema builds once for chart values, the DeviceConfig and
pod specs (schema.kubernetes GpuNodeTaint.toleration)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pulumi_kubernetes.core import v1 as core_v1


def toleration_args(tolerations: Iterable[Mapping[str, str]]) -> list[core_v1.TolerationArgs]:
    return [
        core_v1.TolerationArgs(
            key=t.get("key"), operator=t.get("operator"), value=t.get("value"), effect=t.get("effect")
        )
        for t in tolerations
    ]
