"""`rocm-stack:training`, `rocm-stack:inference` and `rocm-stack:gpuFleet`: the GPU workloads and where they run.

`training` and `inference` are lists (absent: no workload). Each workload runs on Kubernetes (its
`kubernetes` block), on Docker GPU-host partitions (its `docker` block), or both:

- Docker: a partition is one of the foundation's container slots `rocm-stack:hosts[].containers[]`, named
  `host/container`. A workload that claims a partition runs in that container: the workload decides the image,
  command, shared memory and restart policy (GpuHost no longer declares the container); the partition gives
  the GPUs (its `HIP_VISIBLE_DEVICES` split), host-specific `env` (which wins) and extra `volumes`.
- Kubernetes: a training of one node is a Job, of several nodes a JobSet (one pod per node, started and
  restarted together); each pod has `gpusPerNode` GPUs; an inference is a Deployment of `replicas` pods with
  `gpus` GPUs each. Every pod requests `cpu` and `memory` (+ /dev/shm) so it is never BestEffort. The cluster cannot be asked offline, so its GPU nodes
  are declared in `rocm-stack:gpuFleet`; problems() uses it to refuse workloads that could never be scheduled.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, Protocol

from pydantic import AfterValidator, ByteSize, Field, model_validator

from policy.rocm_policy import rules

from .base import ConfigModel, by_environment, environment_default, shown_default
from .bounds import (
    MAX_BATCH,
    MAX_DEADLINE_SECONDS,
    MAX_GID_INDEX,
    MAX_ITEMS,
    MAX_NODES,
    MAX_PODS,
    MAX_RETRIES,
    MAX_STEPS,
    MAX_TOLERATION_SECONDS,
)
from .types import (
    DNS_LABEL,
    MAX_STOP_GRACE_SECONDS,
    AbsolutePath,
    EnvName,
    EnvValue,
    GpuCount,
    LabelKey,
    Labels,
    LabelValue,
    Port,
    DnsSubdomain,
    KubeQuantity,
    PodMemory,
    quantity_value,
    TaintEffect,
    WorkloadShmSize,
    StopGraceSeconds,
    WaitSeconds,
    _human_bytes,
)
from .base import matching as _matching
from .autoscaling import (
    MAX_DRAIN_SECONDS,
    InferenceAutoscaling,
    autoscaling_problems,
    stack_autoscaling_problems,
)
from .checks import ChecksConfig
from .stackfile import set_secret
from domain.gpus import MAX_GPUS_PER_HOST, MODELS

from .docker import (
    VISIBILITY_VARIABLES,
    ContainerConfig,
    HostConfig,
    ImageRef,
    IpAddress,
    PinnedImage,
    host_gfx,
    image_for,
    no_image_problem,
)
from .kubernetes import (
    BUILTIN_NAMESPACES,
    GPU_RESOURCE_NAME,
    SCHEDULER_FILTERED_TAINT_EFFECTS,
    GpuNodeTaint,
    KubernetesConfig,
    NamespaceName,
    NodeDrainPolicy,
)
from . import monitoring
from .monitoring import MonitoringConfig
from .queues import DEPLOYMENT_FRAMEWORKS, JOB_FRAMEWORK, JOBSET_FRAMEWORK, LWS_FRAMEWORK, QueuedWorkloads


# A DNS-1035 label (Services must start with a letter), short enough for the suffixes derived from it
# (`<name>-model-cache`, pod hostnames `<name>-<index>`) to stay within 63 characters.
WorkloadName = Annotated[
    str,
    _matching(
        r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?",
        "lowercase letters, digits and '-', starting with a letter, at most 40 characters",
    ),
]
PartitionRef = Annotated[
    str, _matching(f"{DNS_LABEL}/{DNS_LABEL}", "'host/container' of a partition in rocm-stack:hosts")
]
# An extended resource `<domain>/<name>` (e.g. rdma/hca_shared_devices_a).
ExtendedResource = Annotated[
    str,
    _matching(
        r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?",
        "an extended resource name '<prefix>/<name>', e.g. rdma/hca_shared_devices_a",
    ),
]
# What the AMD device plugin advertises: amd.com/gpu, or a partition mode under the `mixed` naming strategy.
GpuResourceName = Annotated[
    str,
    _matching(
        r"amd\.com/(gpu|(spx|dpx|qpx|cpx)_(nps1|nps2|nps4))",
        "amd.com/gpu or a partition resource amd.com/<compute>_<memory>, e.g. amd.com/cpx_nps4",
    ),
]
InterfaceName = Annotated[str, _matching(r"[A-Za-z0-9_.:-]{1,15}", "a network interface name, e.g. eth0 or net1")]
# A Hugging Face repository id (`org/name`).


def _hub_repo_id(value: str) -> str:
    # huggingface_hub validate_repo_id (what vLLM's download calls; https://huggingface.co/docs/huggingface_hub/
    # package_reference/utilities#huggingface_hub.utils.validate_repo_id): "--" and ".." are forbidden, no ".git" end.
    if "--" in value or ".." in value or value.endswith(".git"):
        raise ValueError(f"{value!r} is no Hugging Face repository id: it may not hold '--' or '..' nor end in .git")
    return value


# The repository name: 1 to 96 of [a-zA-Z0-9], '-', '_', '.', starting and ending with a letter, digit or '_' (the
# regex's word boundaries).
ModelId = Annotated[
    str,
    _matching(
        r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?/[A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?",
        "a Hugging Face repository id 'org/name'",
    ),
    AfterValidator(_hub_repo_id),
]
EntryPoint = Annotated[str, _matching(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", "'module:function', e.g. mypkg.train:main")]

# NCCL's own advice for production: WARN prints an explicit message when a collective fails, nothing else
# (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-debug; RCCL reads the same variables).
TRAINING_RCCL_ENV: dict[str, str] = {"NCCL_DEBUG": "WARN"}

# AMD's "vLLM V1 performance optimization" guide for MI300X/MI325X/MI350X/MI355X, section "Performance
# environment variables" (https://rocm.docs.amd.com/en/docs-7.2.0/how-to/rocm-for-ai/inference-optimization/
# vllm-optimization.html): AITER's fused kernels (master switch, off by default in vLLM), device kernel
# arguments, GPU-side safetensors loading and hipBLASLt GEMMs. The rocm/vllm images already set some of these;
# setting them again keeps behaviour the same on images that do not.
INFERENCE_ROCM_ENV: dict[str, str] = {
    "VLLM_ROCM_USE_AITER": "1",
    "HIP_FORCE_DEV_KERNARG": "1",
    "SAFETENSORS_FAST_GPU": "1",
    "TORCH_BLAS_PREFER_HIPBLASLT": "1",
}
# Same guide: 112 RCCL channels on MI300X help only multi-GPU (tensor/pipeline/data-parallel) serving.
MULTI_GPU_INFERENCE_ENV: dict[str, str] = {"NCCL_MIN_NCHANNELS": "112"}


def _env_shown(env: dict[str, str]) -> str:
    """A default environment map as the reference shows it."""
    return ", ".join(f"`{name}={value}`" for name, value in env.items())


# Same guide, "Data parallelism": "For ROCm, currently use VLLM_ALL2ALL_BACKEND="allgather_reducescatter" and
# --disable-nccl-for-dp-synchronization with data parallelism."
DATA_PARALLEL_INFERENCE_ENV: dict[str, str] = {"VLLM_ALL2ALL_BACKEND": "allgather_reducescatter"}
DATA_PARALLEL_VLLM_FLAGS = ("--disable-nccl-for-dp-synchronization",)

# Hugging Face repositories whose models are all gated (licence to accept): a token is required.
KNOWN_GATED_MODEL_PREFIXES = ("meta-llama/", "google/gemma")

# Flags the VllmServer derives from config; giving them in extraArgs too would contradict it.
VLLM_MANAGED_FLAGS = (
    "--host",
    "--port",
    "--tensor-parallel-size",
    "-tp",
    "--pipeline-parallel-size",
    "-pp",
    "--data-parallel-size",
    "-dp",
    "--revision",
    # vLLM's multi-node launch (multinode.py), vllm/engine/arg_utils.py L757-760 @ v0.11.2, cli_args.py L258.
    "--distributed-executor-backend",
    "--nnodes",
    "-n",
    "--node-rank",
    "-r",
    "--master-addr",
    "--master-port",
    "--headless",
)
# Environment variables the components set from other keys.
TRAINING_MANAGED_ENV = (
    "CHECKPOINT_DIR",
    "TRAIN_STEPS",
    "BATCH_SIZE",
    "CHECKPOINT_EVERY",
    "CHECKPOINT_KEEP",
    "TRAIN_PRECISION",
    "TRAIN_ENTRYPOINT",
    "TRAIN_BACKEND",
    *VISIBILITY_VARIABLES,
)
INFERENCE_MANAGED_ENV = ("HF_TOKEN", "HF_TOKEN_PATH", "HF_HOME", "VLLM_API_KEY", *VISIBILITY_VARIABLES)
# What `training[].kubernetes.network` sets: naming them in env/rcclEnv too would contradict it.
NETWORK_MANAGED_ENV = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX")
# Partition keys a claiming workload decides; setting them on the partition would be silently ignored.
PARTITION_KEYS_DECIDED_BY_WORKLOAD = ("image", "command", "shm_size", "ports", "restart", "stop_grace_seconds")

# The training container's main process is torchrun. On SIGTERM its elastic agent sends the signal to every worker,
# waits up to its shutdown timeout for them to exit, SIGKILLs the rest, then exits itself (torch 2.13:
# torch/distributed/elastic/agent/server/api.py L752-756 `_shutdown(e.sigval, timeout=self._shutdown_timeout)`,
# multiprocessing/api.py L1023-1053 `_close`: signal, wait, SIGKILL). The timeout was a fixed 30 s until
# pytorch/pytorch#172596 (2026-03) made it `--shutdown-timeout` / TORCH_ELASTIC_SHUTDOWN_TIMEOUT (launcher/api.py
# L145-149, default 30). The variable is set (an older torchrun ignores it, a flag it would refuse), and the
# container's grace leaves torchrun TORCHRUN_EXIT_MARGIN_S after it to reap its workers and exit before Docker's
# SIGKILL; the grace is therefore at least the fixed 30 s plus that margin.
TORCHRUN_SHUTDOWN_ENV = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
TORCHRUN_FIXED_SHUTDOWN_S = 30
TORCHRUN_EXIT_MARGIN_S = 10
# A training's stop grace (a container's or a pod's): torchrun's fixed shutdown plus the margin at least.
TrainingGraceSeconds = Annotated[
    int, Field(ge=TORCHRUN_FIXED_SHUTDOWN_S + TORCHRUN_EXIT_MARGIN_S, le=MAX_STOP_GRACE_SECONDS)
]
DEFAULT_TRAINING_GRACE_SECONDS = 300


def merged_env(defaults: Mapping[str, str], overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Config maps merge over the defaults; a `null` value removes a default."""
    merged: dict[str, str | None] = {**defaults, **overrides}
    return {k: v for k, v in merged.items() if v is not None}


class GpuFleet(ConfigModel):
    """The GPU nodes of the Kubernetes cluster advertising amd.com/gpu (all alike; partition profiles declare their
    own nodes)."""

    nodes: int = Field(ge=1, le=MAX_NODES)
    gpus_per_node: GpuCount

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


