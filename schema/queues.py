"""`kubernetes.queues`: GPU quotas through Kueue (kubernetes-sigs/kueue v0.19.2), installed from its pinned chart.

- `flavors`: one Kueue ResourceFlavor per GPU family (and partition profile), matching the nodes by the GPU
  Operator's node labeller label `amd.com/gpu.device-id` (and DCM's profile label);
- `clusterQueues`: quotas of GPUs per flavor (`amd.com/gpu` or a partition resource) and of the pods' `cpu` and
  `memory` (Kueue counts those too), a `cohort` whose queues lend each other unused quota, the namespaces they serve;
- `localQueues`: the queue a namespace's jobs name in `training[].kubernetes.queueName`;
- `priorities`: the PriorityClasses of training and serving pods.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, model_validator

from domain.gpus import MODELS, ModelName
from schema.base import ConfigModel, matching
from schema.bounds import MAX_ITEMS, MAX_WAIT_SECONDS
from schema.types import Name

# Install command (charts/kueue/README.md L31 @ v0.19.2): `helm install kueue oci://registry.k8s.io/kueue/charts/kueue
# --version="0.19.2" --create-namespace --namespace=kueue-system`. The chart's values name a staging image
# (`tag: release-0.19`, pullPolicy Always); the release packaging rewrites them to registry.k8s.io/kueue/kueue:<tag>,
# IfNotPresent (hack/helm-chart-package.sh L32, L75): the stack sets that pin itself.
KUEUE_CHART = "oci://registry.k8s.io/kueue/charts/kueue"
KUEUE_CHART_VERSION = "0.19.2"
KUEUE_IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"
# The served storage version of ResourceFlavor, ClusterQueue and LocalQueue at v0.19.2 (v1beta1 is deprecated:
# "This version is deprecated. Use v1beta2 instead.", config/components/crd/bases/*.yaml).
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
# DCM's node label naming a node's partition profile (schema.kubernetes.PARTITION_PROFILE_LABEL; no import cycle).
_PROFILE_LABEL = "dcm.amd.com/gpu-config-profile"
# The node labeller's label with the GPU's PCI device ID (schema.workloads.DEVICE_ID_LABEL).
_DEVICE_ID_LABEL = "amd.com/gpu.device-id"
# The ResourceFlavor of the pods' CPU and memory: no node labels, so it fits every node (an elastic run's rendezvous
# pod asks for no GPU: with the GPU flavor's labels Kueue would send it to a GPU node).
CPU_FLAVOR = "rocm-stack-cpu"
# PriorityClass names: the pods' priorityClassName, which Kueue also takes as the workload's priority.
TRAINING_PRIORITY_CLASS = "rocm-stack-training"
SERVING_PRIORITY_CLASS = "rocm-stack-serving"

# A resource quantity: a whole number, or a Kubernetes quantity string ("256", "500m", "2Ti").
Quantity = Annotated[
    str,
    BeforeValidator(lambda v: str(v) if type(v) is int else v),
    matching(r"[0-9]+(\.[0-9]+)?([mkMGTPE]|[KMGTPE]i)?", 'a quantity such as 16, "500m" or "2Ti"'),
]
ResourceName = Annotated[
    str, matching(r"([a-z0-9.-]+/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", "a resource name such as amd.com/gpu or cpu")
]


class KueueConfig(ConfigModel):
    install: bool = True
    """False: the cluster already runs Kueue (the stack then declares only the queues)."""
    namespace: Name = "kueue-system"
    chart_version: Annotated[str, matching(r"\d+\.\d+\.\d+", "a chart version such as 0.19.2")] = KUEUE_CHART_VERSION
    """Version of the chart oci://registry.k8s.io/kueue/charts/kueue (its image is pinned to the same)."""
    timeout_seconds: int = Field(600, gt=0, le=MAX_WAIT_SECONDS)

    def chart_values(self) -> dict[str, object]:
        image = {"repository": KUEUE_IMAGE_REPOSITORY, "tag": f"v{self.chart_version}", "pullPolicy": "IfNotPresent"}
        return {"controllerManager": {"manager": {"image": image}}}


class QueueFlavor(ConfigModel):
    """A Kueue ResourceFlavor: the GPU nodes of one family (and partition profile)."""

    gpu_model: ModelName
    """The nodes' GPU model: matched by the node labeller's `amd.com/gpu.device-id`."""
    partition_profile: Name | None = None
    """Nodes of this `kubernetes.partitionProfiles` profile only (DCM's `dcm.amd.com/gpu-config-profile` label)."""

    def node_labels(self) -> dict[str, str]:
        labels = {_DEVICE_ID_LABEL: MODELS[self.gpu_model].pci_device_id}
        if self.partition_profile is not None:
            labels[_PROFILE_LABEL] = self.partition_profile
        return labels


