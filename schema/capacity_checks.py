"""The workloads' capacity checks: the Docker partitions they claim, the resources their pods request, and the
fleet and GPU pools that must hold them."""

from __future__ import annotations

from collections.abc import Iterable


from .kubernetes import (
    GPU_RESOURCE_NAME,
)
from . import monitoring
from .derived import (
    GpuPool,
    StackWithWorkloads,
    by_kind,
    gpu_pools,
    parallel_layout,
    partition_size,
    partitions_claimed,
)
from .workloads import (
    INFERENCE_MANAGED_ENV,
    PARTITION_KEYS_DECIDED_BY_WORKLOAD,
    TORCHRUN_SHUTDOWN_ENV,
    TRAINING_MANAGED_ENV,
    InferenceConfig,
    TrainingConfig,
)


def partition_problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
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
    for kind, workloads in by_kind(cfg):
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
                        yield (
                            at,
                            (f"{parallel_layout(workload)} does not divide the {gpus} GPU(s) of partition '{ref}'"),
                        )
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


def resource_problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """A partition resource exists only under the `mixed` naming strategy, for a mode some profile declares."""
    k8s = cfg.kubernetes
    if k8s is None:
        return
    produced = k8s.partition_resources()
    for kind, workloads in by_kind(cfg):
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


def fleet_problems(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
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
    cfg: StackWithWorkloads, resource: str, pools: list[GpuPool], demands: list[tuple[str, int, str, int, str]]
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