class Toleration(ConfigModel):
    key: LabelKey | None = None
    operator: Literal["Exists", "Equal"] = "Exists"
    value: LabelValue | None = None
    effect: TaintEffect | None = None
    toleration_seconds: int | None = Field(None, ge=0, le=MAX_TOLERATION_SECONDS)

    @model_validator(mode="after")
    def _kubernetes_rules(self) -> Toleration:
        # kubernetes pkg/apis/core/validation/validation.go ValidateTolerations.
        if self.key is None and self.operator != "Exists":
            raise ValueError("operator must be Exists when `key` is empty (it then tolerates every taint); set a key")
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists; remove it, or set operator Equal")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("tolerationSeconds needs effect NoExecute (only NoExecute taints evict a running pod)")
        return self

    def tolerates(self, taint: GpuNodeTaint) -> bool:
        """core/v1 Toleration semantics: an empty effect matches every effect, an empty key with Exists every
        taint, Exists any value of the key, Equal only the same value."""
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.key is None:
            return self.operator == "Exists"
        return self.key == taint.key and (self.operator == "Exists" or self.value == taint.value)


# The default of a workload's `tolerations`, as the config reference shows it.
TAINT_TOLERATIONS_DEFAULT = shown_default("one per `kubernetes.gpuNodeTaints` (none without)")


def pod_tolerations(tolerations: list[Toleration] | None, taints: Iterable[GpuNodeTaint]) -> list[Toleration]:
    """A workload's `tolerations`, or unset those of the GPU nodes' taints: the same tolerations as the GPU layer's
    DaemonSets get (GpuNodeTaint.toleration), so a taint the stack declares is one its GPU pods tolerate."""
    if tolerations is not None:
        return tolerations
    return [Toleration.model_validate(taint.toleration()) for taint in taints]


class PvcStorage(ConfigModel):
    type: Literal["pvc"]
    # None: the cluster's default StorageClass.
    storage_class: DnsSubdomain | None = None
    size: KubeQuantity = "100Gi"
    # ReadWriteMany: every pod (every node of a training job, every replica of a server) mounts the same volume.
    access_mode: Literal["ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"] = "ReadWriteMany"


class HostPathStorage(ConfigModel):
    type: Literal["hostPath"]
    path: AbsolutePath


class EmptyDirStorage(ConfigModel):
    type: Literal["emptyDir"]
    size_limit: KubeQuantity | None = None


PodSecurityLevel = Literal["privileged", "baseline"]


class RdmaResource(ConfigModel):
    """The RDMA device plugin's resource (Mellanox/k8s-rdma-shared-dev-plugin: `<resourcePrefix>/<resourceName>`,
    prefix default "rdma", README example resourceName "hca_shared_devices_a")."""

    resource: ExtendedResource
    """The RDMA device plugin's extended resource, e.g. `rdma/hca_shared_devices_a`."""
    count: int = Field(1, ge=1, le=MAX_ITEMS)
    """How many of it each training pod requests."""


class TrainingNetwork(ConfigModel):
    """RDMA for RCCL between the pods of a multi-node training or vLLM replica. Without it RCCL uses its socket (TCP)
    transport over the pod network."""

    rdma: RdmaResource
    """The RDMA resource every pod requests."""
    host_network: bool = False
    """The pods use the node's network namespace (its RDMA NICs directly); makes the namespace privileged."""
    networks: str | None = None
    """Multus secondary network(s): the pod annotation `k8s.v1.cni.cncf.io/networks`, e.g. `rdma-net`."""
    interface: InterfaceName
    """NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME: the pod's `eth0`, the secondary network's `net1`, or the host
    NIC with hostNetwork."""
    ib_hca: str | None = None
    """NCCL_IB_HCA (RCCL src/transport/net_ib.cc), e.g. `mlx5_0,mlx5_1`; unset: every HCA."""
    ib_gid_index: int | None = Field(None, ge=0, le=MAX_GID_INDEX)
    """NCCL_IB_GID_INDEX; unset leaves RCCL's default -1, which picks a RoCEv2 GID itself (net_ib.cc
    `NCCL_PARAM(IbGidIndex, "IB_GID_INDEX", -1)`); 3 is the usual RoCEv2/IPv4 index, not a rule."""

    def env(self) -> dict[str, str]:
        """RCCL reads NCCL_* (AMD Primus multi-node networking guide: "most NCCL-prefixed environment variables
        apply to RCCL as well"); Gloo reads GLOO_SOCKET_IFNAME (PyTorch distributed docs)."""
        env = {"NCCL_SOCKET_IFNAME": self.interface, "GLOO_SOCKET_IFNAME": self.interface}
        if self.ib_hca is not None:
            env["NCCL_IB_HCA"] = self.ib_hca
        if self.ib_gid_index is not None:
            env["NCCL_IB_GID_INDEX"] = str(self.ib_gid_index)
        return env


MIB = 1024 * 1024


def pod_requests(
    gpu_resource: str, gpus: int, cpu: str, memory_bytes: int, shm_bytes: int, network: TrainingNetwork | None
) -> dict[str, str]:
    """What each GPU pod of a Kubernetes workload requests, equal to its limits (components/workloads/pods.py
    pod_resources): the one definition of the pods' resources, which Kueue counts against the pods' ClusterQueue
    (schema/queues.py). Memory covers the working set and the memory-backed /dev/shm; `network` adds its RDMA
    resource."""
    return {
        "cpu": cpu,
        "memory": f"{-(-(memory_bytes + shm_bytes) // MIB)}Mi",  # rounded up: never less than asked
        gpu_resource: str(gpus),
        **({network.rdma.resource: str(network.rdma.count)} if network is not None else {}),
    }


CheckpointStorage = Annotated[PvcStorage | HostPathStorage, Field(discriminator="type")]
ModelCacheStorage = Annotated[PvcStorage | HostPathStorage | EmptyDirStorage, Field(discriminator="type")]


class TrainingKubernetes(ConfigModel):
    @model_validator(mode="before")
    @classmethod
    def _no_torchrun_restarts(cls, data: object) -> object:
        # Static rendezvous (training.torchrun_multinode) cannot restart one node's workers alone: say what replaced it.
        if isinstance(data, dict) and ("maxRestarts" in data or "max_restarts" in data):
            raise ValueError(
                "maxRestarts is no longer used: a failed worker fails its pod and the whole JobSet restarts from the "
                "newest checkpoint, up to backoffLimit times (docs/workloads.md); remove it, and set backoffLimit "
                "instead if you need another number of restarts"
            )
        return data

    namespace: NamespaceName = "default"
    """A built-in namespace or one declared in `kubernetes.namespaces`."""
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    """Pods of the job (one per node)."""
    gpus_per_node: GpuCount = 1
    """GPUs (`gpuResource`) each pod requests."""
    gpu_resource: GpuResourceName = GPU_RESOURCE_NAME
    """The extended resource each pod requests `gpusPerNode` of: a partition resource such as amd.com/cpx_nps4 runs
    on nodes of a `kubernetes.partitionProfiles` profile (with `resourceNamingStrategy: mixed`)."""
    cpu: KubeQuantity = "16"
    """CPU request = limit of each pod (Guaranteed QoS: evicted last)."""
    memory: PodMemory = ByteSize(64 * 1024**3)
    """Working set of each pod besides /dev/shm: its memory request = limit is this + shmSize (tmpfs pages count
    against the container's memory)."""
    numa_binding: bool = False
    """SYS_NICE for the pods, which libnuma (numactl, ROCm's NUMA-aware allocator) needs to bind memory under the
    runtime's default seccomp profile; Pod Security baseline forbids it, so the namespace becomes privileged."""
    pod_security: PodSecurityLevel | None = Field(None, json_schema_extra=shown_default("what its pods need"))
    """The namespace's enforced Pod Security level; unset: what the pods need, baseline unless numaBinding, `network`
    (IPC_LOCK, hostNetwork) or a hostPath volume asks for privileged. A level laxer or stricter than that is refused."""
    node_selector: Labels = {}
    tolerations: Annotated[
        list[Toleration] | None, Field(max_length=MAX_ITEMS, json_schema_extra=TAINT_TOLERATIONS_DEFAULT)
    ] = None
    """Placement on GPU nodes (with nodeSelector). Unset: the tolerations of the GPU nodes' taints the stack declares
    (`kubernetes.gpuNodeTaints`), the ones its GPU layer tolerates too; set: exactly these."""
    checkpoints: CheckpointStorage | None = Field(
        None,
        json_schema_extra=by_environment(
            HostPathStorage(type="hostPath", path="/var/lib/rocm-stack/checkpoints/NAME"), PvcStorage(type="pvc")
        ),
    )
    """Where the training's checkpoints live (NAME: the training's name)."""
    # Failures before the training fails for good (pods lost with their node do not count): pod retries of a
    # one-node Job; restarts of the whole JobSet (failurePolicy.maxRestarts) for several nodes, each resuming
    # from the newest checkpoint.
    backoff_limit: int = Field(6, ge=0, le=MAX_RETRIES)
    """Failures allowed (lost nodes not counted): pod retries of a one-node Job, whole-JobSet restarts otherwise."""
    active_deadline_seconds: int | None = Field(None, gt=0, le=MAX_DEADLINE_SECONDS)
    """The run's deadline; unset: none."""
    queue_name: NamespaceName | None = None
    """Kueue LocalQueue admitting the job (label `kueue.x-k8s.io/queue-name`; with `kubernetes.queues`, one declared
    there for its namespace); unset: no Kueue."""
    network: TrainingNetwork | None = None
    """RDMA for RCCL between the pods (multi-node); unset: RCCL falls back to TCP sockets on the pod network."""
    termination_grace_period_seconds: TrainingGraceSeconds = DEFAULT_TRAINING_GRACE_SECONDS
    """Seconds from SIGTERM to SIGKILL when a pod stops (a node drain's eviction, as in a GPU driver upgrade, or a
    deletion): the pods' terminationGracePeriodSeconds. Like `docker.stopGraceSeconds`: the longest step plus one
    checkpoint write plus 10 s for torchrun (which gets the rest, TORCH_ELASTIC_SHUTDOWN_TIMEOUT)."""

    @property
    def torchrun_shutdown_seconds(self) -> int:
        """How long torchrun waits for its workers after forwarding the signal (TORCHRUN_SHUTDOWN_ENV)."""
        return self.termination_grace_period_seconds - TORCHRUN_EXIT_MARGIN_S

    @property
    def uses_job_set(self) -> bool:
        return self.nodes > 1

    def effective_checkpoints(self, name: str, environment: str) -> PvcStorage | HostPathStorage:
        if self.checkpoints is not None:
            return self.checkpoints
        default = environment_default(TrainingKubernetes, "checkpoints", environment)
        if isinstance(default, HostPathStorage):
            return default.model_copy(update={"path": default.path.replace("NAME", name)})
        return default  # type: ignore[no-any-return]


