"""Kueue (kubernetes-sigs/kueue) from its pinned OCI Helm chart, and the stack's queues: ResourceFlavors per GPU
family, ClusterQueues with quotas and cohorts, LocalQueues per namespace, and the PriorityClasses of training and
serving pods.

Kueue admits a Job or JobSet labelled `kueue.x-k8s.io/queue-name` as one Workload (all its pods or none): its
webhook creates it suspended, and Kueue unsuspends it once the ClusterQueue has quota for every pod; preempting it
suspends it again, which deletes its pods (SIGTERM: train.py checkpoints), and the next admission resumes it from
that checkpoint. Its priority is the pods' PriorityClass (pkg/controller/jobframework/reconciler.go L1716-1723
@ v0.19.2: ExtractPriority from the pod sets' priorityClassName).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.helm import v3 as helm_v3
from pulumi_kubernetes.meta import v1 as meta_v1
from pulumi_kubernetes.scheduling import v1 as scheduling_v1

from schema.queues import (
    KUEUE_API_VERSION,
    KUEUE_CHART,
    CPU_FLAVOR,
    NAMESPACE_NAME_LABEL,
    SERVING_PRIORITY_CLASS,
    TRAINING_PRIORITY_CLASS,
    ClusterQueueConfig,
    QueuedWorkloads,
    QueuesConfig,
    Quota,
)
from components.k8s.helm import pinned_release
from components.k8s.replacement import replacement
from components.supply import kueue_images

RELEASE_NAME = "kueue"
LABELS = {"app.kubernetes.io/managed-by": "rocm-stack"}


def _resource(name: str, quota: Quota) -> dict[str, Any]:
    limits = {"borrowingLimit": quota.borrowing_limit, "lendingLimit": quota.lending_limit}
    return {"name": name, "nominalQuota": quota.nominal, **{k: v for k, v in limits.items() if v is not None}}


def cluster_queue_spec(queue: ClusterQueueConfig) -> dict[str, Any]:
    """Two resource groups: CPU and memory on the node-neutral CPU_FLAVOR, the GPU resources on the GPU flavors
    (a resource belongs to one group, and each flavor of a group quotes all of its resources)."""
    gpu_resources = queue.gpu_resources()
    spec: dict[str, Any] = {
        "namespaceSelector": {
            "matchExpressions": [{"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(queue.namespaces)}]
        },
        # Within the queue a higher-priority job may preempt a lower one; quota lent to the cohort is taken back
        # from any borrower ("reclaimWithinCohort: Any"); a workload that must borrow may preempt lower-priority
        # ones of the cohort's other queues (borrowWithinCohort, apis/kueue/v1beta2/clusterqueue_types.go L539-594
        # @ v0.19.2): a vLLM burst beyond its queue's quota suspends training jobs, through Kueue.
        "preemption": {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
            "borrowWithinCohort": {"policy": "LowerPriority"},
        },
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory"],
                "flavors": [
                    {"name": CPU_FLAVOR, "resources": [_resource("cpu", queue.cpu), _resource("memory", queue.memory)]}
                ],
            },
            {
                "coveredResources": gpu_resources,
                "flavors": [
                    {"name": flavor, "resources": [_resource(name, queue.gpus[flavor][name]) for name in gpu_resources]}
                    for flavor in sorted(queue.gpus)
                ],
            },
        ],
    }
    if queue.cohort is not None:
        spec["cohortName"] = queue.cohort
    return spec


@dataclass(frozen=True)
class KueueArgs:
    config: QueuesConfig
    environment: str
    provider: Provider
    namespace_name: Callable[[str], pulumi.Input[str]]
    """A namespace's name (the resource's output when the stack owns it, so objects wait for it)."""
    queued: QueuedWorkloads
    """What the stack's queued workloads need of Kueue's configuration."""


class Kueue(pulumi.ComponentResource):
    release: helm_v3.Release | None
    priority_classes: dict[str, scheduling_v1.PriorityClass]
    flavors: dict[str, CustomResource]
    cluster_queues: dict[str, CustomResource]
    local_queues: dict[str, CustomResource]

    def __init__(self, name: str, args: KueueArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:Kueue", name, None, opts)
        config, kueue = args.config, args.config.kueue
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        # The chart keeps its CRDs in templates/crd/ (charts/kueue/templates/crd/*.yaml @ v0.19.2), not crds/: Helm
        # applies them with every install and upgrade, so a new chart version upgrades them; the release is
        # protected in prod (uninstalling it would delete the CRDs and every queue and Workload with them).
        self.release = (
            pinned_release(
                name,
                release_name=RELEASE_NAME,
                chart=KUEUE_CHART,
                version=kueue.chart_version,
                repository=None,
                namespace=args.namespace_name(kueue.namespace),
                values=kueue.chart_values(args.environment, config.queued_namespaces(), args.queued),
                timeout_seconds=kueue.timeout_seconds,
                environment=args.environment,
                parent=self,
                provider=args.provider,
                create_namespace=True,
                images=kueue_images(kueue.chart_version),
            )
            if kueue.install
            else None
        )
        after = pulumi.ResourceOptions.merge(
            child, pulumi.ResourceOptions(depends_on=[self.release] if self.release is not None else None)
        )

        def metadata(object_name: str, namespace: pulumi.Input[str] | None = None) -> meta_v1.ObjectMetaArgs:
            return meta_v1.ObjectMetaArgs(name=object_name, namespace=namespace, labels=LABELS)

        self.priority_classes = {
            key: scheduling_v1.PriorityClass(
                f"priority-{key}",
                metadata=metadata(class_name),
                value=value,
                global_default=False,
                # Training pods wait for Kueue, never evict others; vLLM's may evict training pods when GPUs are short.
                preemption_policy=policy,
                description=description,
                # value and preemptionPolicy are immutable: a new value is a new class, under the same name.
                opts=pulumi.ResourceOptions.merge(child, replacement("scheduling.k8s.io/v1", "PriorityClass")),
            )
            for key, class_name, value, policy, description in (
                (
                    "training",
                    TRAINING_PRIORITY_CLASS,
                    config.priorities.training,
                    "Never",
                    "rocm-stack training pods (admitted by Kueue)",
                ),
                (
                    "serving",
                    SERVING_PRIORITY_CLASS,
                    config.priorities.serving,
                    "PreemptLowerPriority",
                    "rocm-stack vLLM pods",
                ),
            )
        }

        def kueue_object(
            resource_name: str,
            kind: str,
            meta: meta_v1.ObjectMetaArgs,
            spec: dict[str, Any],
            needs: list[pulumi.Resource],
        ) -> CustomResource:
            return CustomResource(
                resource_name,
                api_version=KUEUE_API_VERSION,
                kind=kind,
                metadata=meta,
                spec=spec,
                opts=pulumi.ResourceOptions.merge(
                    after,
                    pulumi.ResourceOptions.merge(
                        replacement(KUEUE_API_VERSION, kind, {"spec": spec}),
                        pulumi.ResourceOptions(depends_on=needs or None),
                    ),
                ),
            )

        node_labels = {CPU_FLAVOR: {}, **{name: flavor.node_labels() for name, flavor in config.flavors.items()}}
        self.flavors = {
            name: kueue_object(
                f"flavor-{name}", "ResourceFlavor", metadata(name), {"nodeLabels": labels} if labels else {}, []
            )
            for name, labels in sorted(node_labels.items())
        }
        self.cluster_queues = {
            name: kueue_object(
                f"cluster-queue-{name}",
                "ClusterQueue",
                metadata(name),
                cluster_queue_spec(queue),
                [self.flavors[f] for f in [CPU_FLAVOR, *sorted(queue.gpus)]],
            )
            for name, queue in sorted(config.cluster_queues.items())
        }
        self.local_queues = {
            f"{local.namespace}/{local.name}": kueue_object(
                f"local-queue-{local.namespace}.{local.name}",
                "LocalQueue",
                metadata(local.name, args.namespace_name(local.namespace)),
                {"clusterQueue": local.cluster_queue},
                [self.cluster_queues[local.cluster_queue]],
            )
            for local in config.local_queues
        }
        # What queued jobs wait for: the webhook that suspends them, and the PriorityClasses their pods name.
        self.ready: list[pulumi.Resource] = [*filter(None, [self.release]), *self.priority_classes.values()]
        self.register_outputs(
            {
                "clusterQueues": sorted(self.cluster_queues),
                "localQueues": sorted(self.local_queues),
            }
        )
