"""`kubernetes.queues`: GPU quotas through Kueue (kubernetes-sigs/kueue v0.19.2), installed from its pinned chart.

- `flavors`: one Kueue ResourceFlavor per GPU family (and partition profile), matching the nodes by the GPU
  Operator's node labeller label `amd.com/gpu.device-id` (and DCM's profile label);
- `clusterQueues`: quotas of GPUs per flavor (`amd.com/gpu` or a partition resource) and of the pods' `cpu` and
  `memory` (Kueue counts those too), a `cohort` whose queues lend each other unused quota, the namespaces they serve;
- `localQueues`: the queue a namespace's jobs name in `training[].kubernetes.queueName`;
- `priorities`: the PriorityClasses of training and serving pods.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, Field, model_validator

from domain.gpus import MODELS, ModelName
from schema.base import ConfigModel, by_environment, environment_default, matching
from schema.bounds import MAX_ITEMS, MAX_WAIT_SECONDS
from schema.types import KubeQuantity, Name, pinned_chart_version, quantity_value

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
# Set by the API server on every namespace.
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
# DCM's node label naming a node's partition profile (schema.kubernetes.PARTITION_PROFILE_LABEL; no import cycle).
_PROFILE_LABEL = "dcm.amd.com/gpu-config-profile"
# The node labeller's label with the GPU's PCI device ID (schema.derived.DEVICE_ID_LABEL).
_DEVICE_ID_LABEL = "amd.com/gpu.device-id"
# The ResourceFlavor of the pods' CPU and memory: no node labels, so it fits every node (an elastic run's rendezvous
# pod asks for no GPU: with the GPU flavor's labels Kueue would send it to a GPU node).
CPU_FLAVOR = "rocm-stack-cpu"
# Kueue admits a Job, JobSet, Deployment or LeaderWorkerSet labelled with its LocalQueue
# (https://kueue.sigs.k8s.io/docs/tasks/run/jobsets/: "The target local queue should be specified in the
# `metadata.labels` section").
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# PriorityClass names: the pods' priorityClassName, which Kueue also takes as the workload's priority.
TRAINING_PRIORITY_CLASS = "rocm-stack-training"
SERVING_PRIORITY_CLASS = "rocm-stack-serving"

# Kueue's integrations (apis/config/v1beta2/configuration_types.go L536-557 @ v0.19.2, Integrations.Frameworks): the
# kinds of the stack's queued workloads. The chart makes the pod, Deployment and StatefulSet webhooks fail closed only
# for a listed framework (charts/kueue/templates/webhook/manifests.yaml L92-96, L315-319, L525-529 @ v0.19.2:
# `{{- if has "pod" $integrationsConfig.frameworks }} failurePolicy: Fail {{- else }} failurePolicy: Ignore`).
JOB_FRAMEWORK = "batch/job"
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"
# Kueue runs a Deployment's pods as plain pods (pkg/controller/jobs/deployment/deployment_controller.go L40-48 @
# v0.19.2: ImplicitlyEnabledFrameworkNames ["pod"]): listed too, so the pod webhook that gates them fails closed.
DEPLOYMENT_FRAMEWORKS = ("deployment", "pod")
LWS_FRAMEWORK = "leaderworkerset.x-k8s.io/leaderworkerset"
# The chart's selector labels of the controller's pods (charts/kueue/templates/_helpers.tpl L64-68 @ v0.19.2) with
# the release and chart named kueue.
CONTROLLER_LABELS = {
    "app.kubernetes.io/name": "kueue",
    "app.kubernetes.io/instance": "kueue",
    "control-plane": "controller-manager",
}
# Beyond its pods' own start (GPU check, model load), what an admitted workload may take to get its pods Ready:
# scheduling, the image pull, a claim's binding.
PODS_READY_MARGIN_S = 600


@dataclass(frozen=True)
class QueuedWorkloads:
    """What the stack's queued workloads need of the Kueue it installs (schema.derived.queued_workloads)."""

    frameworks: tuple[str, ...]
    """Kueue integrations of their kinds."""
    uncounted: tuple[str, ...]
    """Resources their pods request that Kueue leaves out of every quota (`resources.excludeResourcePrefixes`)."""
    start_seconds: int
    """The longest an admitted workload's pods may take to become Ready by themselves."""


NOTHING_QUEUED = QueuedWorkloads(frameworks=(), uncounted=(), start_seconds=0)


ResourceName = Annotated[
    str, matching(r"([a-z0-9.-]+/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?", "a resource name such as amd.com/gpu or cpu")
]


