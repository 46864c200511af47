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

Why one file: training and inference share their Kubernetes and Docker parts, storage, tolerations and environment
rules; their checks are schema/workload_checks.py's and schema/capacity_checks.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Annotated, Literal

from pydantic import AfterValidator, ByteSize, Field, model_validator

import rules

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
    TaintEffect,
    WorkloadShmSize,
    StopGraceSeconds,
    WaitSeconds,
)
from .base import matching as _matching
from .autoscaling import (
    MAX_DRAIN_SECONDS,
    InferenceAutoscaling,
)
from .checks import ChecksConfig
from domain.gpus import MAX_GPUS_PER_HOST

from .docker import (
    VISIBILITY_VARIABLES,
    IpAddress,
    PinnedImage,
)
from .kubernetes import (
    GPU_RESOURCE_NAME,
    GpuNodeTaint,
    NamespaceName,
)


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


# The most steps a Docker inference rolls in (partitions / maxUnavailable): each server depends on one before it, and
# the Pulumi SDK walks that chain recursively at every registration that names a dependency (pulumi 3.272.0
# runtime/resource_cycle_breaker.py _with_transitive_deps): synth took 27 s at 298 steps and 144 s at 598, and failed
# with a RecursionError at about 1,000 (measured with the benchmark's fleet).
MAX_ROLL_STEPS = 256


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
    order. At least the number of partitions: all at once. At most 256 steps (partitions / maxUnavailable)."""

    @model_validator(mode="after")
    def _roll_steps(self) -> InferenceDocker:
        steps = -(-len(self.partitions) // self.max_unavailable)
        if steps > MAX_ROLL_STEPS:
            raise ValueError(
                f"{len(self.partitions)} servers, {self.max_unavailable} at a time, roll in {steps} steps, each waiting "
                f"for the one before: more than {MAX_ROLL_STEPS}, a chain of dependencies the Pulumi SDK checks for "
                "cycles by walking it again at every registration (time grows with its square; a RecursionError at "
                "about 1,000), and at minutes per vLLM start a roll of days; set maxUnavailable to at least "
                f"{-(-len(self.partitions) // MAX_ROLL_STEPS)}"
            )
        return self

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