class Quota(ConfigModel):
    nominal: Quantity
    """What the queue owns (`nominalQuota`)."""
    borrowing_limit: Quantity | None = None
    """How much more it may borrow from its cohort (unset: all the cohort has unused; needs a cohort)."""
    lending_limit: Quantity | None = None
    """How much of `nominal` its cohort may borrow (unset: all of it)."""


def _quota(value: Any) -> Any:
    # `amd.com/gpu: 16` is short for `amd.com/gpu: {nominal: 16}`.
    return {"nominal": value} if isinstance(value, (int, str)) else value


QuotaValue = Annotated[Quota, BeforeValidator(_quota)]


class ClusterQueueConfig(ConfigModel):
    namespaces: list[Name] = Field(min_length=1, max_length=MAX_ITEMS)
    """Namespaces whose LocalQueues may point at this queue (its namespaceSelector)."""
    cohort: Name | None = None
    """Queues of one cohort borrow each other's unused quota, and reclaim it by preemption."""
    cpu: QuotaValue
    memory: QuotaValue
    """Kueue admits a job only if its queue covers every resource its pods request: the pods' CPU and memory (on
    any node: the flavor CPU_FLAVOR, no node labels) as well as their GPUs."""
    gpus: dict[Name, Annotated[dict[ResourceName, QuotaValue], Field(max_length=MAX_ITEMS)]] = Field(
        min_length=1, max_length=MAX_ITEMS
    )
    """GPU flavor -> GPU resource (`amd.com/gpu`, or a partition resource) -> quota. Every flavor quotes the same
    resources."""

    @model_validator(mode="after")
    def _same_resources(self) -> ClusterQueueConfig:
        # ClusterQueue CEL (v0.19.2 v1beta2 resourceGroups): "flavors must have the same number of resources as the
        # coveredResources"; one resource group holds the GPU resources, so each flavor quotes the same ones.
        resources = {name: sorted(quotas) for name, quotas in self.gpus.items()}
        first = next(iter(resources.values()))
        for name, listed in resources.items():
            if listed != first:
                raise ValueError(
                    f"gpus.{name} quotes {', '.join(listed)} but another flavor quotes {', '.join(first)}: "
                    "every GPU flavor of a queue quotes the same resources"
                )
        if self.cohort is None and any(quota.borrowing_limit for quota in self.quotas()):
            # CEL: "borrowingLimit must be nil when cohort is empty".
            raise ValueError("a borrowingLimit needs a cohort to borrow from: set cohort, or remove borrowingLimit")
        return self

    def quotas(self) -> list[Quota]:
        return [self.cpu, self.memory, *(q for quotas in self.gpus.values() for q in quotas.values())]

    def gpu_resources(self) -> list[str]:
        return sorted(next(iter(self.gpus.values())))


class LocalQueueConfig(ConfigModel):
    name: Name
    namespace: Name
    cluster_queue: Name


class Priorities(ConfigModel):
    training: int = Field(1000, ge=0, le=1_000_000_000)
    serving: int = Field(100_000, ge=0, le=1_000_000_000)
    """Above training: the scheduler may preempt training pods (they checkpoint on SIGTERM) to start vLLM."""


class QueuesConfig(ConfigModel):
    kueue: KueueConfig = KueueConfig()
    flavors: dict[Name, QueueFlavor] = Field(min_length=1, max_length=MAX_ITEMS)
    cluster_queues: dict[Name, ClusterQueueConfig] = Field(min_length=1, max_length=MAX_ITEMS)
    local_queues: Annotated[list[LocalQueueConfig], Field(max_length=MAX_ITEMS)] = []
    priorities: Priorities = Priorities()

    @model_validator(mode="after")
    def _references(self) -> QueuesConfig:
        for name, queue in self.cluster_queues.items():
            for flavor in queue.gpus:
                if flavor not in self.flavors:
                    raise ValueError(
                        f"clusterQueues.{name}.gpus.{flavor}: no such flavor; declare it in flavors "
                        f"({', '.join(sorted(self.flavors))})"
                    )
        seen: set[tuple[str, str]] = set()
        for index, local in enumerate(self.local_queues):
            at = f"localQueues[{index}]"
            target = self.cluster_queues.get(local.cluster_queue)
            if target is None:
                raise ValueError(f"{at}.clusterQueue: no ClusterQueue '{local.cluster_queue}' in clusterQueues")
            if local.namespace not in target.namespaces:
                raise ValueError(
                    f"{at}.namespace: ClusterQueue '{local.cluster_queue}' serves {', '.join(target.namespaces)}, "
                    f"not '{local.namespace}' (Kueue would never admit its jobs); add it to its namespaces"
                )
            if (local.namespace, local.name) in seen:
                raise ValueError(f"{at}: {local.namespace}/{local.name} is declared twice")
            seen.add((local.namespace, local.name))
        return self

    def local_queue(self, namespace: str, name: str) -> LocalQueueConfig | None:
        return next((q for q in self.local_queues if (q.namespace, q.name) == (namespace, name)), None)
