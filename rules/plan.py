"""What the engine hands a policy, as the rules read it: the resource type tokens, the stack's labels, the readers of
the engine's property proxies (Mapping/Sequence only) and the pod specs of every workload kind."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
CONTAINER = "docker:index/container:Container"
DOCKER_PROVIDER = "pulumi:providers:docker"
DEVICE_CONFIG = "kubernetes:amd.com/v1alpha1:DeviceConfig"
NAMESPACE = "kubernetes:core/v1:Namespace"
SERVICE = "kubernetes:core/v1:Service"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
# JobSet (kubernetes-sigs/jobset v0.12.0 api/jobset/v1alpha2): each replicatedJobs[].template is a batch/v1 JobTemplate.
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
HELM_TYPES = (HELM_RELEASE, "kubernetes:helm.sh/v4:Chart")
GPU_RESOURCE = "amd.com/gpu"
# Docker label on every GPU partition's container (a partition's shell or the workload running in it): host/container.
PARTITION_LABEL = "rocm-stack.partition"
# Docker labels of the one-shot containers: a host check (preflight, GPU check) and a vLLM server's health check.
CHECK_LABEL = "rocm-stack.check"
HEALTH_LABEL = "rocm-stack.health"
DRI = "/dev/dri"

# Where each workload kind keeps its pod spec.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:core/v1:ReplicationController": ("spec", "template", "spec"),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def _dig(props: Mapping[str, Any], path: Iterable[str]) -> Any:
    value: Any = props
    for key in path:
        value = _mapping(value).get(key)
    return value


def pod_specs(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, pod spec) of every pod template a resource declares: a workload kind's one, each replicated job's of a
    JobSet; none for anything else. Every pod rule reads pods through this."""
    if resource_type == JOBSET:
        jobs = map(_mapping, _sequence(_dig(props, ("spec", "replicatedJobs"))))
        return [
            (f"replicated job '{job.get('name')}': ", _mapping(_dig(job, ("template", "spec", "template", "spec"))))
            for job in jobs
        ]
    path = _POD_SPEC_PATHS.get(resource_type)
    return [("", _mapping(_dig(props, path)))] if path else []


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field in ("initContainers", "containers"):
        yield from (_mapping(c) for c in _sequence(spec.get(field)))


# The stack's own monitoring containers carry this label (value: node-exporter, cadvisor, prometheus, ...); a
# partition never does (it carries PARTITION_LABEL; the stack config sets no container label).
MONITORING_LABEL = "rocm-stack.monitoring"


def _label(props: Mapping[str, Any], name: str) -> str | None:
    for label in map(_mapping, _sequence(props.get("labels"))):
        if label.get("label") == name:
            return str(label.get("value"))
    return None


SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"


NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
LEADER_WORKER_SET = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"


# --- stack rules ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """A resource as stack validation sees it."""

    type: str
    name: str
    props: Mapping[str, Any]
    protect: bool
    urn: str = ""
