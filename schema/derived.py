"""What the program derives from the whole stack's workloads: the partitions they claim, their GPU family, the
queues' needs, each namespace's Pod Security level, the GPU pools and the hosts' data directories (components read
them; the checks too)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Protocol


import rules

from .checks import ChecksConfig
from domain.gpus import MODELS

from .docker import (
    ContainerConfig,
    HostConfig,
    ImageRef,
    SecurityConfig,
)
from .kubernetes import (
    GPU_RESOURCE_NAME,
    KubernetesConfig,
)
from .monitoring import MonitoringConfig
from .queues import DEPLOYMENT_FRAMEWORKS, JOB_FRAMEWORK, JOBSET_FRAMEWORK, LWS_FRAMEWORK, QueuedWorkloads
from .workloads import (
    GpuFleet,
    HostPathStorage,
    InferenceConfig,
    InferenceKubernetes,
    TrainingConfig,
    TrainingDocker,
    TrainingKubernetes,
)


class StackWithWorkloads(Protocol):
    """What the checks read of StackConfig (read-only: the config is frozen; schema/__init__.py imports this module)."""

    @property
    def environment(self) -> str: ...

    @property
    def hosts(self) -> list[HostConfig]: ...

    @property
    def images(self) -> dict[str, ImageRef]: ...

    @property
    def kubernetes(self) -> KubernetesConfig | None: ...

    @property
    def monitoring(self) -> MonitoringConfig: ...

    @property
    def monitoring_host(self) -> str | None: ...

    @property
    def gpu_fleet(self) -> GpuFleet | None: ...

    @property
    def checks(self) -> ChecksConfig: ...

    @property
    def security(self) -> SecurityConfig: ...

    @property
    def training(self) -> list[TrainingConfig]: ...

    @property
    def inference(self) -> list[InferenceConfig]: ...


def partition_size(host: HostConfig, container: ContainerConfig) -> int:
    """GPUs of a partition: its indices, else its size (placed later by the loader), else the whole host."""
    if container.gpus is not None:
        return len(container.gpus)
    return container.gpu_count or host.logical_gpus


def by_kind(cfg: StackWithWorkloads) -> tuple[tuple[str, Sequence[TrainingConfig | InferenceConfig]], ...]:
    return ("training", cfg.training), ("inference", cfg.inference)


def partitions_claimed(cfg: StackWithWorkloads) -> dict[tuple[str, str], TrainingConfig | InferenceConfig]:
    """(host, container) -> the workload running in that Docker partition."""
    claimed: dict[tuple[str, str], TrainingConfig | InferenceConfig] = {}
    for _, workloads in by_kind(cfg):
        for workload in workloads:
            for ref in workload.docker.partitions if workload.docker else ():
                host, container = ref.split("/")
                claimed.setdefault((host, container), workload)
    return claimed


# The GPU Operator's node labeller label with the GPU's PCI device ID (domain/gpus.py `pci_device_id`).
DEVICE_ID_LABEL = "amd.com/gpu.device-id"


def kubernetes_gfx(node_selector: dict[str, str]) -> str | None:
    """The GPU family a Kubernetes workload's nodeSelector pins it to (by the labeller's device-id), else None."""
    device = node_selector.get(DEVICE_ID_LABEL, "").lower()
    return next((model.gfx for model in MODELS.values() if model.pci_device_id == device), None)


def namespace_pod_security(cfg: StackWithWorkloads, privileged: Collection[str] = ()) -> dict[str, str]:
    """The Pod Security level each namespace the stack owns enforces (Pod Security Admission's namespace label,
    https://kubernetes.io/docs/concepts/security/pod-security-admission/): `privileged` for the GPU layer's (the
    operator's driver, device plugin and exporter pods, the standalone device plugin, are privileged and mount
    the node's /sys and /dev) and for `privileged` (kube-prometheus-stack's node exporter shares the node's PID and
    network namespaces); for a workload namespace the most permissive `podSecurity` of its workloads (SYS_NICE and
    IPC_LOCK are not among baseline's capabilities:
    https://kubernetes.io/docs/concepts/security/pod-security-standards/); baseline for any other."""
    k8s = cfg.kubernetes
    if k8s is None:
        return {}
    needs = workload_namespace_needs(cfg)
    return {
        namespace: "privileged"
        if namespace == k8s.gpu_layer_namespace or namespace in privileged or needs[namespace].level() == "privileged"
        else "baseline"
        for namespace in k8s.owned_namespaces()
    }


def workload_namespace_needs(cfg: StackWithWorkloads) -> dict[str, rules.PodNeeds]:
    """Each owned namespace's needs beyond Pod Security baseline: those of the workloads the stack runs there."""
    needs: dict[str, rules.PodNeeds] = defaultdict(rules.PodNeeds)
    for name, k8s in _kubernetes_workloads(cfg):
        needs[k8s.namespace] = needs[k8s.namespace] | workload_pod_needs(k8s, name, cfg.environment)
    owned = cfg.kubernetes.owned_namespaces() if cfg.kubernetes is not None else []
    return {namespace: needs[namespace] for namespace in owned}


def _kubernetes_workloads(cfg: StackWithWorkloads) -> list[tuple[str, TrainingKubernetes | InferenceKubernetes]]:
    workloads: list[tuple[str, TrainingKubernetes | InferenceKubernetes]] = [
        (t.name, t.kubernetes) for t in cfg.training if t.kubernetes
    ]
    return workloads + [(i.name, i.kubernetes) for i in cfg.inference if i.kubernetes]


def pod_capabilities(k8s: TrainingKubernetes | InferenceKubernetes) -> list[str]:
    """What a workload's GPU containers add: SYS_NICE with numaBinding (libnuma's mbind and set_mempolicy are allowed
    only with CAP_SYS_NICE under the runtime's default seccomp profile: containerd contrib/seccomp/seccomp_default.go
    since v1.7.0, moby profiles/seccomp/default.json), IPC_LOCK with `network` (RDMA registers memory beyond the
    memlock limit: "This limit is not enforced if the process is privileged (CAP_IPC_LOCK)", man 2 mlock)."""
    return [*(["SYS_NICE"] if k8s.numa_binding else []), *(["IPC_LOCK"] if k8s.network is not None else [])]


def workload_pod_needs(k8s: TrainingKubernetes | InferenceKubernetes, name: str, environment: str) -> rules.PodNeeds:
    """What of Pod Security's baseline a workload's pods break (the pack reads the same from the plan's pods)."""
    storage = (
        k8s.effective_checkpoints(name, environment)
        if isinstance(k8s, TrainingKubernetes)
        else k8s.effective_model_cache(environment)
    )
    return rules.PodNeeds(
        capabilities=frozenset(pod_capabilities(k8s)),
        host_paths=frozenset([storage.path] if isinstance(storage, HostPathStorage) else []),
        host_network=k8s.network is not None and k8s.network.host_network,
    )


def queued_workloads(cfg: StackWithWorkloads) -> QueuedWorkloads:
    """What the queued Kubernetes workloads need of the Kueue the stack installs: the integrations of their kinds
    (a one-node training's Job, a multi-node one's JobSet, a vLLM Deployment's pods, a multi-node vLLM's
    LeaderWorkerSet), the RDMA resources their pods request (pod_requests), which Kueue leaves out of the quota (the
    RDMA device plugin advertises a node's HCA shares as a count, rdmaHcaMax, that the kube-scheduler checks per
    node; the GPU quota already bounds the pods that ask for them), and how long their pods take to start."""
    trainings = [t for t in cfg.training if t.kubernetes is not None and t.kubernetes.queue_name is not None]
    servers = [i for i in cfg.inference if i.kubernetes is not None and i.kubernetes.queue_name is not None]
    kinds = {
        (JOB_FRAMEWORK,): any(not t.kubernetes.uses_job_set for t in trainings if t.kubernetes),
        (JOBSET_FRAMEWORK,): any(t.kubernetes.uses_job_set for t in trainings if t.kubernetes),
        DEPLOYMENT_FRAMEWORKS: any(not i.kubernetes.multi_node for i in servers if i.kubernetes),
        (LWS_FRAMEWORK,): any(i.kubernetes.multi_node for i in servers if i.kubernetes),
    }
    queues = cfg.kubernetes.queues if cfg.kubernetes is not None else None
    networks = [t.kubernetes.network for t in trainings if t.kubernetes] + [
        i.kubernetes.network for i in servers if i.kubernetes
    ]
    return QueuedWorkloads(
        frameworks=tuple(name for names, used in kinds.items() if used for name in names),
        # Only a Kueue the stack installs takes the stack's configuration.
        uncounted=tuple(sorted({n.rdma.resource for n in networks if n is not None}))
        if queues is not None and queues.kueue.install
        else (),
        start_seconds=max(
            [
                *(t.pod_start_seconds(cfg.checks) for t in trainings),
                *(i.replica_start_seconds(cfg.checks) for i in servers),
            ],
            default=0,
        ),
    )


@dataclass(frozen=True)
class GpuPool:
    """Kubernetes GPU nodes alike: `nodes` of them each advertise `per_node` of `resource`; `key` declares them."""

    resource: str
    nodes: int
    per_node: int
    key: str


def gpu_pools(cfg: StackWithWorkloads) -> list[GpuPool]:
    """The declared GPU nodes by what they advertise: `gpuFleet` (nodes without a partition profile, amd.com/gpu)
    and the nodes of each partition profile (its resource under the stack's naming strategy)."""
    pools = []
    if cfg.gpu_fleet is not None:
        pools.append(GpuPool(GPU_RESOURCE_NAME, cfg.gpu_fleet.nodes, cfg.gpu_fleet.gpus_per_node, "gpuFleet"))
    k8s = cfg.kubernetes
    if k8s is None:
        return pools
    for name, profile in sorted(k8s.partition_profiles.items()):
        if profile.nodes:
            pools.append(
                GpuPool(
                    profile.resource_name(k8s.resource_naming_strategy),
                    profile.nodes,
                    profile.logical_gpus_per_node,
                    f"kubernetes.partitionProfiles.{name}.nodes",
                )
            )
    return pools


def host_data_dirs(cfg: StackWithWorkloads, host: str) -> list[str]:
    """The host directories whose filesystems fill up under the workloads on `host`: the checkpoint roots of its
    trainings and the model-cache roots of its vLLM servers (node-exporter reports their free space)."""
    dirs = set()
    for _, workloads in by_kind(cfg):
        for workload in workloads:
            placement = workload.docker
            if placement is None or not any(ref.split("/")[0] == host for ref in placement.partitions):
                continue
            dirs.add(placement.checkpoint_dir if isinstance(placement, TrainingDocker) else placement.model_cache_dir)
    return sorted(dirs)


def parallel_layout(inference: InferenceConfig) -> str:
    """The model's parallel layout in words (tensorParallelSize 4 x pipelineParallelSize 2)."""
    tp, pp = inference.tensor_parallel_size, inference.pipeline_parallel_size
    return f"tensorParallelSize {tp}" if pp == 1 else f"tensorParallelSize {tp} x pipelineParallelSize {pp}"