class TrainingDocker(ConfigModel):
    partitions: list[PartitionRef] = Field(min_length=1, max_length=MAX_ITEMS)
    """`host/container` partitions; each runs its own single-node job (`torchrun --standalone`)."""
    checkpoint_dir: AbsolutePath = "/var/lib/rocm-stack/checkpoints"
    """Host directory root: partition P of training T checkpoints into `<checkpointDir>/<T>/<P>`."""
    max_retries: int = Field(5, ge=0, le=MAX_RETRIES)
    """Docker's on-failure restart count."""
    stop_grace_seconds: TrainingGraceSeconds = DEFAULT_TRAINING_GRACE_SECONDS
    """Seconds from SIGTERM to SIGKILL when the container stops (`docker stop`, a daemon shutdown, the delete
    before a `pulumi up` replaces it). programs/train.py finishes its step, checkpoints and exits: this must cover
    the longest step plus one checkpoint write (the `step_time_s` and checkpoint `seconds` it logs) plus 10 s for
    torchrun to exit. torchrun gets the grace less those 10 s (TORCH_ELASTIC_SHUTDOWN_TIMEOUT); a torch older than
    pytorch/pytorch#172596 (the default image's 2.8) SIGKILLs its workers 30 s after the signal whatever this says."""

    @property
    def torchrun_shutdown_seconds(self) -> int:
        """How long torchrun waits for its workers after forwarding the signal (TORCHRUN_SHUTDOWN_ENV)."""
        return self.stop_grace_seconds - TORCHRUN_EXIT_MARGIN_S


class ElasticTraining(ConfigModel):
    """`torchrun --nnodes MIN:MAX` with a c10d rendezvous: the run goes on with the pods left (>= minNodes) when one is
    lost, from its last checkpoint, and takes in a returning pod at the next rendezvous (docs/workloads.md)."""

    min_nodes: int = Field(ge=1, le=1024)
    """Fewest pods the run trains with; below it the agents wait (up to torch's 600 s join timeout) for more."""
    max_nodes: int = Field(ge=2, le=1024)
    """Pods of the JobSet (the `nodes` it runs and Kueue admits)."""
    max_restarts: int = Field(3, ge=0, le=MAX_RETRIES)
    """Worker restarts each pod's torchrun allows after a failure (a lost peer costs every survivor one); a pod
    joining costs none. Past it the pod fails and its Job replaces it (backoffLimit)."""

    @model_validator(mode="after")
    def _bounds(self) -> ElasticTraining:
        if self.min_nodes > self.max_nodes:
            raise ValueError(f"minNodes {self.min_nodes} exceeds maxNodes {self.max_nodes}; lower minNodes")
        return self


class TrainingConfig(ConfigModel):
    name: WorkloadName
    """Unique among all workloads."""
    image: str = "pytorch"
    """A key of `rocm-stack:images`."""
    # Passed to programs/train.py as TRAIN_STEPS, BATCH_SIZE, CHECKPOINT_EVERY, CHECKPOINT_KEEP,
    # TRAIN_PRECISION, TRAIN_ENTRYPOINT (CHECKPOINT_DIR and TRAIN_BACKEND=nccl are set by the stack).
    steps: int = Field(1000, ge=1, le=MAX_STEPS)
    """TRAIN_STEPS."""
    batch_size: int = Field(32, ge=1, le=MAX_BATCH)
    """BATCH_SIZE."""
    checkpoint_every: int = Field(100, ge=1, le=MAX_STEPS)
    """CHECKPOINT_EVERY (steps)."""
    checkpoint_keep: int = Field(3, ge=1, le=MAX_ITEMS)
    """CHECKPOINT_KEEP (newest checkpoints kept)."""
    precision: Literal["fp32", "bf16"] = "bf16"
    """TRAIN_PRECISION."""
    entrypoint: EntryPoint | None = None
    """TRAIN_ENTRYPOINT; unset: programs/train.py's synthetic model."""
    env: Annotated[dict[EnvName, EnvValue], Field(max_length=MAX_ITEMS)] = {}
    """More program settings (TRAIN_LR, ...) or your own variables."""
    rccl_env: Annotated[
        dict[EnvName, EnvValue | None],
        Field(max_length=MAX_ITEMS, json_schema_extra=shown_default(_env_shown(TRAINING_RCCL_ENV))),
    ] = {}
    """RCCL/NCCL variables, merged over the default; `null` removes one."""
    shm_size: WorkloadShmSize = ByteSize(16 * 1024**3)
    """/dev/shm, through which RCCL and DataLoader workers exchange tensors: a memory-backed emptyDir on
    Kubernetes; on Docker `--shm-size` of the partition's private IPC namespace (ignored for a host's only
    partition, which keeps host IPC)."""
    kubernetes: TrainingKubernetes | None = None
    docker: TrainingDocker | None = None
    elastic: ElasticTraining | None = None
    """Kubernetes only: a run that shrinks and grows between minNodes and maxNodes pods; `kubernetes.nodes`
    becomes maxNodes."""

    @model_validator(mode="after")
    def _elastic_pods(self) -> TrainingConfig:
        if self.elastic is None:
            return self
        if self.kubernetes is None or self.docker is not None:
            raise ValueError(
                "elastic: an elastic run is torchrun's elastic agent on the pods of a JobSet; Docker partitions run "
                "one-node runs: set `kubernetes` (and no `docker`), or remove elastic"
            )
        nodes = self.kubernetes.nodes
        if "nodes" in self.kubernetes.model_fields_set and nodes != self.elastic.max_nodes:
            raise ValueError(
                f"kubernetes.nodes {nodes} differs from elastic.maxNodes {self.elastic.max_nodes}: an elastic run "
                "has maxNodes pods; remove kubernetes.nodes"
            )
        # A frozen model: the pods are maxNodes for every check and component that counts them.
        object.__setattr__(self, "kubernetes", self.kubernetes.model_copy(update={"nodes": self.elastic.max_nodes}))
        return self

    def kubernetes_services(self) -> dict[str, str]:
        """Service name -> what it is, in the training's namespace: a JobSet's headless Service, which the JobSet
        controller creates named after the JobSet (spec.network.subdomain unset) where no Service of that name
        exists (kubernetes-sigs/jobset v0.12.0 pkg/controllers/jobset_controller.go L788-833, GetSubdomain
        L1090-1099); a one-node Job has none."""
        if self.kubernetes is None or not self.kubernetes.uses_job_set:
            return {}
        return {self.name: "the headless Service the JobSet controller creates"}

    def pod_start_seconds(self, checks: ChecksConfig) -> int:
        """How long a training pod takes to become Ready by itself: its GPU check (an init container, when checks are
        on); the trainer has no readiness probe."""
        return checks.timeout_seconds if checks.enable else 0

    def pod_requests(self) -> dict[str, str]:
        """Each training pod's requests (pod_requests)."""
        k8s = self.kubernetes
        assert k8s is not None
        return pod_requests(
            k8s.gpu_resource, k8s.gpus_per_node, k8s.cpu, int(k8s.memory), int(self.shm_size), k8s.network
        )

    def program_env(self, checkpoint_dir: str) -> dict[str, str]:
        """What programs/train.py reads (its documented environment), then RCCL's, then the free map."""
        env = {
            "TRAIN_STEPS": str(self.steps),
            "BATCH_SIZE": str(self.batch_size),
            "CHECKPOINT_DIR": checkpoint_dir,
            "CHECKPOINT_EVERY": str(self.checkpoint_every),
            "CHECKPOINT_KEEP": str(self.checkpoint_keep),
            "TRAIN_PRECISION": self.precision,
            # Never fall back to gloo on a GPU node whose GPUs are not visible: fail instead.
            "TRAIN_BACKEND": "nccl",
        }
        if self.entrypoint is not None:
            env["TRAIN_ENTRYPOINT"] = self.entrypoint
        return {**env, **merged_env(TRAINING_RCCL_ENV, self.rccl_env), **self.env}


# The vLLM production-stack router (github.com/vllm-project/production-stack, chart vllm-stack 0.1.12, tag
# vllm-stack-0.1.12 = 66b60661): the image its chart runs (helm/values.yaml routerSpec.repository
# "lmcache/lmstack-router", tagged v<chart version> by .github/workflows/helm-release.yml). That tag is rewritten on
# every chart change of main, so the digest decides: the one owariband/vtc-infer records for
# lmcache/lmstack-router:v0.1.12 (docs/upstream.md @ 78a05858, "Router manifest digest"), not read from the
# registry here (no network); refresh with `docker buildx imagetools inspect lmcache/lmstack-router:v0.1.12`.
ROUTER_IMAGE = "lmcache/lmstack-router:v0.1.12@sha256:d8cfaf022f0179ba3f9d2bbcb95c602bd639b700f7a6ac409626758d1a366483"
# The router's `--routing-logic` choices this stack offers (src/vllm_router/parsers/parser.py @ vllm-stack-0.1.12;
# kvaware needs an LMCache controller and the disaggregated ones prefill/decode pools, which the stack does not run).
RoutingLogic = Literal["session", "prefixaware", "roundrobin"]
# An HTTP header name (RFC 9110 token), lower-case: Starlette looks headers up case-insensitively.
HeaderName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,62}$")]


class InferenceRouter(ConfigModel):
    """The router in front of the replicas: the workload's one entry point (docs/workloads.md "Router")."""

    routing_logic: RoutingLogic = "session"
    """session: a request carrying the `sessionKey` header goes to the replica its session hashes to (a multi-turn
    chat finds its earlier turns in that replica's prefix cache), one without it to the least busy replica;
    prefixaware: to the replica that served the longest matching prompt prefix; roundrobin: in turn."""
    session_key: HeaderName = "x-session-id"
    """The request header (or JSON body field) naming a session, for `routingLogic: session`."""
    replicas: int | None = Field(None, ge=1, le=MAX_PODS, json_schema_extra=by_environment(dev=1, prod=2))
    """Router pods (each discovers every replica itself; sessions hash alike on every router pod)."""
    # Always pinned: the stack passes the router flags of one release (components/workloads/router.py).
    image: PinnedImage = ROUTER_IMAGE
    """The router image (production-stack's `lmcache/lmstack-router`), pinned in every environment."""

    def effective_replicas(self, environment: str) -> int:
        if self.replicas is not None:
            return self.replicas
        replicas: int = environment_default(InferenceRouter, "replicas", environment)
        return replicas


