"""The workloads' cross-field checks (`problems`): each training and inference against the rest of the stack
(images per GPU family, namespaces, security, queues, networks, drains, multi-node, services, secrets, memory), and
the catalogue's rules on what they ask of their hosts (rules/). Their capacity (partitions, resources, fleets) is
schema/capacity_checks.py's.

Why one file: `problems` runs each workload's checks in one pass, and they share its helpers (namespaces, drains,
queues)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping


import rules
from rules.credentials import PROD_VLLM_BEHIND_PROXY
from rules.docker_hosts import PROD_HOST_ACCESS
from rules.kubernetes import PROD_EXPOSURE, PROD_POD_HOST_ACCESS

from .types import (
    quantity_value,
    _human_bytes,
)
from .autoscaling import (
    autoscaling_problems,
    stack_autoscaling_problems,
)
from .stackfile import set_secret
from domain.gpus import MODELS

from .docker import (
    host_gfx,
    image_for,
    no_image_problem,
)
from .kubernetes import (
    BUILTIN_NAMESPACES,
    SCHEDULER_FILTERED_TAINT_EFFECTS,
    NodeDrainPolicy,
)
from .capacity_checks import fleet_problems, partition_problems, resource_problems
from .derived import (
    workload_pod_needs,
    DEVICE_ID_LABEL,
    StackWithWorkloads,
    by_kind,
    gpu_pools,
    kubernetes_gfx,
    parallel_layout,
    partitions_claimed,
    queued_workloads,
)
from .workloads import (
    INFERENCE_MANAGED_ENV,
    NETWORK_MANAGED_ENV,
    TORCHRUN_SHUTDOWN_ENV,
    TRAINING_MANAGED_ENV,
    VLLM_MANAGED_FLAGS,
    HostPathStorage,
    InferenceConfig,
    InferenceKubernetes,
    PvcStorage,
    TrainingConfig,
    TrainingKubernetes,
    pod_tolerations,
)


def _family_image_problems(
    cfg: StackWithWorkloads, workload: TrainingConfig | InferenceConfig, at: str
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


def problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """Cross-field checks of `training`, `inference` and `gpuFleet` (key paths relative to `rocm-stack:`)."""
    seen: dict[str, str] = {}
    for kind, workloads in by_kind(cfg):
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
    yield from partition_problems(cfg)
    if cfg.environment == "prod":
        yield from _host_access_problems(cfg)
    yield from _memory_problems(cfg)
    yield from resource_problems(cfg)
    yield from fleet_problems(cfg)
    yield from _quota_problems(cfg)


def _quota_problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
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


def _service_problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """Two workloads whose Services (the stack's, or one a controller creates for them) share a name in one
    namespace: the controller finds the name taken and never creates its own, and the pods that resolve through it
    never find each other (workload names alone are unique, `<name>-router` and `<name>-lws` are derived)."""
    taken: dict[tuple[str, str], str] = {}
    for kind, workloads in by_kind(cfg):
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


def _host_access_problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """The host directories the Docker workloads mount and the ports they publish, by the policy pack's rules
    (rules/containers.py, rules/pods.py; schema/docker.py checks the partitions' own)."""
    for index, training in enumerate(cfg.training):
        if training.docker is not None:
            if problem := rules.host_mount_problem(training.docker.checkpoint_dir, read_only=False):
                yield f"training[{index}].docker.checkpointDir", PROD_HOST_ACCESS.refusal(problem)
    for index, inference in enumerate(cfg.inference):
        if inference.docker is not None:
            if problem := rules.host_mount_problem(inference.docker.model_cache_dir, read_only=False):
                yield f"inference[{index}].docker.modelCacheDir", PROD_HOST_ACCESS.refusal(problem)
            if problem := rules.published_port_problem(inference.port, inference.docker.published_port):
                yield f"inference[{index}].docker.publishedPort", PROD_HOST_ACCESS.refusal(problem)
        k8s = inference.kubernetes
        if k8s is not None:
            cache = k8s.effective_model_cache(cfg.environment)
            if isinstance(cache, HostPathStorage) and (
                problem := rules.host_mount_problem(cache.path, read_only=False)
            ):
                yield f"inference[{index}].kubernetes.modelCache.path", PROD_POD_HOST_ACCESS.refusal(problem)
            if problem := rules.load_balancer_problem(k8s.service_type, k8s.allow_load_balancer):
                yield f"inference[{index}].kubernetes.serviceType", PROD_EXPOSURE.refusal(problem)
    for index, training in enumerate(cfg.training):
        checkpoints = training.kubernetes.checkpoints if training.kubernetes is not None else None
        if isinstance(checkpoints, HostPathStorage) and (
            problem := rules.host_mount_problem(checkpoints.path, read_only=False)
        ):
            yield f"training[{index}].kubernetes.checkpoints.path", PROD_POD_HOST_ACCESS.refusal(problem)
    if cfg.monitoring.enabled and (problem := rules.published_port_problem(0, cfg.monitoring.exporter_port)):
        yield "monitoring.exporterPort", PROD_HOST_ACCESS.refusal(problem)


def _memory_problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
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


def secret_problems(cfg: StackWithWorkloads, secret_names: Collection[str]) -> Iterable[tuple[str, str]]:
    """Secrets a workload needs; `secret_names` are the `rocm-stack:` secret keys set (without the prefix)."""
    if cfg.environment == "prod" and "vllmApiKey" not in secret_names:
        served = [i.name for i in cfg.inference if i.kubernetes is not None]
        if served:
            yield (
                "vllmApiKey",
                PROD_VLLM_BEHIND_PROXY.refusal(
                    f"prod serves {', '.join(served)} on Kubernetes, reachable by every pod of the cluster: set the API "
                    f"key vLLM requires on /v1 with {set_secret('vllmApiKey', '<key>')}"
                ),
            )
        for index, inference in enumerate(cfg.inference):
            if inference.docker is not None:
                yield (
                    "vllmApiKey",
                    PROD_VLLM_BEHIND_PROXY.refusal(
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
    cfg: StackWithWorkloads, k8s: TrainingKubernetes | InferenceKubernetes, name: str, at: str
) -> Iterable[tuple[str, str]]:
    """`podSecurity`, if set, is the level the pods need (rules/pods.py, the pack's rule for the
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


def _queue_problems(
    cfg: StackWithWorkloads,
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


def _namespace_problems(cfg: StackWithWorkloads, namespace: str, at: str) -> Iterable[tuple[str, str]]:
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


def _training_problems(cfg: StackWithWorkloads, training: TrainingConfig, at: str) -> Iterable[tuple[str, str]]:
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


def _inference_problems(cfg: StackWithWorkloads, inference: InferenceConfig, at: str) -> Iterable[tuple[str, str]]:
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
                f"{parallel_layout(inference)} does not divide the {gpus} GPUs of a replica; use a multiple "
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
                f"{nodes} nodes x {gpus} GPUs is {gpus * nodes} GPUs per replica, but {parallel_layout(inference)} is a model "
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


def _driver_drain(cfg: StackWithWorkloads) -> NodeDrainPolicy | None:
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
    cfg: StackWithWorkloads, inference: InferenceConfig, at: str, budget: bool
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


def _training_drain_problems(cfg: StackWithWorkloads, k8s: TrainingKubernetes, at: str) -> Iterable[tuple[str, str]]:
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
