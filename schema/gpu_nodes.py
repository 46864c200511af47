"""The stack's Kubernetes GPU nodes as groups: which nodes they are, what they advertise, what a GPU check on one
of them expects. One definition for everything that runs the check on the GPU nodes (`rocm-stack verify
--kubernetes`, the GPU check of every GPU pod: components/workloads/gpu_check.py).

- `gpuFleet`: the nodes the device plugin runs on (the DeviceConfig's `selector`, or the standalone plugin's
  `nodeSelector`), without a partition profile label once profiles are declared; whole GPUs as `amd.com/gpu`;
  floors of GPU model "other" (gpuFleet names no model).
- each partition profile: the same nodes labelled `dcm.amd.com/gpu-config-profile=<name>`, advertising the
  profile's resource (`amd.com/gpu` under `single` naming, `amd.com/<compute>_<memory>` under `mixed`),
  `logical_gpus_per_node` of them, floors of its model and compute mode.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from domain.gpus import MODELS

from .checks import GpuFloors
from .docker import image_for
from .kubernetes import GPU_RESOURCE_NAME, PARTITION_PROFILE_LABEL, KubernetesConfig

if TYPE_CHECKING:
    from . import StackConfig

FLEET = "gpuFleet"
# The image that runs programs/gpucheck.py (torch): the training image.
CHECK_IMAGE_KEY = "pytorch"


@dataclass(frozen=True)
class GpuNodeGroup:
    name: str
    """`gpuFleet` or the partition profile's name."""
    key: str
    """The config key that declares the group (for messages)."""
    node_selector: Mapping[str, str]
    resource_name: str
    floors: GpuFloors
    image: str | None
    """The check's image (`images.pytorch` for the group's GPU family); None when that key has none for it."""
    nodes: int | None = None
    """Nodes declared (`gpuFleet.nodes`, the profile's `nodes`); None: not declared."""
    gpus_per_node: int | None = None
    """GPUs each node advertises as `resource_name`, as declared; None: not declared."""
    without_label: str | None = None
    """A label the group's nodes do not carry (the profile label, for gpuFleet once profiles exist)."""
    tolerations: tuple[Mapping[str, str], ...] = field(default=())
    """core/v1 Tolerations (camelCase) of the GPU nodes' taints."""

    def selects(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.node_selector.items()) and (
            self.without_label is None or self.without_label not in labels
        )


def gpu_namespace(config: KubernetesConfig) -> str:
    """The namespace of the GPU layer (the operator's, or the standalone device plugin's)."""
    return config.gpu_operator.namespace if config.mode == "operator" else config.device_plugin.namespace


def gpu_node_selector(config: KubernetesConfig) -> dict[str, str]:
    """The nodes the device plugin runs on: the only ones that can advertise GPUs."""
    if config.mode == "operator":
        return dict(config.gpu_operator.device_config.selector)
    return dict(config.device_plugin.node_selector)


def gpu_node_groups(cfg: StackConfig) -> list[GpuNodeGroup]:
    """gpuFleet first, then every partition profile by name (also those declaring 0 nodes: callers that need a
    declared count filter on `nodes`); [] without a Kubernetes layer."""
    config = cfg.kubernetes
    if config is None:
        return []
    selector = gpu_node_selector(config)
    tolerations = tuple(config.gpu_tolerations())
    fleet = cfg.gpu_fleet
    groups = [
        GpuNodeGroup(
            name=FLEET,
            key=FLEET,
            node_selector=selector,
            resource_name=GPU_RESOURCE_NAME,
            floors=cfg.checks.floors_for("other", cfg.environment),
            # Nodes of any family: one reference for every family, or none.
            image=image_for(cfg.images, CHECK_IMAGE_KEY, None),
            nodes=fleet.nodes if fleet else None,
            gpus_per_node=fleet.gpus_per_node if fleet else None,
            # Under `single` naming a partitioned node offers amd.com/gpu too: it is its profile's.
            without_label=PARTITION_PROFILE_LABEL if config.partition_profiles else None,
            tolerations=tolerations,
        )
    ]
    for name, profile in sorted(config.partition_profiles.items()):
        groups.append(
            GpuNodeGroup(
                name=name,
                key=f"kubernetes.partitionProfiles.{name}",
                node_selector={**selector, PARTITION_PROFILE_LABEL: name},
                resource_name=profile.resource_name(config.resource_naming_strategy),
                floors=cfg.checks.floors_for(profile.gpu_model, cfg.environment, profile.compute_partition),
                image=image_for(cfg.images, CHECK_IMAGE_KEY, MODELS[profile.gpu_model].gfx),
                nodes=profile.nodes,
                gpus_per_node=profile.logical_gpus_per_node,
                tolerations=tolerations,
            )
        )
    return groups


def pod_floors(cfg: StackConfig, resource: str) -> GpuFloors:
    """The floors of the GPU check of a pod requesting `resource`: those of the groups that advertise it when they
    agree, else none (the pod may land on a node of any of them: under `single` naming a partition is amd.com/gpu
    too)."""
    floors = [group.floors for group in gpu_node_groups(cfg) if group.resource_name == resource]
    return floors[0] if floors and all(f == floors[0] for f in floors) else GpuFloors()