class InferenceKubernetes(ConfigModel):
    namespace: NamespaceName = "default"
    """A built-in namespace or one declared in `kubernetes.namespaces`."""
    replicas: int | None = Field(None, ge=1, le=MAX_PODS, json_schema_extra=by_environment(dev=1, prod=2))
    """In prod a PodDisruptionBudget then keeps one serving during node drains."""
    nodes: int = Field(1, ge=1, le=MAX_NODES)
    """Pods of one replica, one per node (like `training[].kubernetes.nodes`): more than 1 serves a model too large for
    one node as a LeaderWorkerSet group, vLLM's leader and `nodes - 1` workers; tensorParallelSize x
    pipelineParallelSize must then be nodes x gpus."""
    gpus: GpuCount | None = Field(
        None, json_schema_extra=shown_default("`tensorParallelSize x pipelineParallelSize / nodes`")
    )
    """GPUs (`gpuResource`) per pod, a multiple of tensorParallelSize x pipelineParallelSize on one node: more adds
    vLLM data-parallel ranks."""
    gpu_resource: GpuResourceName = GPU_RESOURCE_NAME
    """The extended resource each replica requests `gpus` of: a partition resource such as amd.com/cpx_nps4 runs
    on nodes of a `kubernetes.partitionProfiles` profile (with `resourceNamingStrategy: mixed`)."""
    node_selector: Labels = {}
    tolerations: Annotated[
        list[Toleration] | None, Field(max_length=MAX_ITEMS, json_schema_extra=TAINT_TOLERATIONS_DEFAULT)
    ] = None
    """Placement on GPU nodes (with nodeSelector). Unset: the tolerations of the GPU nodes' taints the stack declares
    (`kubernetes.gpuNodeTaints`), the ones its GPU layer tolerates too; set: exactly these."""
    model_cache: ModelCacheStorage | None = Field(
        None,
        json_schema_extra=by_environment(
            HostPathStorage(type="hostPath", path="/var/lib/rocm-stack/huggingface"),
            PvcStorage(type="pvc", size="200Gi"),
        ),
    )
    """The Hugging Face cache the replicas download into (`HF_HOME`)."""
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    """The API's Service: the router's when `router` is set (the replicas' own Service is then ClusterIP)."""
    allow_load_balancer: bool = False
    """Prod's explicit opt-in to `serviceType: LoadBalancer`, which publishes the API outside the cluster."""
    clients: list[Labels] | None = Field(None, min_length=1, max_length=MAX_ITEMS)
    """Label sets of the pods (in the server's namespace) allowed to reach the API (the router's with `router`),
    e.g. `[{app.kubernetes.io/name: my-app}]`. Unset: every pod of the namespace. The monitoring namespace always
    reaches it (metrics); a NodePort or LoadBalancer Service is reachable from anywhere. With `router` the
    replicas are reachable from the router and the monitoring namespace only."""
    min_available: int | None = Field(
        None, ge=1, le=MAX_PODS, json_schema_extra=shown_default("prod: `replicas - 1` (no PDB when 0); dev: no PDB")
    )
    """The PodDisruptionBudget's minAvailable."""
    cpu: KubeQuantity = "8"
    """CPU request = limit of each replica."""
    memory: PodMemory = ByteSize(64 * 1024**3)
    """Working set of each replica besides /dev/shm: its memory request = limit is this + shmSize."""
    numa_binding: bool = False
    """SYS_NICE for the replicas, which libnuma (numactl, ROCm's NUMA-aware allocator) needs to bind memory under the
    runtime's default seccomp profile; Pod Security baseline forbids it, so the namespace becomes privileged."""
    pod_security: PodSecurityLevel | None = Field(None, json_schema_extra=shown_default("what its pods need"))
    """The namespace's enforced Pod Security level; unset: what the pods need, baseline unless numaBinding, `network`
    (IPC_LOCK, hostNetwork) or a hostPath volume asks for privileged. A level laxer or stricter than that is refused."""
    network: TrainingNetwork | None = None
    """RDMA for RCCL between the pods of a multi-node replica (`nodes` > 1), as for a training's; unset: RCCL falls
    back to TCP sockets on the pod network."""
    termination_grace_period_seconds: int = Field(120, ge=30, le=MAX_DRAIN_SECONDS)
    """Seconds a stopping replica (scale-down, rolling update, drain) gets: its preStop hook waits until vLLM has no
    request running or waiting (at most this less 10 s), then vLLM gets SIGTERM (vLLM 0.11.2 cuts what is still in
    flight); the proxy sidecar stops after vLLM. Size it from the longest generation you serve."""
    autoscaling: InferenceAutoscaling | None = None
    """Replicas between minReplicas and maxReplicas by vLLM's queue (a KEDA ScaledObject; docs/workloads.md,
    Inference that scales); instead of `replicas`."""
    queue_name: NamespaceName | None = None
    """Kueue LocalQueue admitting the replicas (label `kueue.x-k8s.io/queue-name`): required with `kubernetes.queues`,
    whose quota then counts the serving GPUs (docs/workloads.md, Queues and quotas); unset: no Kueue."""
    router: InferenceRouter | None = None
    """The vLLM production-stack router in front of the replicas (`{}` for its defaults), then the one entry point:
    its Service `<name>-router` takes `serviceType`, it checks `vllmApiKey` and routes by `routingLogic`. Unset:
    clients reach the replicas through the Service `<name>`."""

    @property
    def multi_node(self) -> bool:
        return self.nodes > 1

    def effective_replicas(self, environment: str) -> int:
        """The replicas always running: `replicas`, or the autoscaler's minimum (the Deployment's initial count)."""
        if self.autoscaling is not None:
            return self.autoscaling.effective_min_replicas(environment)
        if self.replicas is not None:
            return self.replicas
        replicas: int = environment_default(InferenceKubernetes, "replicas", environment)
        return replicas

    def most_replicas(self, environment: str) -> int:
        """The replicas there may be: the autoscaler's maximum, else the fixed count."""
        if self.autoscaling is not None:
            return self.autoscaling.max_replicas
        return self.effective_replicas(environment)

    def effective_min_available(self, environment: str) -> int | None:
        if self.min_available is not None:
            return self.min_available
        if environment == "prod":
            return self.effective_replicas(environment) - 1 or None
        return None

    def effective_model_cache(self, environment: str) -> PvcStorage | HostPathStorage | EmptyDirStorage:
        if self.model_cache is not None:
            return self.model_cache
        return environment_default(InferenceKubernetes, "model_cache", environment)  # type: ignore[no-any-return]


class InferenceDocker(ConfigModel):
    # For dense models several single-GPU partitions usually serve more than one partition of as many GPUs (README).
    partitions: list[PartitionRef] = Field(min_length=1, max_length=MAX_ITEMS)
    """`host/container` partitions; each runs one vLLM server on the partition's GPUs."""
    published_port: Port | None = Field(None, json_schema_extra=shown_default("`port`"))
    """Host port of the API (published by the proxy when `vllmApiKey` is set)."""
    ip: IpAddress = "0.0.0.0"
    """Host address the port is published on (127.0.0.1: only the host itself, behind its own proxy). In prod the
    API needs the secret `vllmApiKey` on any address."""
    model_cache_dir: AbsolutePath = "/var/lib/rocm-stack/huggingface"
    """Host directory of the Hugging Face caches: partition P's server downloads into and loads from
    `<modelCacheDir>/<P>` alone, so no server can alter the weights another one loads."""
    stop_grace_seconds: StopGraceSeconds = 120
    """Seconds from SIGTERM to SIGKILL when the server stops (`docker stop`, a daemon shutdown, the delete before a
    `pulumi up` replaces it): the time in-flight requests get to finish. A vLLM with `--shutdown-timeout`
    (vllm-project/vllm#36666; not in the default 0.11.2 image) drains only when given it: add it to `extraArgs`
    below this grace."""
    max_unavailable: int = Field(1, ge=1, le=MAX_ITEMS)
    """At most this many of the servers are replaced at once by a `pulumi up` that replaces them all (an image bump,
    a key or token rotation): the servers roll in the order of `partitions`, each starting to stop only once the one
    this many places before it is healthy again, so the others keep serving. A first deploy creates them in the same
    order. At least the number of partitions: all at once."""

    def roll_after(self, index: int) -> int | None:
        """The position in `partitions` of the server the one at `index` waits for, or None: it goes first."""
        return index - self.max_unavailable if index >= self.max_unavailable else None


def model_cache_dir(placement: InferenceDocker, partition: str) -> str:
    """The host directory of one partition's Hugging Face cache (by partition name: stable when partitions are
    added, removed or reordered)."""
    return f"{placement.model_cache_dir}/{partition}"


LEADER_WORKER_SET_SUFFIX = "-lws"
ROUTER_SUFFIX = "-router"