class KueueConfig(ConfigModel):
    install: bool = True
    """False: the cluster already runs Kueue (the stack then declares only the queues)."""
    namespace: Name = "kueue-system"
    chart_version: Annotated[str, pinned_chart_version("0.19.2")] = KUEUE_CHART_VERSION
    """Version of the chart oci://registry.k8s.io/kueue/charts/kueue (its image is pinned to the same)."""
    timeout_seconds: int = Field(600, gt=0, le=MAX_WAIT_SECONDS)
    replicas: int | None = Field(None, ge=1, le=5, json_schema_extra=by_environment(dev=1, prod=2))
    """Controller replicas: one leads (leader election), every one serves the admission webhooks, and with more than
    one a PodDisruptionBudget keeps one up through drains."""

    def effective_replicas(self, environment: str) -> int:
        if self.replicas is not None:
            return self.replicas
        replicas: int = environment_default(KueueConfig, "replicas", environment)
        return replicas

    def manager_config(self, namespaces: list[str], queued: QueuedWorkloads) -> dict[str, Any]:
        """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2, apis/config/v1beta2/configuration_types.go @ v0.19.2).
        The chart takes it whole as one string (values.yaml L115-208: managerConfig.controllerManagerConfigYaml), so
        what it sets besides (health, metrics, webhook ports) is left to Kueue's defaults, which are the same
        (apis/config/v1beta2/defaults.go L36-40, L72-75)."""
        config: dict[str, Any] = {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            # One replica acts (leases); the others take over when it is lost, and all serve the webhooks (readyz
            # checks the webhook server only: cmd/kueue/main.go L642-649).
            "leaderElection": {"leaderElect": True},
            # Pod-based integrations only in these namespaces; the chart gives every webhook this namespaceSelector
            # (webhook/manifests.yaml L42-52, L320-330), so a Kueue outage blocks nothing elsewhere. Default: every
            # namespace but kube-system and Kueue's (defaults.go L124-132).
            "managedJobsNamespaceSelector": {
                "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(namespaces)}]
            },
            # An admitted workload whose pods are not all Ready within `timeout` (and again within it after one
            # fails) is evicted and requeued, releasing its quota (configuration_types.go L302-329; on by default
            # since v0.19 with 30m, defaults.go L99-117, which cuts a vLLM replica still loading its model).
            # Requeued after 60 s, doubling to 1 h, without limit (RequeuingStrategy defaults, L402-440).
            "waitForPodsReady": {"timeout": f"{queued.start_seconds + PODS_READY_MARGIN_S}s", "blockAdmission": False},
            "integrations": {"frameworks": list(queued.frameworks) or [JOB_FRAMEWORK]},
        }
        if queued.uncounted:
            # Dropped from every pod set's requests before quota (pkg/workload/workload.go L463-477, L677: a prefix
            # match, here of the whole name).
            config["resources"] = {"excludeResourcePrefixes": list(queued.uncounted)}
        return config

    def chart_values(self, environment: str, namespaces: list[str], queued: QueuedWorkloads) -> dict[str, object]:
        image = {"repository": KUEUE_IMAGE_REPOSITORY, "tag": f"v{self.chart_version}", "pullPolicy": "IfNotPresent"}
        replicas = self.effective_replicas(environment)
        manager: dict[str, object] = {"manager": {"image": image}, "replicas": replicas}
        if replicas > 1:
            # values.yaml L104-114: the chart's own PDB and spread settings.
            manager["podDisruptionBudget"] = {"enabled": True, "minAvailable": 1}
            manager["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": CONTROLLER_LABELS},
                }
            ]
        config = yaml.safe_dump(self.manager_config(namespaces, queued), sort_keys=False)
        return {"controllerManager": manager, "managerConfig": {"controllerManagerConfigYaml": config}}


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
    nominal: KubeQuantity
    """What the queue owns (`nominalQuota`)."""
    borrowing_limit: KubeQuantity | None = None
    """How much more it may borrow from its cohort (unset: all the cohort has unused; needs a cohort)."""
    lending_limit: KubeQuantity | None = None
    """How much of `nominal` its cohort may borrow (unset: all of it)."""


def _quota(value: Any) -> Any:
    # `amd.com/gpu: 16` is short for `amd.com/gpu: {nominal: 16}`.
    return {"nominal": value} if isinstance(value, (int, str)) else value


QuotaValue = Annotated[Quota, BeforeValidator(_quota)]


# The ClusterQueue CRD's bounds (config/components/crd/bases/kueue.x-k8s.io_clusterqueues.yaml @ v0.19.2, vendored in
# tests/data/kubernetes): at most 64 flavors in a resource group, 64 covered resources, 64 resources per flavor; and
# the webhook's: at most 512 flavor-resource combinations in a group (clusterqueue_webhook.go L213-229).
KUEUE_MAX_ITEMS = 64
KUEUE_MAX_COMBINATIONS = 512