class InferenceConfig(ConfigModel):
    name: WorkloadName
    """Unique among all workloads."""
    model: ModelId
    """Hugging Face repository id."""
    revision: str | None = None
    """A branch, tag or commit of the model repository (vLLM's `--revision`). Unset: the repository's default branch
    at each download, so a replica started later may load newer weights; pin a commit to serve the same weights
    everywhere. Recommended in prod, not required (a model repository is not an image: prod requires pinned
    images only)."""
    gated: bool = False
    """The model needs an accepted licence: the secret `huggingfaceToken` becomes required (`meta-llama/*` and
    `google/gemma*` always count as gated)."""
    image: str = "vllm"
    """A key of `rocm-stack:images`."""
    tensor_parallel_size: GpuCount = 1
    pipeline_parallel_size: int = Field(1, ge=1, le=MAX_NODES * MAX_GPUS_PER_HOST)
    """vLLM's pipeline stages (`--pipeline-parallel-size`), each on tensorParallelSize GPUs; across the pods of a
    multi-node replica (`kubernetes.nodes`) usually one stage per node. A stage needs a GPU: at most every GPU of the
    largest group."""
    port: Port = 8000
    extra_args: Annotated[list[str], Field(max_length=MAX_ITEMS)] = []
    """More `vllm serve` flags: not those derived from the keys here, no `--api-key`, no `--trust-remote-code`, in
    any environment and any spelling vLLM's parser accepts (`--trust_remote_code`, abbreviated `--trust-remote`)."""
    trust_remote_code: bool = False
    """Runs the model repository's own Python code (vLLM `--trust-remote-code`: custom architectures): code from
    the Hub with the server's GPUs, cache and API key. Off unless this says so; never as a raw flag in extraArgs."""
    env: Annotated[dict[EnvName, EnvValue], Field(max_length=MAX_ITEMS)] = {}
    rocm_env: Annotated[
        dict[EnvName, EnvValue | None],
        Field(
            max_length=MAX_ITEMS,
            json_schema_extra=shown_default(
                f"{_env_shown(INFERENCE_ROCM_ENV)}; with more than one GPU also {_env_shown(MULTI_GPU_INFERENCE_ENV)}"
            ),
        ),
    ] = {}
    """ROCm/vLLM variables (AMD's MI300X advice, docs/workloads.md), merged over the default; `null` removes one."""
    shm_size: WorkloadShmSize = ByteSize(16 * 1024**3)
    """/dev/shm of each server (as for training)."""
    startup_timeout_seconds: WaitSeconds = 1800
    """How long a server may take to download and load its model: the startup probe (Kubernetes) and the health
    check's start period (Docker), which `pulumi up` waits out (docs/workloads.md "Deadlines")."""
    kubernetes: InferenceKubernetes | None = None
    docker: InferenceDocker | None = None

    @property
    def needs_token(self) -> bool:
        return self.gated or self.model.startswith(KNOWN_GATED_MODEL_PREFIXES)

    @property
    def leader_worker_set_name(self) -> str:
        """The LeaderWorkerSet of a multi-node server: not the workload's name, which its API Service has. The LWS
        controller gives the set a headless Service of the set's own name, and creates it only where no Service of
        that name exists (kubernetes-sigs/lws v0.10.0 pkg/utils/controller/controller_utils.go L33-64, called with
        lws.Name from leaderworkerset_controller.go L213-220); the pods' LWS_LEADER_ADDRESS resolves through it."""
        return f"{self.name}{LEADER_WORKER_SET_SUFFIX}"

    @property
    def router_name(self) -> str:
        """The router's objects (`kubernetes.router`), its Service the entry point."""
        return f"{self.name}{ROUTER_SUFFIX}"

    def kubernetes_services(self) -> dict[str, str]:
        """Service name -> what it is, of every Service in the workload's namespace: the stack's and those a
        controller creates for it."""
        k8s = self.kubernetes
        if k8s is None:
            return {}
        services = {self.name: "the API Service"}
        if k8s.router is not None:
            services[self.router_name] = "the router's Service"
        if k8s.multi_node:
            services[self.leader_worker_set_name] = "the headless Service the LeaderWorkerSet controller creates"
        return services

    def replica_start_seconds(self, checks: ChecksConfig) -> int:
        """How long one Kubernetes replica may take to become ready: its GPU check (an init container, when checks
        are on), then the model's download and load."""
        return (checks.timeout_seconds if checks.enable else 0) + self.startup_timeout_seconds

    @property
    def world_size(self) -> int:
        """GPUs of one model copy: vLLM's world size TP x PP (vllm/config/parallel.py L225-226 @ v0.11.2)."""
        return self.tensor_parallel_size * self.pipeline_parallel_size

    def pod_gpus(self) -> int:
        """GPUs of each Kubernetes pod: `kubernetes.gpus`, else one model copy spread over the replica's nodes."""
        k8s = self.kubernetes
        assert k8s is not None
        return k8s.gpus or max(1, self.world_size // k8s.nodes)

    def pod_requests(self) -> dict[str, str]:
        """Each vLLM pod's requests (pod_requests; the proxy sidecar adds CPU and memory)."""
        k8s = self.kubernetes
        assert k8s is not None
        return pod_requests(
            k8s.gpu_resource, self.pod_gpus(), k8s.cpu, int(k8s.memory), int(self.shm_size), k8s.network
        )

    def data_parallel_size(self, gpus: int) -> int:
        return max(1, gpus // self.world_size)

    def server_env(self, gpus: int) -> dict[str, str]:
        defaults = {
            **INFERENCE_ROCM_ENV,
            **(MULTI_GPU_INFERENCE_ENV if gpus > 1 else {}),
            **(DATA_PARALLEL_INFERENCE_ENV if self.data_parallel_size(gpus) > 1 else {}),
        }
        return {**merged_env(defaults, self.rocm_env), **self.env}

    def vllm_args(self, gpus: int, host: str = "0.0.0.0") -> list[str]:
        """`vllm serve` arguments after the model: TP ranks per replica, the remaining factor as data parallel.
        `host`: the address it listens on (127.0.0.1 behind a proxy in its pod)."""
        args = ["--host", host, "--port", str(self.port), "--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size > 1:
            args += ["--pipeline-parallel-size", str(self.pipeline_parallel_size)]
        if self.data_parallel_size(gpus) > 1:
            args += ["--data-parallel-size", str(self.data_parallel_size(gpus)), *DATA_PARALLEL_VLLM_FLAGS]
        if self.revision is not None:
            args += ["--revision", self.revision]
        if self.trust_remote_code:
            args.append(rules.TRUST_REMOTE_CODE)
        return args + self.extra_args


class _StackWithWorkloads(Protocol):
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
    def training(self) -> list[TrainingConfig]: ...

    @property
    def inference(self) -> list[InferenceConfig]: ...


def partition_size(host: HostConfig, container: ContainerConfig) -> int:
    """GPUs of a partition: its indices, else its size (placed later by the loader), else the whole host."""
    if container.gpus is not None:
        return len(container.gpus)
    return container.gpu_count or host.logical_gpus


def _by_kind(cfg: _StackWithWorkloads) -> tuple[tuple[str, Sequence[TrainingConfig | InferenceConfig]], ...]:
    return ("training", cfg.training), ("inference", cfg.inference)


def partitions_claimed(cfg: _StackWithWorkloads) -> dict[tuple[str, str], TrainingConfig | InferenceConfig]:
    """(host, container) -> the workload running in that Docker partition."""
    claimed: dict[tuple[str, str], TrainingConfig | InferenceConfig] = {}
    for _, workloads in _by_kind(cfg):
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


def _family_image_problems(
    cfg: _StackWithWorkloads, workload: TrainingConfig | InferenceConfig, at: str
) -> Iterable[tuple[str, str]]:
    """Every Docker partition's host takes its family's reference of the workload's image; a Kubernetes workload
    takes that of the family its nodeSelector's device ID names (kubernetes_gfx)."""
    key = workload.image
    if workload.kubernetes is not None and not isinstance(cfg.images[key], str):
        gfx = kubernetes_gfx(workload.kubernetes.node_selector)
        device = workload.kubernetes.node_selector.get(DEVICE_ID_LABEL)
        if gfx is None and device is not None:
            known = ", ".join(f"{m.pci_device_id} ({name})" for name, m in MODELS.items() if m.pci_device_id)
            yield (
                f"{at}.kubernetes.nodeSelector.{DEVICE_ID_LABEL}",
                f"{device!r} is the PCI device ID of no GPU model rocm-stack knows; expected one of {known}",
            )
        elif gfx is None:
            yield (
                f"{at}.kubernetes.nodeSelector",
                (
                    f"images.{key} has one reference per GPU family, so the pods must stay on one family's nodes: set "
                    f"nodeSelector {{{DEVICE_ID_LABEL}: <PCI device ID>}} (the node labeller's label, e.g. 75a3 for "
                    f"MI355X, 74a1 for MI300X), or use an image key with one reference for every family"
                ),
            )
        elif image_for(cfg.images, key, gfx) is None:
            yield (
                f"{at}.image",
                (
                    f"nodeSelector {DEVICE_ID_LABEL} picks {gfx} nodes but images.{key} has references "
                    f"only for {', '.join(sorted(cfg.images[key]))}; add images.{key}.{gfx}"
                ),
            )
    hosts = {host.name: host for host in cfg.hosts}
    for p_index, ref in enumerate(workload.docker.partitions if workload.docker else ()):
        host = hosts.get(ref.split("/")[0])
        if host is not None and image_for(cfg.images, key, host_gfx(host)) is None:
            yield f"{at}.docker.partitions[{p_index}]", no_image_problem(host, key, cfg.images)


def problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """Cross-field checks of `training`, `inference` and `gpuFleet` (key paths relative to `rocm-stack:`)."""
    seen: dict[str, str] = {}
    for kind, workloads in _by_kind(cfg):
        for index, workload in enumerate(workloads):
            at = f"{kind}[{index}]"
            if workload.name in seen:
                yield (
                    f"{at}.name",
                    (
                        f"'{workload.name}' is already the name of {seen[workload.name]}; workload names "
                        "must be unique (they name Kubernetes objects and Pulumi resources)"
                    ),
                )
            seen.setdefault(workload.name, at)
            if workload.image not in cfg.images:
                yield f"{at}.image", f"unknown image '{workload.image}'; expected one of {sorted(cfg.images)}"
            else:
                yield from _family_image_problems(cfg, workload, at)
            if workload.kubernetes is None and workload.docker is None:
                yield at, "runs nowhere: set `kubernetes`, `docker` or both"
            yield from _env_problems(workload, at)
    yield from _service_problems(cfg)
    for index, training in enumerate(cfg.training):
        yield from _training_problems(cfg, training, f"training[{index}]")
    for index, inference in enumerate(cfg.inference):
        yield from _inference_problems(cfg, inference, f"inference[{index}]")
    yield from stack_autoscaling_problems(cfg)
    yield from _partition_problems(cfg)
    if cfg.environment == "prod":
        yield from _host_access_problems(cfg)
    yield from _memory_problems(cfg)
    yield from _resource_problems(cfg)
    yield from _fleet_problems(cfg)
    yield from _quota_problems(cfg)


def _quota_problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """The ClusterQueues' nominal GPU quotas together fit the declared GPU nodes (borrowing only moves nominal quota
    between queues): beyond them Kueue admits pods no node can take, which wait Pending while holding the quota until
    waitForPodsReady evicts them (docs/workloads.md, Queues and quotas)."""
    queues = cfg.kubernetes.queues if cfg.kubernetes is not None else None
    if queues is None:
        return
    for pool_resource in dict.fromkeys(pool.resource for pool in gpu_pools(cfg)):
        pools = [pool for pool in gpu_pools(cfg) if pool.resource == pool_resource]
        capacity = sum(pool.nodes * pool.per_node for pool in pools)
        quoted = {
            name: sum(int(quantity_value(q[pool_resource].nominal)) for q in queue.gpus.values() if pool_resource in q)
            for name, queue in sorted(queues.cluster_queues.items())
        }
        if sum(quoted.values()) > capacity:
            shares = " + ".join(f"{n} {name}" for name, n in quoted.items() if n)
            yield (
                "kubernetes.queues.clusterQueues",
                f"the nominal quotas of {pool_resource} ({shares} = {sum(quoted.values())}) exceed the "
                f"{capacity} of {' and '.join(pool.key for pool in pools)}: Kueue would admit pods no node can take, "
                "which wait Pending holding the quota; lower the quotas (borrowing lends idle quota anyway)",
            )


def _service_problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """Two workloads whose Services (the stack's, or one a controller creates for them) share a name in one
    namespace: the controller finds the name taken and never creates its own, and the pods that resolve through it
    never find each other (workload names alone are unique, `<name>-router` and `<name>-lws` are derived)."""
    taken: dict[tuple[str, str], str] = {}
    for kind, workloads in _by_kind(cfg):
        for index, workload in enumerate(workloads):
            if workload.kubernetes is None:
                continue
            at = f"{kind}[{index}]"
            for service, what in workload.kubernetes_services().items():
                key = (workload.kubernetes.namespace, service)
                if key in taken:
                    other = taken[key]
                    yield (
                        f"{at}.name",
                        (
                            f"'{workload.name}' makes the Service '{service}' in namespace '{key[0]}' ({what}), a name "
                            f"already taken by {other}: one of them would never exist; rename one workload"
                        ),
                    )
                taken.setdefault(key, f"{what} for {at} '{workload.name}'")


def namespace_pod_security(cfg: _StackWithWorkloads, privileged: Collection[str] = ()) -> dict[str, str]:
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


def workload_namespace_needs(cfg: _StackWithWorkloads) -> dict[str, rules.PodNeeds]:
    """Each owned namespace's needs beyond Pod Security baseline: those of the workloads the stack runs there."""
    needs: dict[str, rules.PodNeeds] = defaultdict(rules.PodNeeds)
    for name, k8s in _kubernetes_workloads(cfg):
        needs[k8s.namespace] = needs[k8s.namespace] | workload_pod_needs(k8s, name, cfg.environment)
    owned = cfg.kubernetes.owned_namespaces() if cfg.kubernetes is not None else []
    return {namespace: needs[namespace] for namespace in owned}


def _kubernetes_workloads(cfg: _StackWithWorkloads) -> list[tuple[str, TrainingKubernetes | InferenceKubernetes]]:
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


def _host_access_problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """The host directories the Docker workloads mount and the ports they publish, by the policy pack's rules
    (policy/rocm_policy/rules.py; schema/docker.py checks the partitions' own)."""
    from policy.rocm_policy import rules

    for index, training in enumerate(cfg.training):
        if training.docker is not None:
            if problem := rules.host_mount_problem(training.docker.checkpoint_dir, read_only=False):
                yield f"training[{index}].docker.checkpointDir", problem
    for index, inference in enumerate(cfg.inference):
        if inference.docker is not None:
            if problem := rules.host_mount_problem(inference.docker.model_cache_dir, read_only=False):
                yield f"inference[{index}].docker.modelCacheDir", problem
            if problem := rules.published_port_problem(inference.port, inference.docker.published_port):
                yield f"inference[{index}].docker.publishedPort", problem
        k8s = inference.kubernetes
        if k8s is not None:
            cache = k8s.effective_model_cache(cfg.environment)
            if isinstance(cache, HostPathStorage) and (
                problem := rules.host_mount_problem(cache.path, read_only=False)
            ):
                yield f"inference[{index}].kubernetes.modelCache.path", problem
            if problem := rules.load_balancer_problem(k8s.service_type, k8s.allow_load_balancer):
                yield f"inference[{index}].kubernetes.serviceType", problem
    for index, training in enumerate(cfg.training):
        checkpoints = training.kubernetes.checkpoints if training.kubernetes is not None else None
        if isinstance(checkpoints, HostPathStorage) and (
            problem := rules.host_mount_problem(checkpoints.path, read_only=False)
        ):
            yield f"training[{index}].kubernetes.checkpoints.path", problem
    if cfg.monitoring.enabled and (problem := rules.published_port_problem(0, cfg.monitoring.exporter_port)):
        yield "monitoring.exporterPort", problem


def _memory_problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """A partition's memory limit must leave room beside its /dev/shm (its workload's shmSize where one runs in it):
    tmpfs pages count against the memory cgroup of the process that writes them, so RCCL filling /dev/shm would
    meet the OOM killer."""
    claimed = partitions_claimed(cfg)
    for h_index, host in enumerate(cfg.hosts):
        for c_index, container in enumerate(host.containers):
            workload = claimed.get((host.name, container.name))
            shm = workload.shm_size if workload is not None else container.shm_size
            if container.memory is not None and container.memory <= shm:
                whose = (
                    f"{type(workload).__name__.removesuffix('Config').lower()} '{workload.name}'" if workload else None
                )
                yield (
                    f"hosts[{h_index}].containers[{c_index}].memory",
                    (
                        f"{_human_bytes(container.memory)} leaves no room beside the partition's /dev/shm of "
                        f"{_human_bytes(shm)} ({f'shmSize of {whose}' if whose else 'its shmSize'}), whose pages "
                        "count against the limit: raise memory or lower shmSize"
                    ),
                )


def secret_problems(cfg: _StackWithWorkloads, secret_names: Collection[str]) -> Iterable[tuple[str, str]]:
    """Secrets a workload needs; `secret_names` are the `rocm-stack:` secret keys set (without the prefix)."""
    if cfg.environment == "prod" and "vllmApiKey" not in secret_names:
        served = [i.name for i in cfg.inference if i.kubernetes is not None]
        if served:
            yield (
                "vllmApiKey",
                (
                    f"prod serves {', '.join(served)} on Kubernetes, reachable by every pod of the cluster: set the API "
                    f"key vLLM requires on /v1 with {set_secret('vllmApiKey', '<key>')}"
                ),
            )
        for index, inference in enumerate(cfg.inference):
            if inference.docker is not None:
                yield (
                    "vllmApiKey",
                    (
                        f"inference[{index}] ('{inference.name}') publishes vLLM's API on Docker hosts, which prod "
                        f"protects with an API key: run {set_secret('vllmApiKey', '<key>')}"
                    ),
                )
    for inference in cfg.inference if "huggingfaceToken" not in secret_names else ():
        if inference.needs_token:
            yield (
                "huggingfaceToken",
                (
                    f"inference '{inference.name}' serves the gated model '{inference.model}', which needs a Hugging Face "
                    f"token: run {set_secret('huggingfaceToken', 'hf_...')}"
                ),
            )


def _env_problems(workload: TrainingConfig | InferenceConfig, at: str) -> Iterable[tuple[str, str]]:
    managed: tuple[str, ...] = TRAINING_MANAGED_ENV if isinstance(workload, TrainingConfig) else INFERENCE_MANAGED_ENV
    if workload.kubernetes and workload.kubernetes.network:
        managed += NETWORK_MANAGED_ENV
    if isinstance(workload, TrainingConfig):
        managed += (TORCHRUN_SHUTDOWN_ENV,)
    for key in ("env", "rccl_env" if isinstance(workload, TrainingConfig) else "rocm_env"):
        for name in getattr(workload, key):
            if name in managed:
                alias = type(workload).model_fields[key].alias
                yield f"{at}.{alias}.{name}", "is set by rocm-stack from the workload's other keys; remove it here"


def _security_problems(
    cfg: _StackWithWorkloads, k8s: TrainingKubernetes | InferenceKubernetes, name: str, at: str
) -> Iterable[tuple[str, str]]:
    """`podSecurity`, if set, is the level the pods need (policy/rocm_policy/rules.py, the pack's rule for the
    namespaces). Pods must tolerate the GPU nodes' NoSchedule and NoExecute taints, or they never schedule there (a
    PreferNoSchedule taint only lowers the node's score)."""
    needed = workload_pod_needs(k8s, name, cfg.environment).level()
    if k8s.pod_security is not None:
        laxer = rules.laxer_pod_security_problem("this workload's namespace", k8s.pod_security, needed)
        if laxer:
            yield f"{at}.podSecurity", laxer
        elif k8s.pod_security != needed:
            # Pod Security Standards, baseline: capabilities.add only AUDIT_WRITE, CHOWN, ..., SYS_CHROOT; no
            # hostNetwork, no hostPath volume (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
            yield (
                f"{at}.podSecurity",
                f"'{k8s.pod_security}' forbids what the pods need (numaBinding's SYS_NICE, `network`'s IPC_LOCK and "
                "hostNetwork, a hostPath volume): remove podSecurity, the namespace then gets what they need",
            )
    if cfg.kubernetes is None:
        return
    tolerations = pod_tolerations(k8s.tolerations, cfg.kubernetes.gpu_node_taints)
    for index, taint in enumerate(cfg.kubernetes.gpu_node_taints):
        if taint.effect in SCHEDULER_FILTERED_TAINT_EFFECTS and not any(t.tolerates(taint) for t in tolerations):
            yield (
                f"{at}.tolerations",
                (
                    f"does not tolerate the GPU node taint {taint.key}={taint.value or ''}:{taint.effect} "
                    f"(kubernetes.gpuNodeTaints[{index}]): the pods could never run on a GPU node"
                ),
            )


def queued_workloads(cfg: _StackWithWorkloads) -> QueuedWorkloads:
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


def _queue_problems(
    cfg: _StackWithWorkloads,
    k8s: TrainingKubernetes | InferenceKubernetes,
    requests: Mapping[str, str],
    gpus_at_once: int,
    at: str,
) -> Iterable[tuple[str, str]]:
    """With `kubernetes.queues` every GPU workload is queued (Kueue's quota counts only what it admits: a workload
    outside it takes GPUs the quota lends to others, whose admitted pods then wait Pending on quota), in a LocalQueue
    of its namespace whose ClusterQueue covers every resource its pods request (`requests`, pod_requests) or Kueue
    leaves out (queued_workloads), else Kueue never admits it; and whose cohort has GPUs enough for the pods Kueue
    admits together (a JobSet's, a LeaderWorkerSet group's). Without `kubernetes.queues`, queueName may name a queue
    the cluster has."""
    queues = cfg.kubernetes.queues if cfg.kubernetes is not None else None
    if queues is None:
        return
    declared = [q.name for q in queues.local_queues if q.namespace == k8s.namespace]
    if k8s.queue_name is None:
        yield (
            f"{at}.queueName",
            "kubernetes.queues quotes the cluster's GPUs and Kueue counts only the workloads it admits: unqueued, "
            "these pods take GPUs the quota lends to queued jobs, which then wait Pending while holding it; name a "
            f"LocalQueue of namespace '{k8s.namespace}' (declared there: {', '.join(declared) or 'none'})",
        )
        return
    local = queues.local_queue(k8s.namespace, k8s.queue_name)
    if local is None:
        yield (
            f"{at}.queueName",
            f"no LocalQueue '{k8s.queue_name}' in namespace '{k8s.namespace}' in kubernetes.queues.localQueues "
            f"(declared there: {', '.join(declared) or 'none'})",
        )
        return
    queue = queues.cluster_queues[local.cluster_queue]
    uncounted = queued_workloads(cfg).uncounted
    for resource in requests:
        # Kueue drops an excluded resource by prefix (pkg/workload/workload.go L463-477).
        if resource in queue.covered_resources() or resource.startswith(uncounted):
            continue
        fix = (
            "add it to every flavor of its gpus"
            if resource == k8s.gpu_resource
            else "the stack leaves an RDMA resource out of Kueue's quota (resources.excludeResourcePrefixes) only in "
            "the Kueue it installs: set kubernetes.queues.kueue.install, or remove `network` (RCCL then uses TCP)"
        )
        yield (
            f"{at}.queueName",
            f"the pods request {resource}, which ClusterQueue '{local.cluster_queue}' does not cover "
            f"({', '.join(queue.covered_resources())}): Kueue admits no workload requesting a resource that no "
            f"resource group covers; {fix}",
        )
        return
    gpu = k8s.gpu_resource
    members = [q for q in queues.cluster_queues.values() if q is queue or (q.cohort and q.cohort == queue.cohort)]
    available = sum(
        int(quantity_value(quotas[gpu].nominal)) for q in members for quotas in q.gpus.values() if gpu in quotas
    )
    if gpus_at_once > available:
        yield (
            f"{at}.queueName",
            f"{gpus_at_once} {gpu} admitted at once, but ClusterQueue '{local.cluster_queue}' and its cohort "
            f"quote {available}: Kueue never admits the job; raise the quotas or lower nodes",
        )


def _namespace_problems(cfg: _StackWithWorkloads, namespace: str, at: str) -> Iterable[tuple[str, str]]:
    if cfg.kubernetes is None:
        yield at, "runs on Kubernetes but `rocm-stack:kubernetes` is not configured"
    elif namespace not in BUILTIN_NAMESPACES and namespace not in cfg.kubernetes.owned_namespaces():
        yield (
            f"{at}.namespace",
            (
                f"namespace '{namespace}' is not created by this stack; add it to "
                "`kubernetes.namespaces` (or use 'default')"
            ),
        )


def _training_problems(cfg: _StackWithWorkloads, training: TrainingConfig, at: str) -> Iterable[tuple[str, str]]:
    k8s = training.kubernetes
    if k8s is None:
        return
    at = f"{at}.kubernetes"
    yield from _namespace_problems(cfg, k8s.namespace, at)
    yield from _security_problems(cfg, k8s, training.name, at)
    yield from _training_drain_problems(cfg, k8s, at)
    yield from _queue_problems(cfg, k8s, training.pod_requests(), k8s.nodes * k8s.gpus_per_node, at)
    yield from _network_problems(k8s, at, "training")
    storage = k8s.effective_checkpoints(training.name, cfg.environment)
    if isinstance(storage, HostPathStorage):
        if cfg.environment == "prod":
            yield (
                f"{at}.checkpoints",
                (
                    "a hostPath is lost when the job is rescheduled to another node; prod keeps "
                    "checkpoints on a PVC ({type: pvc, storageClass: ..., size: ...})"
                ),
            )
        elif k8s.nodes > 1:
            yield (
                f"{at}.checkpoints",
                (
                    f"the {k8s.nodes} pods of a multi-node job land on different nodes, which do not share dev's "
                    "default hostPath; write `checkpoints: {type: pvc, storageClass: <a ReadWriteMany class>, size: "
                    "100Gi}` (ReadWriteMany is a PVC's default accessMode)"
                ),
            )
    elif storage.access_mode != "ReadWriteMany" and k8s.nodes > 1:
        yield (
            f"{at}.checkpoints.accessMode",
            (
                f"{storage.access_mode} cannot be mounted by the {k8s.nodes} pods of "
                "a multi-node job on different nodes; use ReadWriteMany"
            ),
        )


def _network_problems(k8s: TrainingKubernetes | InferenceKubernetes, at: str, what: str) -> Iterable[tuple[str, str]]:
    network = k8s.network
    if network is None:
        return
    if k8s.nodes == 1:
        yield f"{at}.network", f"a one-node {what} has no traffic between pods; remove it or raise nodes"
    if network.host_network and network.networks is not None:
        yield f"{at}.network.networks", "a hostNetwork pod has no secondary networks; set one of the two"


def _inference_problems(cfg: _StackWithWorkloads, inference: InferenceConfig, at: str) -> Iterable[tuple[str, str]]:
    for index, arg in enumerate(inference.extra_args):
        # As vLLM's parser reads it (rules.vllm_options): `--snake_case` is `--kebab-case`, `--por` is `--port`.
        if arg.split("=", 1)[0] in VLLM_MANAGED_FLAGS or rules.vllm_options(arg, VLLM_MANAGED_FLAGS):
            yield (
                f"{at}.extraArgs[{index}]",
                (f"'{arg}' is derived from port / tensorParallelSize / gpus / revision; set those keys instead"),
            )
    k8s = inference.kubernetes
    if k8s is None:
        return
    k_at = f"{at}.kubernetes"
    yield from _namespace_problems(cfg, k8s.namespace, k_at)
    yield from _security_problems(cfg, k8s, inference.name, k_at)
    yield from _network_problems(k8s, k_at, "vLLM replica")
    gpus, world = inference.pod_gpus(), inference.world_size
    # Kueue admits a Deployment's pods one by one, a LeaderWorkerSet's group whole.
    yield from _queue_problems(cfg, k8s, inference.pod_requests(), k8s.nodes * gpus, k_at)
    if k8s.multi_node:
        yield from _multi_node_problems(inference, k_at)
    elif gpus % world:
        yield (
            f"{k_at}.gpus",
            (
                f"{_world(inference)} does not divide the {gpus} GPUs of a replica; use a multiple "
                f"of {world} (the quotient becomes vLLM's data-parallel size)"
            ),
        )
    yield from autoscaling_problems(cfg, k8s, k_at)
    replicas = k8s.effective_replicas(cfg.environment)
    most = k8s.most_replicas(cfg.environment)
    cache = k8s.effective_model_cache(cfg.environment)
    pods = most * k8s.nodes
    if isinstance(cache, PvcStorage) and cache.access_mode != "ReadWriteMany" and pods > 1:
        yield (
            f"{k_at}.modelCache.accessMode",
            (
                f"{cache.access_mode} cannot be shared by {pods} pods on "
                "different nodes; use ReadWriteMany or an emptyDir per pod"
            ),
        )
    min_available = k8s.effective_min_available(cfg.environment)
    if min_available is not None and min_available >= replicas:
        fewest = "replicas" if k8s.autoscaling is None else "autoscaling.minReplicas (the count it scales down to)"
        yield (
            f"{k_at}.minAvailable",
            (
                f"{min_available} of {replicas} replica(s) must stay up, so no pod can ever be evicted and node drains "
                f"(GPU driver upgrades) block; use at most {replicas - 1}, {fewest} - 1"
            ),
        )
    yield from _drain_problems(cfg, inference, at, budget=min_available is not None)


def _world(inference: InferenceConfig) -> str:
    tp, pp = inference.tensor_parallel_size, inference.pipeline_parallel_size
    return f"tensorParallelSize {tp}" if pp == 1 else f"tensorParallelSize {tp} x pipelineParallelSize {pp}"


def _multi_node_problems(inference: InferenceConfig, k_at: str) -> Iterable[tuple[str, str]]:
    """A multi-node replica is one model copy over its pods: vLLM's multi-node launch splits the world size TP x PP
    evenly over `--nnodes` (vllm/engine/arg_utils.py L1466-1478 @ v0.11.2: `local_world_size = world_size //
    self.nnodes`, asserting divisibility), so every pod's GPUs are world / nodes, with no data parallelism."""
    k8s = inference.kubernetes
    assert k8s is not None
    gpus, world, nodes = inference.pod_gpus(), inference.world_size, k8s.nodes
    if gpus * nodes != world:
        key = f"{k_at}.gpus" if k8s.gpus is not None else f"{k_at}.nodes"
        yield (
            key,
            (
                f"{nodes} nodes x {gpus} GPUs is {gpus * nodes} GPUs per replica, but {_world(inference)} is a model "
                f"copy of {world}: a multi-node replica runs exactly one copy; make tensorParallelSize x "
                f"pipelineParallelSize equal nodes x gpus (e.g. pipelineParallelSize {nodes} with tensorParallelSize "
                "the GPUs of a node)"
            ),
        )
    if inference.docker is not None:
        yield (
            f"{k_at}.nodes",
            "a Docker partition runs on one host: serve the multi-node replica on Kubernetes only, or remove nodes",
        )


DRAIN_POLICY_KEY = "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.nodeDrainPolicy"


def _driver_drain(cfg: _StackWithWorkloads) -> NodeDrainPolicy | None:
    """The node drain policy of the GPU Operator's driver rollouts, when the stack's operator rolls drivers."""
    if cfg.kubernetes is None or cfg.kubernetes.mode != "operator":
        return None
    driver = cfg.kubernetes.gpu_operator.device_config.driver
    policy = driver.effective_upgrade_policy(cfg.environment)
    return policy.node_drain_policy if driver.enable and policy.enable else None


def _grace_cut(drain: NodeDrainPolicy, grace: int, what: str) -> Iterable[tuple[str, str]]:
    """A drain's eviction grace (`gracePeriodSeconds`, -1: the pod's own) below the `grace` seconds that `what`."""
    if 0 <= drain.grace_period_seconds < grace:
        yield (
            f"{DRAIN_POLICY_KEY}.gracePeriodSeconds",
            f"{drain.grace_period_seconds}s cuts the {grace}s {what}: use -1 (each pod's own grace) or at least {grace}",
        )


def _drain_problems(
    cfg: _StackWithWorkloads, inference: InferenceConfig, at: str, budget: bool
) -> Iterable[tuple[str, str]]:
    """A drain evicts a vLLM pod only once the budget allows it, i.e. after the replacement of the previously
    evicted replica has started (up to its GPU check plus startupTimeoutSeconds), and the evicted pod then finishes
    its requests (up to its grace). The GPU Operator drains with the kubectl drain helper, whose PDB refusals are
    retried until `nodeDrainPolicy.timeoutSeconds` (0 = forever) (internal/controllers/upgrademgr.go L787-818
    @ v1.5.1); a timed-out node is Drain-Failed, which uses up maxUnavailableNodes and halts the fleet's driver
    rollout (L630-650, L892-897). The eviction's grace is `nodeDrainPolicy.gracePeriodSeconds` (-1: the pod's own)."""
    drain = _driver_drain(cfg)
    if drain is None or inference.kubernetes is None:
        return
    grace = inference.kubernetes.termination_grace_period_seconds
    yield from _grace_cut(
        drain,
        grace,
        f"vLLM pods of inference '{inference.name}' get to finish their requests "
        f"({at}.kubernetes.terminationGracePeriodSeconds)",
    )
    start = inference.replica_start_seconds(cfg.checks) + grace
    if budget and 0 < drain.timeout_seconds < start:
        yield (
            f"{DRAIN_POLICY_KEY}.timeoutSeconds",
            (
                f"{drain.timeout_seconds}s is shorter than the {start}s a replica of inference '{inference.name}' may "
                f"take to stop and start again (its grace, {at}.kubernetes.terminationGracePeriodSeconds, its GPU "
                f"check, checks.timeoutSeconds, then {at}.startupTimeoutSeconds), and its disruption budget holds "
                f"each eviction until the previous replica is back: a drain would fail and halt the driver rollout; "
                f"use at least {start}"
            ),
        )


def _training_drain_problems(cfg: _StackWithWorkloads, k8s: TrainingKubernetes, at: str) -> Iterable[tuple[str, str]]:
    """A driver upgrade evicts the training pods with the grace `nodeDrainPolicy.gracePeriodSeconds` (-1: the pod's
    own) and fails the node's drain when they are not gone within `timeoutSeconds`: the kubectl drain helper waits
    for the deletion under the same global timeout (upgrademgr.go L787-818 @ v1.5.1; k8s.io/kubectl pkg/drain
    drain.go evictPods, waitForDelete with globalTimeout). Either cutting the pods' grace stops the checkpoint."""
    drain = _driver_drain(cfg)
    if drain is None:
        return
    grace = k8s.termination_grace_period_seconds
    yield from _grace_cut(
        drain, grace, f"training pods get to checkpoint on SIGTERM ({at}.terminationGracePeriodSeconds)"
    )
    evicted_within = drain.grace_period_seconds if drain.grace_period_seconds >= 0 else grace
    if 0 < drain.timeout_seconds <= evicted_within:
        yield (
            f"{DRAIN_POLICY_KEY}.timeoutSeconds",
            f"{drain.timeout_seconds}s does not outlast the {evicted_within}s an evicted training pod may take to "
            f"checkpoint and exit ({at}.terminationGracePeriodSeconds): the drain would fail (Drain-Failed) and halt "
            f"the driver rollout; use more than {evicted_within}",
        )


def _partition_problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    hosts = {(h.name, c.name): (hi, ci, h, c) for hi, h in enumerate(cfg.hosts) for ci, c in enumerate(h.containers)}
    claimed_by: dict[tuple[str, str], str] = {}
    # Every host port the stack publishes on a host, and what publishes it: a second binding of one does not start
    # ("Bind for 0.0.0.0:8000 failed: port is already allocated", moby libnetwork portallocator
    # ErrPortAlreadyAllocated; a server on the host network fails with EADDRINUSE). The stack's own servers first,
    # then the configurable ones in the order of the file.
    published: dict[tuple[str, int], str] = {}
    claimed = partitions_claimed(cfg)
    monitoring_host = cfg.monitoring_host
    exporter_port_taken: str | None = None
    for h_index, host in enumerate(cfg.hosts):
        if cfg.monitoring.enabled:  # every Docker host runs the metrics exporters on these host ports
            for number, what in monitoring.EXPORTER_PORTS.items():
                published[(host.name, number)] = f"the stack's {what}"
        if host.name == monitoring_host:
            for number, what in monitoring.MONITORING_HOST_PORTS.items():
                published[(host.name, number)] = f"{what} of the monitoring host (monitoring.host)"
        if cfg.monitoring.enabled:
            exporter = (host.name, cfg.monitoring.exporter_port)
            if exporter in published:
                exporter_port_taken = exporter_port_taken or (
                    f"host port {exporter[1]} of '{host.name}' is already published by {published[exporter]}"
                )
            else:
                published[exporter] = "the GPU metrics exporter (monitoring.exporterPort)"
        for c_index, c in enumerate(host.containers):
            for p_index, port in enumerate(c.ports if (host.name, c.name) not in claimed else ()):
                # Without `external` Docker publishes on a free random host port, which clashes with nothing.
                if port.external is None:
                    continue
                # A second container binding a taken host port does not start ("Bind for 0.0.0.0:8000 failed:
                # port is already allocated", moby libnetwork portallocator ErrPortAlreadyAllocated).
                if (host.name, port.external) in published:
                    yield (
                        f"hosts[{h_index}].containers[{c_index}].ports[{p_index}].external",
                        (
                            f"host port {port.external} of '{host.name}' is already published by "
                            f"{published[(host.name, port.external)]}; choose another external port"
                        ),
                    )
                    continue
                published[(host.name, port.external)] = f"container '{c.name}'"
    if exporter_port_taken is not None:
        yield "monitoring.exporterPort", f"{exporter_port_taken}; choose another port (upstream's default is 5000)"
    for kind, workloads in _by_kind(cfg):
        for index, workload in enumerate(workloads):
            if workload.docker is None:
                continue
            for p_index, ref in enumerate(workload.docker.partitions):
                at = f"{kind}[{index}].docker.partitions[{p_index}]"
                key = tuple(ref.split("/"))
                if key not in hosts:
                    yield (
                        at,
                        (
                            f"no partition '{ref}': expected `host/container` of a container in "
                            f"`rocm-stack:hosts`, one of {sorted('/'.join(k) for k in hosts)}"
                        ),
                    )
                    continue
                if key in claimed_by:
                    yield at, f"partition '{ref}' already runs {claimed_by[key]}; a partition runs one workload"
                    continue
                claimed_by[key] = f"{kind} '{workload.name}'"
                host_index, container_index, host, container = hosts[key]
                c_at = f"hosts[{host_index}].containers[{container_index}]"
                for field in PARTITION_KEYS_DECIDED_BY_WORKLOAD:
                    if field in container.model_fields_set:
                        alias = type(container).model_fields[field].alias
                        yield (
                            f"{c_at}.{alias}",
                            (f"partition '{ref}' runs {kind} '{workload.name}', which decides this; remove the key"),
                        )
                # The partition's env wins over the workload's, so it must not redirect what the stack derives
                # (CHECKPOINT_DIR away from the host volume, HF_HOME away from the model cache, ...).
                managed = (
                    (*TRAINING_MANAGED_ENV, TORCHRUN_SHUTDOWN_ENV)
                    if isinstance(workload, TrainingConfig)
                    else INFERENCE_MANAGED_ENV
                )
                for name in sorted(set(container.env) & set(managed)):
                    yield (
                        f"{c_at}.env.{name}",
                        (
                            f"partition '{ref}' runs {kind} '{workload.name}', for which "
                            "rocm-stack sets this; remove it here"
                        ),
                    )
                if isinstance(workload, InferenceConfig):
                    gpus = partition_size(host, container)
                    if gpus % workload.world_size:
                        yield at, (f"{_world(workload)} does not divide the {gpus} GPU(s) of partition '{ref}'")
                    api_port = workload.docker.published_port or workload.port
                    if (host.name, api_port) in published:
                        yield (
                            at,
                            (
                                f"host port {api_port} of '{host.name}' is already published by "
                                f"{published[(host.name, api_port)]}; set inference.docker.publishedPort"
                            ),
                        )
                    published[(host.name, api_port)] = f"inference '{workload.name}'"


@dataclass(frozen=True)
class GpuPool:
    """Kubernetes GPU nodes alike: `nodes` of them each advertise `per_node` of `resource`; `key` declares them."""

    resource: str
    nodes: int
    per_node: int
    key: str


def gpu_pools(cfg: _StackWithWorkloads) -> list[GpuPool]:
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


def _resource_problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """A partition resource exists only under the `mixed` naming strategy, for a mode some profile declares."""
    k8s = cfg.kubernetes
    if k8s is None:
        return
    produced = k8s.partition_resources()
    for kind, workloads in _by_kind(cfg):
        for index, workload in enumerate(workloads):
            resource = workload.kubernetes.gpu_resource if workload.kubernetes is not None else GPU_RESOURCE_NAME
            if resource == GPU_RESOURCE_NAME or resource in produced:
                continue
            at = f"{kind}[{index}].kubernetes.gpuResource"
            if k8s.resource_naming_strategy == "single":
                yield (
                    at,
                    (
                        f"the device plugin advertises partitions as {GPU_RESOURCE_NAME} under resourceNamingStrategy "
                        f"single, so no node offers {resource}: set {k8s.naming_key} to mixed or request "
                        f"{GPU_RESOURCE_NAME}"
                    ),
                )
            else:
                compute, memory = resource.removeprefix("amd.com/").upper().split("_")
                offered = ", ".join(sorted(produced)) or "none"
                yield (
                    at,
                    (
                        f"no partition profile puts GPUs in {compute}/{memory}, so no node offers {resource} "
                        f"(the profiles offer: {offered}); declare one in kubernetes.partitionProfiles"
                    ),
                )


def _fleet_problems(cfg: _StackWithWorkloads) -> Iterable[tuple[str, str]]:
    # (key path, pods, key path of the GPUs per pod, GPUs per pod, resource)
    demands: list[tuple[str, int, str, int, str]] = []
    for index, training in enumerate(cfg.training):
        if training.kubernetes is not None:
            at = f"training[{index}].kubernetes"
            demands.append(
                (
                    at,
                    training.kubernetes.nodes,
                    f"{at}.gpusPerNode",
                    training.kubernetes.gpus_per_node,
                    training.kubernetes.gpu_resource,
                )
            )
    for index, inference in enumerate(cfg.inference):
        if (served := inference.kubernetes) is not None:
            gpus_at = (
                f"inference[{index}].kubernetes.gpus"
                if served.gpus is not None
                else f"inference[{index}].tensorParallelSize"
            )  # the GPUs of a pod default to TP x PP over the replica's nodes
            demands.append(
                (
                    f"inference[{index}].kubernetes",
                    served.effective_replicas(cfg.environment) * served.nodes,
                    gpus_at,
                    inference.pod_gpus(),
                    served.gpu_resource,
                )
            )
    if not demands:
        return
    pools = gpu_pools(cfg)
    if not pools:
        if cfg.environment == "prod":
            yield (
                "gpuFleet",
                (
                    "prod runs GPU workloads on Kubernetes: declare the cluster's GPU nodes "
                    "({nodes: N, gpusPerNode: G}, and the `nodes` of each partition profile) so that jobs "
                    "that can never be scheduled are refused"
                ),
            )
        return
    produced = cfg.kubernetes.partition_resources() if cfg.kubernetes is not None else {}
    for resource in dict.fromkeys(demand[4] for demand in demands):
        offering = [pool for pool in pools if pool.resource == resource]
        wanted = [demand for demand in demands if demand[4] == resource]
        if not offering:
            if resource == GPU_RESOURCE_NAME or resource in produced:  # an unknown name is refused on its own
                for at, *_ in wanted:
                    yield (
                        f"{at}.gpuResource",
                        (
                            f"no declared GPU node offers {resource} (gpuFleet declares the nodes of {GPU_RESOURCE_NAME}, "
                            "the `nodes` of a partition profile those of its partitions): the pods could never run"
                        ),
                    )
            continue
        yield from _pool_problems(cfg, resource, offering, wanted)


def _pool_problems(
    cfg: _StackWithWorkloads, resource: str, pools: list[GpuPool], demands: list[tuple[str, int, str, int, str]]
) -> Iterable[tuple[str, str]]:
    """Whether the pods asking for `resource` fit the nodes advertising it (necessary conditions only)."""
    unit = "GPUs" if resource == GPU_RESOURCE_NAME else resource
    holder = " and ".join(pool.key.removesuffix(".nodes") for pool in pools)
    has = "has" if len(pools) == 1 else "together have"
    key = pools[0].key
    nodes = sum(pool.nodes for pool in pools)
    largest = max(pool.per_node for pool in pools)
    capacity = sum(pool.nodes * pool.per_node for pool in pools)
    for index, inference in enumerate(cfg.inference):
        k8s = inference.kubernetes
        if k8s is None or k8s.gpu_resource != resource:
            continue
        replicas = k8s.most_replicas(cfg.environment)
        at = f"inference[{index}].kubernetes." + ("replicas" if k8s.autoscaling is None else "autoscaling.maxReplicas")
        # With a budget a Deployment's replicas are spread one per node (topologySpreadConstraints, DoNotSchedule).
        if not k8s.multi_node and k8s.effective_min_available(cfg.environment) is not None and replicas > nodes:
            yield at, f"{replicas} replicas are spread one per node, but {holder} {has} {nodes}: some never start"
        gpus = inference.pod_gpus() * k8s.nodes
        # Beyond the minimum (counted with every other workload below) a burst takes free GPUs or, with queues,
        # preempts training (serving's PriorityClass, through Kueue's borrowWithinCohort); more than the whole fleet
        # can never run.
        if k8s.autoscaling is not None and replicas * gpus > capacity:
            yield at, f"{replicas} replicas x {gpus} {unit} exceed the {capacity} {unit} of {holder}: lower it"
    for at, pods, gpus_at, gpus, _ in demands:
        if gpus > largest:
            yield gpus_at, (f"{gpus} {unit} per pod, but {holder} nodes have {largest}: the pod can never be scheduled")
        if at.startswith("training") and pods > nodes:
            yield f"{at}.nodes", f"{pods} nodes, but {holder} {has} {nodes}: the job can never start"
    if len(pools) == 1:
        per_node = largest
        # A pod asking for more than half a node's GPUs leaves too few for a second such pod: one node each.
        exclusive = sum(pods for _, pods, _, gpus, _ in demands if per_node >= gpus > per_node / 2)
        if exclusive > nodes:
            yield (
                key,
                (
                    f"{exclusive} Kubernetes pods each need more than half of a node's {per_node} {unit}, so no two share "
                    f"a node, but the fleet has {nodes} nodes: some never run"
                ),
            )
    total = sum(pods * gpus for _, pods, _, gpus, _ in demands)
    if total > capacity:
        shape = " + ".join(f"{pool.nodes} x {pool.per_node}" for pool in pools)
        yield (
            key,
            (
                f"the Kubernetes workloads need {total} {unit} together, the fleet has {capacity} ({shape}); "
                "a multi-node job whose pods cannot all run would wait forever at its rendezvous"
            ),
        )


def host_data_dirs(cfg: _StackWithWorkloads, host: str) -> list[str]:
    """The host directories whose filesystems fill up under the workloads on `host`: the checkpoint roots of its
    trainings and the model-cache roots of its vLLM servers (node-exporter reports their free space)."""
    dirs = set()
    for _, workloads in _by_kind(cfg):
        for workload in workloads:
            placement = workload.docker
            if placement is None or not any(ref.split("/")[0] == host for ref in placement.partitions):
                continue
            dirs.add(placement.checkpoint_dir if isinstance(placement, TrainingDocker) else placement.model_cache_dir)
    return sorted(dirs)