class ClusterQueueConfig(ConfigModel):
    namespaces: list[Name] = Field(min_length=1, max_length=MAX_ITEMS)
    """Namespaces whose LocalQueues may point at this queue (its namespaceSelector)."""
    cohort: Name | None = None
    """Queues of one cohort borrow each other's unused quota, and reclaim it by preemption."""
    cpu: QuotaValue
    memory: QuotaValue
    """Kueue admits a job only if its queue covers every resource its pods request: the pods' CPU and memory (on
    any node: the flavor CPU_FLAVOR, no node labels) as well as their GPUs."""
    gpus: dict[Name, Annotated[dict[ResourceName, QuotaValue], Field(max_length=KUEUE_MAX_ITEMS)]] = Field(
        min_length=1, max_length=KUEUE_MAX_ITEMS
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
        combinations = len(self.gpus) * len(first)
        if combinations > KUEUE_MAX_COMBINATIONS:
            raise ValueError(
                f"gpus: {len(self.gpus)} flavors x {len(first)} resources are {combinations} flavor-resource "
                f"combinations, more than the {KUEUE_MAX_COMBINATIONS} Kueue's webhook takes in one resource group; "
                "split the queue"
            )
        # Kueue's ClusterQueue webhook (pkg/webhooks/clusterqueue_webhook.go @ v0.19.2): either limit "must be nil
        # when cohort is empty" (validateLimit L368-380), a lendingLimit "must be less than or equal to the
        # nominalQuota" (validateLendingLimit L383-389), compared as quantities (Quantity.Cmp).
        for where, quota in self.named_quotas():
            for key, limit in (("borrowingLimit", quota.borrowing_limit), ("lendingLimit", quota.lending_limit)):
                if limit is not None and self.cohort is None:
                    raise ValueError(
                        f"{where}.{key}: a {key} needs a cohort to {'borrow from' if key == 'borrowingLimit' else 'lend to'}"
                        f" (Kueue's webhook refuses it without one): set cohort, or remove {key}"
                    )
            if quota.lending_limit is not None and quantity_value(quota.lending_limit) > quantity_value(quota.nominal):
                raise ValueError(
                    f"{where}.lendingLimit: {quota.lending_limit} is more than the nominal {quota.nominal} (Kueue's "
                    "webhook refuses it: a queue lends at most what it owns); lower lendingLimit or raise nominal"
                )
        return self

    def named_quotas(self) -> list[tuple[str, Quota]]:
        """(key, quota) of each quota, keyed as the stack file writes it."""
        return [
            ("cpu", self.cpu),
            ("memory", self.memory),
            *(
                (f"gpus.{flavor}.{resource}", q)
                for flavor, quotas in self.gpus.items()
                for resource, q in quotas.items()
            ),
        ]

    @model_validator(mode="after")
    def _whole_gpus(self) -> ClusterQueueConfig:
        # A pod asks for whole GPUs: the API server refuses a fraction of an extended resource in a container's
        # requests ("must be an integer": kubernetes pkg/apis/core/validation/validation.go
        # ValidateResourceQuantityValue, IsIntegerResourceName), so a fraction of one in a quota is never used.
        for flavor, quotas in self.gpus.items():
            for resource, quota in quotas.items():
                for key, value in (
                    ("", quota.nominal),
                    (".borrowingLimit", quota.borrowing_limit),
                    (".lendingLimit", quota.lending_limit),
                ):
                    if value is not None and quantity_value(value) % 1:
                        raise ValueError(
                            f"gpus.{flavor}.{resource}{key}: {value} is {quantity_value(value).normalize():f} GPUs, not a "
                            "whole number; a pod requests whole GPUs (Kubernetes refuses a fraction of an extended "
                            "resource), so write a whole number"
                        )
        return self

    def quotas(self) -> list[Quota]:
        return [self.cpu, self.memory, *(q for quotas in self.gpus.values() for q in quotas.values())]

    def gpu_resources(self) -> list[str]:
        return sorted(next(iter(self.gpus.values())))

    def covered_resources(self) -> list[str]:
        """What its resource groups cover (components/k8s/kueue.py cluster_queue_spec): Kueue admits no workload
        that requests anything else (pkg/scheduler/flavorassigner/flavorassigner.go L1069-1072 @ v0.19.2: "resource
        %s unavailable in ClusterQueue"; BlockUndeclared is the strategy, cmd/kueue/main.go L730-736)."""
        return ["cpu", "memory", *self.gpu_resources()]


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

    def queued_namespaces(self) -> list[str]:
        """Where queued workloads run: the namespaces of every ClusterQueue."""
        return sorted({namespace for queue in self.cluster_queues.values() for namespace in queue.namespaces})

    def local_queue(self, namespace: str, name: str) -> LocalQueueConfig | None:
        return next((q for q in self.local_queues if (q.namespace, q.name) == (namespace, name)), None)
