"""vLLM's OpenAI-compatible server (`vllm serve MODEL`) on Kubernetes and on Docker partitions.

Why one file: the Deployment, the LeaderWorkerSet and the Docker containers of one vLLM server share its arguments,
its authenticating proxy and its probes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import cast

import pulumi
import pulumi_docker as docker
from pulumi_kubernetes import Provider
from pulumi_kubernetes.apiextensions import CustomResource
from pulumi_kubernetes.apps import v1 as apps_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1
from pulumi_kubernetes.networking import v1 as networking_v1
from pulumi_kubernetes.policy import v1 as policy_v1

from rules import HEALTH_LABEL
from schema.docker import PROXY_IMAGE, PortMapping, SecurityProfile
from schema.queues import KUEUE_QUEUE_LABEL
from schema.derived import pod_capabilities
from schema.workloads import InferenceConfig, Toleration, model_cache_dir
from components.docker.gpu_host import published, pulled_image
from components.docker.partitions import Partition, WorkloadContainerArgs, pull_on_hosts, workload_container
from components.docker.checks import found_running, verdict
from components.docker.deadlines import create_timeouts
from components.docker.logs import log_args
from components.docker.readback import seconds
from components.k8s.replacement import replacement
from components.monitoring import MONITORING_NAMESPACE
from . import multinode, proxy
from .autoscaling import AutoscalerArgs, drain_hook, proxy_drain_hook, scaled_object
from .gpu_check import GpuCheckArgs, gpu_check_container
from .pods import (
    API_KEY_KEY,
    AUTOMOUNT_SERVICE_ACCOUNT_TOKEN,
    POD_SECURITY,
    api_ingress,
    api_service,
    auto_named_secret,
    env_secret,
    env_vars,
    ingress_policy,
    labels_of,
    pod_resources,
    secret_env_var,
    program_config_map,
    proxy_container,
    proxy_pod_volumes,
    rccl_pod,
    rolling_update,
    security_context,
    shm_volume,
    storage_volume,
    tolerations_of,
)

from .router import VllmRouter, VllmRouterArgs

# The image runs as root; Hugging Face downloads land in HF_HOME, which the model cache volume backs.
MODEL_CACHE_MOUNT = "/root/.cache/huggingface"
TOKEN_KEY = "token"
DOCKER_TOKEN_FILE = "/run/secrets/huggingface-token"
DOCKER_API_KEY_FILE = "/run/secrets/vllm-api-key"
HEALTH_PATH = "/health"
# pulumi-kubernetes' annotation that forces a server-side apply over other field managers' conflicting fields.
PATCH_FORCE_ANNOTATION = "pulumi.com/patchForce"
REPLICAS_PATH = "spec.replicas"
# Lists the served model, so it answers only once the model is loaded. vLLM's API key guards every path under
# /v1 and nothing else (vllm/entrypoints/openai/api_server.py build_app: `if token := envs.VLLM_API_KEY or
# args.api_key:` ... `if not url_path.startswith("/v1"): return await call_next(request)` ... `"Bearer " + token`).
MODELS_PATH = "/v1/models"
PROBE_PERIOD_SECONDS = 10
# The readiness probe with an API key: an httpGet probe's headers are literal (the key would sit in the
# Deployment spec), so the container's own VLLM_API_KEY is read by a small Python check instead.
MODELS_CHECK = (
    "import os, urllib.request; urllib.request.urlopen(urllib.request.Request("
    "'http://127.0.0.1:{port}" + MODELS_PATH + "', "
    "headers={{'Authorization': 'Bearer ' + os.environ['VLLM_API_KEY']}}), timeout=5)"
)
# The Docker health check of a vLLM container (no API key needed: vLLM's auth middleware guards /v1 paths only).
HEALTH_INTERVAL_SECONDS, HEALTH_TIMEOUT_SECONDS = 30, 10


def serve_command(inference: InferenceConfig, gpus: int, host: str = "0.0.0.0") -> list[str]:
    return ["vllm", "serve", inference.model, *inference.vllm_args(gpus, host)]


# A Docker proxy's label: the scheme clients and Prometheus reach it with.
PROXY_SCHEME_LABEL = "rocm-stack.proxy-scheme"

# nginx's graceful shutdown (nginx.org/en/docs/control.html: "QUIT graceful shutdown"; TERM, INT: "fast shutdown").
PROXY_STOP_SIGNAL = "SIGQUIT"


def pod_proxy_port(inference: InferenceConfig) -> int:
    """The proxy's port beside vLLM's own in their shared network namespace (a pod's, a Docker server's)."""
    return proxy.POD_PORT if inference.port != proxy.POD_PORT else proxy.POD_PORT + 1


@dataclass(frozen=True)
class VllmServerArgs:
    inference: InferenceConfig
    environment: str
    image: str
    provider: Provider
    namespace: pulumi.Input[str]
    huggingface_token: pulumi.Input[str] | None = None
    """The secret `rocm-stack:huggingfaceToken`, or None: no Kubernetes Secret, no HF_TOKEN."""
    gpu_ready: Sequence[pulumi.Resource] = ()
    api_key: pulumi.Input[str] | None = None
    """The secret `rocm-stack:vllmApiKey` (required in prod): an nginx sidecar (components/workloads/proxy.py)
    demands it on every path but /health and /metrics, vLLM listening on the pod's loopback only; None: vLLM serves
    the cluster itself, open."""
    secret_env: bool = False
    """`inference` is a secret stack key (a nested `secure:` env value)."""
    gpu_check: GpuCheckArgs | None = None
    """gpucheck before vLLM on every pod's GPUs (gpu_check.py); None: `checks.enable` is off."""
    start_seconds: int = 0
    """How long one replica may take to become ready (InferenceConfig.replica_start_seconds)."""
    metrics_namespace: str = MONITORING_NAMESPACE
    """Where the Prometheus that scrapes vLLM's /metrics runs: its pods reach the API port."""
    priority_class: str | None = None
    """The pods' PriorityClass (`kubernetes.queues`: serving's, above training's); None: the cluster's default."""
    autoscaler: AutoscalerArgs | None = None
    """`kubernetes.autoscaling`: a KEDA ScaledObject sets the replicas; None: `replicas` does."""
    leader_worker_set_controller: pulumi.Resource | None = None
    """The LeaderWorkerSet release a multi-node server's LeaderWorkerSet waits for (its CRD and webhooks)."""
    tolerations: Sequence[Toleration] = ()
    """The pods' tolerations (schema.workloads.pod_tolerations)."""


class VllmServer(pulumi.ComponentResource):
    """A Deployment serving one model (a LeaderWorkerSet of multi-node groups with `nodes` > 1, multinode.py), its
    Service, the token Secret, the model cache and (prod) a PDB.

    With an API key the pod's port is an nginx sidecar's (proxy.py) and vLLM listens on 127.0.0.1: no other pod
    reaches vLLM but through the key check. The kubelet probes /health through the sidecar (it forwards exactly
    that path), and readiness runs inside the vLLM container.

    Rolling updates replace one replica at a time without a surge pod (maxSurge 0): a surge pod would need
    GPUs that a fully used fleet does not have, and the rollout would hang. So an update never needs a GPU the
    Deployment does not hold: each new pod takes the GPUs its predecessor freed (and passes gpucheck on them first),
    while the other replicas serve; with one replica the server is down until the new pod is ready. Replicas spread
    over nodes, strictly where a budget exists (one node's drain or failure never takes every replica).
    """

    # One of the two: the Deployment of a one-node server, the LeaderWorkerSet of a multi-node one (multinode.py).
    deployment: apps_v1.Deployment | None
    leader_worker_set: CustomResource | None
    service: core_v1.Service
    # Who reaches the pods: one policy, or for a multi-node server the group's own traffic (every pod) and a second
    # policy of the API port on the leaders alone.
    network_policy: networking_v1.NetworkPolicy
    api_policy: networking_v1.NetworkPolicy | None
    # The labels of the pods serving the API (the leaders of a multi-node server's groups).
    api_selector: dict[str, str]
    # `scaleTargetRef` of the workload (apiVersion, kind, name) for an autoscaler.
    scale_target_ref: dict[str, str]
    token: core_v1.Secret | None
    api_key: core_v1.Secret | None
    # The proxy's nginx.conf (content-named, immutable: a new configuration rolls the pods); None without a key.
    proxy_config: core_v1.ConfigMap | None
    cache_claim: core_v1.PersistentVolumeClaim | None
    # The environment as a Secret when `inference` is a secret stack key (pods.env_secret).
    env_secret: core_v1.Secret | None
    disruption_budget: policy_v1.PodDisruptionBudget | None
    # The router in front of the replicas (`kubernetes.router`), and the Service clients use: its or the replicas'.
    router: VllmRouter | None
    entry: core_v1.Service
    # programs/gpucheck.py for the pods' check (None without it).
    program: core_v1.ConfigMap | None
    # KEDA's ScaledObject when the replicas follow the queue (autoscaling.py).
    scaler: pulumi.CustomResource | None

    def __init__(self, name: str, args: VllmServerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:workloads:VllmServer", name, None, opts)
        inference, k8s = args.inference, args.inference.kubernetes
        assert k8s is not None, "VllmServer needs inference.kubernetes"
        gpus = inference.pod_gpus()
        replicas = k8s.effective_replicas(args.environment)
        labels = labels_of(name, "vllm")
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)

        def metadata(object_name: str) -> meta_v1.ObjectMetaArgs:
            return meta_v1.ObjectMetaArgs(name=object_name, namespace=args.namespace, labels=labels)

        # RDMA between a group's pods (`network`: multi-node only): the resource, IPC_LOCK, RCCL's variables.
        rccl = rccl_pod(k8s.network)
        server_env = inference.server_env(gpus) | (rccl.env or {})
        self.env_secret = (
            env_secret(f"{name}-env", server_env, args.namespace, labels, child) if args.secret_env else None
        )
        env = env_vars(server_env, self.env_secret)
        env.append(core_v1.EnvVarArgs(name="HF_HOME", value=MODEL_CACHE_MOUNT))
        if k8s.multi_node:
            env += multinode.group_env()
        # Auto-named (pods.auto_named_secret): a rotated token or key is a new Secret, and the pods roll onto it.
        self.token = None
        if args.huggingface_token is not None:
            self.token = auto_named_secret(
                f"{name}-hf-token", {TOKEN_KEY: args.huggingface_token}, args.namespace, labels, child
            )
            env.append(secret_env_var("HF_TOKEN", self.token, TOKEN_KEY))
        self.api_key, self.proxy_config = None, None
        proxied = args.api_key is not None
        port = pod_proxy_port(inference) if proxied else inference.port
        proxy_volumes: list[core_v1.VolumeArgs] = []
        if args.api_key is not None:
            # vLLM keeps the key too (a second check on /v1); the sidecar reads its own file of the same Secret.
            self.api_key = auto_named_secret(
                f"{name}-api-key",
                {API_KEY_KEY: args.api_key, proxy.API_KEY_MAP: proxy.secret_key_map(args.api_key)},
                args.namespace,
                labels,
                child,
            )
            env.append(secret_env_var("VLLM_API_KEY", self.api_key, API_KEY_KEY))
            config = proxy.nginx_config(port, f"{proxy.LOOPBACK}:{inference.port}", proxy.POD_OPEN_PATHS)
            self.proxy_config = program_config_map(
                f"{name}-proxy", {proxy.CONFIG_FILE: config}, args.namespace, labels, child
            )
            proxy_volumes = proxy_pod_volumes(self.proxy_config, self.api_key)

        cache = k8s.effective_model_cache(args.environment)
        cache_volume, self.cache_claim = storage_volume(
            "model-cache", cache, f"{name}-model-cache", metadata(f"{name}-model-cache"), child
        )

        def health(period: int, failures: int) -> core_v1.ProbeArgs:
            return core_v1.ProbeArgs(
                # A named port resolves among the probed container's own ports; the sidecar's is a number here.
                http_get=core_v1.HTTPGetActionArgs(path=HEALTH_PATH, port=port if proxied else "http"),
                period_seconds=period,
                timeout_seconds=5,
                failure_threshold=failures,
            )

        # Ready = serving the model; alive = the server process answers (a busy engine must not be restarted).
        models = core_v1.ProbeArgs(
            http_get=core_v1.HTTPGetActionArgs(path=MODELS_PATH, port="http") if self.api_key is None else None,
            exec_=core_v1.ExecActionArgs(command=["python3", "-c", MODELS_CHECK.format(port=inference.port)])
            if self.api_key is not None
            else None,
            period_seconds=5,
            timeout_seconds=10,
            failure_threshold=3,
        )

        resources = pod_resources(inference.pod_requests())
        self.program = None
        init_containers, program_volumes = [], []
        if args.gpu_check is not None:
            # A gpucheck.py change names a new ConfigMap: the template changes and the pods roll through the new check.
            self.program = program_config_map(f"{name}-program", args.gpu_check.programs, args.namespace, labels, child)
            init_containers.append(gpu_check_container(args.gpu_check, args.image, gpus, resources, "program"))
            program_volumes.append(
                core_v1.VolumeArgs(
                    name="program", config_map=core_v1.ConfigMapVolumeSourceArgs(name=self.program.metadata.name)
                )
            )
        serve = serve_command(inference, gpus, proxy.LOOPBACK if proxied else "0.0.0.0")
        model_volumes = [
            core_v1.VolumeMountArgs(name="dshm", mount_path="/dev/shm"),
            core_v1.VolumeMountArgs(name="model-cache", mount_path=MODEL_CACHE_MOUNT),
        ]
        server = core_v1.ContainerArgs(
            name="vllm",
            image=args.image,
            command=multinode.leader_command(serve, k8s.nodes) if k8s.multi_node else serve,
            env=env,
            ports=None if proxied else [core_v1.ContainerPortArgs(name="http", container_port=inference.port)],
            resources=resources,
            security_context=security_context(pod_capabilities(k8s)),
            # Liveness and readiness only start once the model is loaded and /health answered.
            startup_probe=health(
                PROBE_PERIOD_SECONDS, math.ceil(inference.startup_timeout_seconds / PROBE_PERIOD_SECONDS)
            ),
            readiness_probe=models,
            liveness_probe=health(PROBE_PERIOD_SECONDS, 3),
            lifecycle=drain_hook(inference.port, k8s.termination_grace_period_seconds),
            volume_mounts=model_volumes,
        )
        containers = [server]
        if proxied:
            containers.append(proxy_container(port, proxy_drain_hook(inference.port)))
        # `pulumi up` waits for the rollout (pulumi-kubernetes' Deployment awaiter: the new ReplicaSet's pods ready,
        # the Deployment Available; a LeaderWorkerSet's Available condition, multinode.WAIT_FOR), so a pod failing
        # its GPU check fails `pulumi up`, and the next `pulumi up` awaits it again (docs/operations.md): one pod's
        # (group's) start (check, download and load) on create, where every replica starts at once; an update
        # replaces the replicas one after another (maxSurge 0, maxUnavailable 1).
        start_minutes = math.ceil(args.start_seconds / 60)
        # An update also waits for each old pod's drain (its grace) before the next one goes.
        stop_minutes = math.ceil(k8s.termination_grace_period_seconds / 60)
        rollout_timeouts = pulumi.CustomTimeouts(
            create=f"{start_minutes + 10}m",
            update=f"{k8s.most_replicas(args.environment) * (start_minutes + stop_minutes) + 10}m",
        )
        # Pulumi takes back the fields it declares from other field managers instead of failing the apply with a
        # conflict: spec.replicas after autoscaling is turned off, which the HPA's writes through the scale
        # subresource left to "kube-controller-manager" (pulumi/pulumi-kubernetes#2491); the provider forces its
        # server-side apply on this annotation (provider/pkg/await/await.go patchForce).
        workload_annotations = {PATCH_FORCE_ANNOTATION: "true"}
        workload_opts = pulumi.ResourceOptions.merge(
            child,
            pulumi.ResourceOptions(
                custom_timeouts=rollout_timeouts,
                # The autoscaler's count stays: the engine resets spec.replicas to the state's value before the
                # diff, and the provider's apply drops it or sends the live count (autoscaling.py).
                ignore_changes=[REPLICAS_PATH] if args.autoscaler is not None else None,
            ),
        )
        # Queued (`queueName`): Kueue admits each Deployment pod, or each LeaderWorkerSet group, against the queue's
        # quota, and its webhooks then refuse some changes: replacement() replaces the object for them (IMMUTABLE).
        queue_labels = {KUEUE_QUEUE_LABEL: k8s.queue_name} if k8s.queue_name is not None else {}
        declared = {"metadata": {"labels": queue_labels}}
        min_available = k8s.effective_min_available(args.environment)
        volumes = [shm_volume(inference.shm_size), cache_volume, *program_volumes]

        def template(
            containers: list[core_v1.ContainerArgs],
            volumes: list[core_v1.VolumeArgs],
            spread: list[core_v1.TopologySpreadConstraintArgs] | None = None,
        ) -> core_v1.PodTemplateSpecArgs:
            return core_v1.PodTemplateSpecArgs(
                metadata=meta_v1.ObjectMetaArgs(labels=labels, annotations=rccl.annotations),
                spec=core_v1.PodSpecArgs(
                    # vLLM reads VLLM_* variables; Kubernetes' service links would inject some
                    # (VLLM_PORT for a Service named vllm, per vLLM's environment-variable docs).
                    enable_service_links=False,
                    termination_grace_period_seconds=k8s.termination_grace_period_seconds,
                    security_context=POD_SECURITY,
                    automount_service_account_token=AUTOMOUNT_SERVICE_ACCOUNT_TOKEN,
                    host_network=rccl.host_network,
                    dns_policy=rccl.dns_policy,
                    priority_class_name=args.priority_class,
                    node_selector=k8s.node_selector or None,
                    tolerations=tolerations_of(args.tolerations),
                    topology_spread_constraints=spread,
                    init_containers=init_containers or None,
                    containers=containers,
                    volumes=volumes,
                ),
            )

        self.deployment, self.leader_worker_set = None, None
        if k8s.multi_node:
            # The workers: vLLM's headless ranks, nothing listening for clients (no probes, no proxy).
            worker = core_v1.ContainerArgs(
                name="vllm",
                image=args.image,
                command=multinode.worker_command(serve, k8s.nodes),
                env=env,
                resources=resources,
                security_context=security_context(pod_capabilities(k8s)),
                # Its ranks serve the leader's requests: it stops only once the leader has drained and exited.
                lifecycle=multinode.worker_drain_hook(port),
                volume_mounts=model_volumes,
            )
            self.leader_worker_set = CustomResource(
                name,
                api_version=multinode.LWS_API_VERSION,
                kind=multinode.LWS_KIND,
                metadata=meta_v1.ObjectMetaArgs(
                    name=inference.leader_worker_set_name,
                    namespace=args.namespace,
                    labels={**labels, **queue_labels},
                    annotations={**workload_annotations, **multinode.WAIT_FOR},
                ),
                spec=multinode.leader_worker_set_spec(
                    replicas, k8s.nodes, template(containers, [*volumes, *proxy_volumes]), template([worker], volumes)
                ),
                opts=pulumi.ResourceOptions.merge(
                    workload_opts,
                    pulumi.ResourceOptions.merge(
                        replacement(multinode.LWS_API_VERSION, multinode.LWS_KIND, declared),
                        pulumi.ResourceOptions(
                            depends_on=[*args.gpu_ready, *filter(None, [args.leader_worker_set_controller])],
                            # Replaced also by a new name or namespace (multinode.py): the old groups go first, as
                            # their GPUs are what the new ones need.
                            delete_before_replace=True,
                        ),
                    ),
                ),
            )
        else:
            # maxSkew 1 over hostnames; DoNotSchedule with a budget (config checks replicas <= gpuFleet.nodes),
            # else only preferred ("ScheduleAnyway ... giving higher precedence to topologies that would help reduce
            # the skew", core/v1 TopologySpreadConstraint).
            spread = core_v1.TopologySpreadConstraintArgs(
                max_skew=1,
                topology_key="kubernetes.io/hostname",
                when_unsatisfiable="DoNotSchedule" if min_available is not None else "ScheduleAnyway",
                label_selector=meta_v1.LabelSelectorArgs(match_labels=labels),
            )
            self.deployment = apps_v1.Deployment(
                name,
                metadata=meta_v1.ObjectMetaArgs(
                    name=name,
                    namespace=args.namespace,
                    labels={**labels, **queue_labels},
                    annotations=workload_annotations,
                ),
                spec=apps_v1.DeploymentSpecArgs(
                    replicas=replicas,
                    selector=meta_v1.LabelSelectorArgs(match_labels=labels),
                    strategy=rolling_update(max_surge=0, max_unavailable=1),
                    template=template(containers, [*volumes, *proxy_volumes], [spread]),
                ),
                opts=pulumi.ResourceOptions.merge(
                    workload_opts,
                    pulumi.ResourceOptions.merge(
                        replacement("apps/v1", "Deployment", declared),
                        pulumi.ResourceOptions(depends_on=list(args.gpu_ready)),
                    ),
                ),
            )
        # The API is the leaders' (a multi-node group's workers serve no client): what the Service, and anything
        # that finds the API's pods itself (a router), selects.
        self.api_selector = multinode.leader_selector(labels) if k8s.multi_node else labels
        # What an autoscaler scales through its scale subresource: the Deployment's pods, or the LeaderWorkerSet's
        # groups (its CRD's `scale`: .spec.replicas, selector .status.hpaPodSelector, the leaders).
        self.scale_target_ref = {
            "apiVersion": multinode.LWS_API_VERSION if k8s.multi_node else "apps/v1",
            "kind": multinode.LWS_KIND if k8s.multi_node else "Deployment",
            "name": inference.leader_worker_set_name if k8s.multi_node else name,
        }
        # With a router, it is the entry point (router.py): the replicas' Service stays in the cluster (the
        # ServiceMonitor scrapes through it) and only the router and the monitoring namespace reach the API port.
        routed = k8s.router is not None
        # The Service (and the router) follow the workload: a new selector (a Deployment switched to a LeaderWorkerSet)
        # takes effect once the new pods are up, as `pulumi up` awaits them before the steps of what depends on them;
        # until then the old replicas serve.
        workload: pulumi.Resource = self.leader_worker_set or cast(apps_v1.Deployment, self.deployment)
        self.service = api_service(
            f"{name}-service",
            metadata(name),
            self.api_selector,
            "ClusterIP" if routed else k8s.service_type,
            k8s.allow_load_balancer and not routed,
            inference.port,
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[workload])),
        )
        self.router = None
        if k8s.router is not None:
            self.router = VllmRouter(
                inference.router_name,
                VllmRouterArgs(
                    router=k8s.router,
                    environment=args.environment,
                    provider=args.provider,
                    namespace=args.namespace,
                    workload=name,
                    backend_labels=self.api_selector,
                    backend_port=port,
                    api_key=self.api_key,
                    service_type=k8s.service_type,
                    allow_load_balancer=k8s.allow_load_balancer,
                    port=inference.port,
                    clients=k8s.clients,
                    metrics_namespace=args.metrics_namespace,
                    backends=[workload],
                ),
                pulumi.ResourceOptions(parent=self),
            )
        api = (
            api_ingress("ClusterIP", [self.router.labels], args.metrics_namespace)
            if self.router is not None
            else api_ingress(k8s.service_type, k8s.clients, args.metrics_namespace)
        )
        self.api_policy = None
        if k8s.multi_node:
            # The pods of a group reach each other on every port: the torch.distributed store on --master-port,
            # ZeroMQ queues and RCCL on ephemeral ones (as a multi-node training's pods).
            group = networking_v1.NetworkPolicyIngressRuleArgs(
                from_=[networking_v1.NetworkPolicyPeerArgs(pod_selector=meta_v1.LabelSelectorArgs(match_labels=labels))]
            )
            self.network_policy = ingress_policy(f"{name}-ingress", metadata(name), labels, [group], child)
            # The API port is the leaders' alone (the workers have none): its rule selects them (policies add up).
            self.api_policy = ingress_policy(
                f"{name}-api-ingress", metadata(f"{name}-api"), self.api_selector, [api], child
            )
        else:
            self.network_policy = ingress_policy(f"{name}-ingress", metadata(name), labels, [api], child)
        self.scaler = None
        if args.autoscaler is not None:
            self.scaler = scaled_object(
                name,
                args.autoscaler,
                self.scale_target_ref,
                self.service.metadata.name,
                args.namespace,
                labels,
                pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[workload])),
            )
        self.disruption_budget = None
        if min_available is not None:
            self.disruption_budget = policy_v1.PodDisruptionBudget(
                f"{name}-pdb",
                metadata=metadata(name),
                spec=policy_v1.PodDisruptionBudgetSpecArgs(
                    # A group is down as soon as one of its pods is (RecreateGroupOnPodRestart): at most `replicas -
                    # minAvailable` pods of all groups may be unavailable, so at most as many groups. maxUnavailable
                    # needs pods of a controller with a scale (kubernetes.io/docs/tasks/run-application/configure-pdb/,
                    # "Arbitrary workloads and arbitrary selectors"): a group's pods are its StatefulSets' (the
                    # leaders' and one of workers per group, lws pod_controller.go L386 @ v0.10.0).
                    max_unavailable=replicas - min_available if k8s.multi_node else None,
                    min_available=None if k8s.multi_node else min_available,
                    selector=meta_v1.LabelSelectorArgs(match_labels=labels),
                ),
                opts=child,
            )
        self.entry = self.router.service if self.router is not None else self.service
        self.register_outputs(
            {
                "deployment": self.deployment.metadata.name if self.deployment is not None else None,
                "leaderWorkerSet": inference.leader_worker_set_name if self.leader_worker_set is not None else None,
                "service": self.entry.metadata.name,
                "url": pulumi.Output.concat(
                    "http://",
                    self.entry.metadata.name,
                    ".",
                    self.entry.metadata.namespace,
                    ".svc:",
                    str(inference.port),
                    "/v1",
                ),
            }
        )


def health_probe(port: int) -> str:
    """The Python that probes a Docker vLLM server's /health from inside its network namespace (the image has Python,
    not necessarily curl): its Docker health check, and its health check container's."""
    return f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}{HEALTH_PATH}', timeout=5)"


def server_wait_seconds(inference: InferenceConfig) -> int:
    """How long `pulumi up` waits for a Docker vLLM server's /health: its startup timeout, and as Docker probes every
    interval, one interval and one probe more for a server that becomes healthy at the end of it."""
    return inference.startup_timeout_seconds + HEALTH_INTERVAL_SECONDS + HEALTH_TIMEOUT_SECONDS


def with_api_key_from_file(command: Sequence[str]) -> list[str]:
    """`command` started with VLLM_API_KEY read from the uploaded key file. vLLM takes the key from --api-key or
    VLLM_API_KEY (vllm/entrypoints/openai/api_server.py, build_app: `args.api_key or [envs.VLLM_API_KEY]`) and
    has no key-file flag; `--api-key $(cat ...)` would show the key in `ps` on the host, and a secret in `envs`
    in `docker inspect` (and would hide every variable from `pulumi preview`). Without a readable, non-empty
    file the shell exits instead of starting a server without authentication."""
    script = f'key="$(cat {DOCKER_API_KEY_FILE})" && [ -n "$key" ] && VLLM_API_KEY="$key" exec "$@"'
    return ["sh", "-c", script, "vllm", *command]


# How the servers of one workload roll (inference[].docker.maxUnavailable): server i's containers (vLLM and its proxy)
# depend on server i - maxUnavailable's, so `pulumi up` replaces at most that many at a time, each next one once the
# one before is healthy again. The engine's facts (pulumi 3.272.0 SDK, pulumi/pulumi @ 1b59498):
# - the SDK sends a resource's registration only once every `depends_on` resource's URN is resolved
#   (sdk/python/lib/pulumi/runtime/resource.py prepare_resource, "Before we can proceed, all our dependencies must be
#   finished"; rpc.py _add_dependency `await res.urn.future()`), and the URN resolves from the engine's answer,
#   which comes once the resource's step is done (pkg/resource/deploy/source_eval.go L3039-3041, "Now block waiting
#   for the operation to finish"): a replacement's delete, create and the provider's health `wait`;
# - otherwise steps run in parallel (`pulumi up --parallel`, unbounded by default): without the edges every server
#   stops at once;
# - a `dependsOn` edge never makes the dependent replaced with its dependency, delete-first or not
#   (pkg/resource/deploy/step_generator.go L3284-3291 calculateDependentReplacements: "the edge from B to A may be a
#   simple `dependsOn` edge such that a change to B does not actually influence any of B's input properties ...
#   neither B nor D would need to be deleted before A could be deleted"), and adding or changing one calls no
#   provider (tools/impact.py: the engine's bookkeeping): no resource is renamed or replaced by the order itself.
# A server whose replacement fails stops the roll there: the ones after it keep running the old container.
ROLLING = "inference[].docker.maxUnavailable"

# A vLLM server that never got healthy must keep failing `pulumi up` until it is. The provider's `wait` alone does not:
# its create fails after the container exists (terraform-provider-docker v4.5.0 resource_docker_container_funcs.go
# L460 d.SetId before the wait, L590-622 the wait), the engine records it with an initialization error, and the next
# `pulumi up` gives it an empty update (pulumi/pulumi pkg/resource/deploy/step_generator.go L2180-2196 @ 1b59498,
# "If resource was unchanged, but there were initialization errors, generate an empty update step"), which the
# provider's update passes without any wait (funcs.go L991-1077): the failure is forgotten (pulumi/pulumi#21458).
# So each server has a health check: a one-shot container in the server's network namespace (network_mode
# `container:<its id>`, as dockerd stores it, so a replaced server replaces it) that waits for /health as long as
# the server's own wait and exits 1 if it never answers. Its exit code is stored with it, and the stack judges it
# on every `pulumi up` (components/docker/checks.py verdict): a failed check keeps failing the stack until it passes
# in a new run, i.e. the server is replaced (any change to it) or the check is run again (`pulumi up --replace`
# of its URN, docs/operations.md). A server that is healthy costs one probe.
# `python3 -c HEALTH_WAIT PROBE SECONDS`: PROBE (the server's Docker health check, in a child process) every 2 s until
# it passes, for up to SECONDS; then once more with its error shown, and exit 1 if it fails. One line of Python (the
# images have no guaranteed `date` or `sleep` besides it): `next` over an endless iterator is the loop.
HEALTH_WAIT = (
    "import subprocess, sys, time; probe = [sys.executable, '-c', sys.argv[1]]; "
    "end = time.monotonic() + float(sys.argv[2]); "
    "next(_ for _ in iter(int, 1) if subprocess.call(probe, stderr=subprocess.DEVNULL) == 0 "
    "or time.monotonic() >= end or time.sleep(2)); "
    "code = subprocess.call(probe); "
    "print('healthy' if code == 0 else f'not healthy after {sys.argv[2]} s', flush=True); sys.exit(1 if code else 0)"
)


@dataclass(frozen=True)
class ProxyTls:
    """The secrets `vllmTlsCertificate` and `vllmTlsKey`: the Docker proxies serve HTTPS with them."""

    certificate: pulumi.Input[str]
    key: pulumi.Input[str]


@dataclass(frozen=True)
class DockerVllmArgs:
    inference: InferenceConfig
    images: Mapping[str, str]
    """Host -> the image reference for that host's GPU family (one key of `images`, schema.docker.host_images)."""
    partitions: Sequence[Partition]
    security_profile: SecurityProfile
    huggingface_token: pulumi.Input[str] | None = None
    api_key: pulumi.Input[str] | None = None
    """The secret `rocm-stack:vllmApiKey` (required in prod): each server sits behind an nginx container (proxy.py)
    that alone publishes the API port and demands the key on every path but /health, vLLM listening on the proxy's
    loopback; None: vLLM publishes its port itself and takes no key."""
    tls: ProxyTls | None = None
    """The proxies serve HTTPS only (with an API key); None: HTTP."""
    secret_env: bool = False
    """`hosts` or `inference` is a secret stack key: the containers' environments are secret."""


class DockerVllm(pulumi.ComponentResource):
    """One vLLM server per claimed partition, on the partition's GPUs, its API published on the host.

    With an API key each server's proxy container is on a network of its own on its host (one per server and
    host) and publishes the API port; vLLM joins the proxy's network namespace (`network_mode: container:<proxy
    ID>`) and listens on its loopback alone, where nginx reaches it. A vLLM on a bridge network of its own, listening
    on its address there, was reached around the proxy: with `net.ipv4.ip_forward=1` set before dockerd starts (GPU
    hosts often have it), Docker before 28 leaves the FORWARD policy ACCEPT and drops nothing addressed to a
    container's unpublished port, so a neighbour that routes the network's subnet through the host reached vLLM's
    /invocations without a key (moby#14041, moby#45610; Docker 28 drops such packets in the raw table). A loopback
    is no address of any other namespace: nothing routes to it, whatever the host's sysctls, firewall or Docker
    version (tests/e2e/test_e2e_neighbours.py, two network namespaces around a private dockerd with iptables). Not
    an `internal` network for vLLM: it downloads its model at start, which an internal network (no route out)
    forbids; vLLM's egress is the proxy network's.

    The proxy owns the namespace, not vLLM, because a joined container keeps the namespace it joined: when the owner
    restarts alone, the joiner is left in the old one (measured on dockerd 20.10: `docker restart` of the owner, and
    its loopback no longer reaches the joiner's port). vLLM restarts (a crash, a GPU fault) far more often than nginx,
    and a restarted joiner joins the owner's current namespace; a daemon restart starts the owner first (measured).
    Replacing the proxy replaces vLLM with it (its `networkMode` names the proxy's ID: tools/impact.py)."""

    containers: dict[str, docker.Container]
    # Partition ref -> its proxy container and its private network (none without an API key).
    proxies: dict[str, docker.Container]
    networks: dict[str, docker.Network]
    # Partition ref -> its server's health check (HEALTH_LABEL).
    health: dict[str, docker.Container]

    def __init__(self, name: str, args: DockerVllmArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:workloads:DockerVllm", name, None, opts)
        inference, placement = args.inference, args.inference.docker
        assert placement is not None, "DockerVllm needs inference.docker"
        images = pull_on_hosts(name, args.images, args.partitions, self)
        self.containers, self.proxies, self.networks, self.health = {}, {}, {}, {}
        proxy_images = (
            {
                p.host.name: pulled_image(
                    f"{p.host.name}-{name}-proxy",
                    PROXY_IMAGE,
                    p.host.docker.pull_timeout_seconds,
                    pulumi.ResourceOptions(parent=self, provider=p.provider),
                )
                for p in args.partitions
            }
            if args.api_key is not None
            else {}
        )
        probe = health_probe(inference.port)
        # Each server's containers (vLLM, its proxy), in the order of `partitions`: what the next ones wait for.
        servers: list[list[pulumi.Resource]] = []
        for index, partition in enumerate(args.partitions):
            before = placement.roll_after(index)
            after = servers[before] if before is not None else []
            servers.append([])
            env = {**inference.server_env(partition.gpu_count), "HF_HOME": MODEL_CACHE_MOUNT}
            uploads = []
            if args.huggingface_token is not None:
                # A file, not HF_TOKEN: a secret in `envs` would hide every variable of the container from
                # `pulumi preview`; huggingface_hub reads the token from HF_TOKEN_PATH.
                env["HF_TOKEN_PATH"] = DOCKER_TOKEN_FILE
                uploads.append(
                    docker.ContainerUploadArgs(
                        file=DOCKER_TOKEN_FILE, content=pulumi.Output.secret(args.huggingface_token), permissions="0400"
                    )
                )
            command = serve_command(inference, partition.gpu_count)
            external = placement.published_port or inference.port
            api = [PortMapping(internal=inference.port, external=external, ip=placement.ip)]
            network_mode: pulumi.Output[str] | None = None
            if args.api_key is not None:
                uploads.append(
                    docker.ContainerUploadArgs(
                        file=DOCKER_API_KEY_FILE, content=pulumi.Output.secret(args.api_key), permissions="0400"
                    )
                )
                command = with_api_key_from_file(serve_command(inference, partition.gpu_count, proxy.LOOPBACK))
                published_api = [PortMapping(internal=pod_proxy_port(inference), external=external, ip=placement.ip)]
                network, proxy_container = self._proxy(
                    partition,
                    inference,
                    published_api,
                    args,
                    proxy_images[partition.host.name].image_id,
                    after,
                )
                self.networks[partition.ref], self.proxies[partition.ref] = network, proxy_container
                servers[index].append(proxy_container)
                # By ID, as dockerd stores and the provider reads it back (a name would drift: readback.py pidMode).
                network_mode = proxy_container.id.apply(lambda proxy_id: f"container:{proxy_id}")
                api = []
            self.containers[partition.ref] = workload_container(
                partition,
                WorkloadContainerArgs(
                    image=images[partition.host.name].image_id,
                    command=command,
                    env=env,
                    shm_size_bytes=int(inference.shm_size),
                    security_profile=args.security_profile,
                    restart="unless-stopped",
                    stop_grace_seconds=placement.stop_grace_seconds,
                    volumes=[
                        docker.ContainerVolumeArgs(
                            host_path=model_cache_dir(placement, partition.container.name),
                            container_path=MODEL_CACHE_MOUNT,
                        )
                    ],
                    ports=published(api),
                    network_mode=network_mode,
                    uploads=uploads,
                    # Durations as the provider stores them ("30m0s", not "1800s": readback.py).
                    healthcheck=docker.ContainerHealthcheckArgs(
                        tests=["CMD", "python3", "-c", probe],
                        interval=seconds(HEALTH_INTERVAL_SECONDS),
                        timeout=seconds(HEALTH_TIMEOUT_SECONDS),
                        retries=3,
                        start_period=seconds(inference.startup_timeout_seconds),
                    ),
                    # vLLM on ROCm reads CUDA_VISIBLE_DEVICES; HIP_VISIBLE_DEVICES beside it makes vLLM's ROCm platform
                    # assert both agree, which data-parallel engine cores (started with a narrowed
                    # CUDA_VISIBLE_DEVICES) break. AMD's vLLM V1 optimization guide: "Keep HIP_VISIBLE_DEVICES unset".
                    visibility_variable="CUDA_VISIBLE_DEVICES",
                    wait_timeout_seconds=server_wait_seconds(inference),
                    secret_env=args.secret_env,
                    after=after,
                ),
                self,
            )
            servers[index].append(self.containers[partition.ref])
            self.health[partition.ref] = self._health_check(
                partition, self.containers[partition.ref], images[partition.host.name].image_id, inference
            )
        self.register_outputs(
            {
                "containers": {ref: c.name for ref, c in self.containers.items()},
                "proxies": {ref: c.name for ref, c in self.proxies.items()},
                # Awaiting the verdicts fails `pulumi up` (and preview) on a server whose check failed.
                "healthy": {
                    ref: verdict(check, f"vLLM server {ref}: its health check", strict=True).apply(lambda _: True)
                    for ref, check in self.health.items()
                },
                # A server or proxy a refresh found stopped fails every `pulumi up` until it is replaced.
                "running": {
                    f"{ref}{role}": found_running(container, f"vLLM server {ref}")
                    for role, containers in (("", self.containers), (" proxy", self.proxies))
                    for ref, container in containers.items()
                },
            }
        )

    def _health_check(
        self, partition: Partition, server: docker.Container, image: pulumi.Input[str], inference: InferenceConfig
    ) -> docker.Container:
        """The server's health check (HEALTH_WAIT), in its network namespace, as long as the server's own wait."""
        wait = server_wait_seconds(inference)
        return docker.Container(
            f"{partition.resource_name}-health",
            name=f"{partition.container.name}-health",
            image=image,
            command=["python3", "-c", HEALTH_WAIT, health_probe(inference.port), str(wait)],
            network_mode=server.id.apply(lambda server_id: f"container:{server_id}"),
            labels=[docker.ContainerLabelArgs(label=HEALTH_LABEL, value=partition.ref)],
            **log_args(partition.host.logs),
            restart="no",
            must_run=False,
            attach=True,
            logs=True,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=partition.provider,
                depends_on=[server],
                custom_timeouts=create_timeouts(wait),
            ),
        )

    def _proxy(
        self,
        partition: Partition,
        inference: InferenceConfig,
        api: Sequence[PortMapping],
        args: DockerVllmArgs,
        image: pulumi.Input[str],
        after: Sequence[pulumi.Resource],
    ) -> tuple[docker.Network, docker.Container]:
        """The partition's private network and the nginx container that publishes its API (proxy.py) and holds the
        network namespace vLLM joins, replaced only after the servers `after` (ROLLING)."""
        vllm_name = partition.container.name
        assert inference.docker is not None
        grace = inference.docker.stop_grace_seconds
        opts = pulumi.ResourceOptions(parent=self, provider=partition.provider)
        # Not `internal`: vLLM downloads its model through it.
        network = docker.Network(
            f"{partition.resource_name}-vllm", name=f"rocm-stack-{vllm_name}", driver="bridge", opts=opts
        )
        config = proxy.nginx_config(
            pod_proxy_port(inference),
            f"{proxy.LOOPBACK}:{inference.port}",
            proxy.DOCKER_OPEN_PATHS,
            scraped_paths=proxy.DOCKER_SCRAPED_PATHS,
            tls=args.tls is not None,
        )
        assert args.api_key is not None
        secret_files = {proxy.API_KEY_MAP: proxy.secret_key_map(args.api_key, partition.host.name)}
        if args.tls is not None:
            secret_files[proxy.TLS_CERTIFICATE] = pulumi.Output.secret(args.tls.certificate)
            secret_files[proxy.TLS_KEY] = pulumi.Output.secret(args.tls.key)
        container = docker.Container(
            f"{partition.resource_name}-proxy",
            name=f"{vllm_name}-proxy",
            image=image,
            entrypoints=proxy.proxy_command(),
            # The scheme it serves, in plain sight: its uploads are secret as a whole (the key map), so without it a
            # switch to HTTPS would show in no preview (labels are ForceNew: the switch replaces the proxy).
            labels=[docker.ContainerLabelArgs(label=PROXY_SCHEME_LABEL, value="https" if args.tls else "http")],
            uploads=[
                docker.ContainerUploadArgs(
                    file=f"{proxy.CONFIG_DIR}/{proxy.CONFIG_FILE}", content=config, permissions="0400"
                ),
                *(
                    docker.ContainerUploadArgs(file=f"{proxy.CONFIG_DIR}/{name}", content=content, permissions="0400")
                    for name, content in secret_files.items()
                ),
            ],
            ports=published(api),
            networks_advanced=[docker.ContainerNetworksAdvancedArgs(name=network.name)],
            # The master starts as root to read the 0400 files and drops its worker to nginx's user.
            capabilities=docker.ContainerCapabilitiesArgs(drops=["ALL"], adds=["CHOWN", "SETGID", "SETUID"]),
            security_opts=["no-new-privileges"],
            restart="unless-stopped",
            # Stopped by hand, it stays stopped, as its server does (components/docker/partitions.py).
            must_run=False,
            **log_args(partition.host.logs),
            # nginx finishes the requests in flight on SIGQUIT (SIGTERM drops them), within vLLM's own grace.
            destroy_grace_seconds=grace,
            stop_signal=PROXY_STOP_SIGNAL,
            stop_timeout=grace,
            # Its create waits for nothing (no health check): the deadline of a plain create.
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(custom_timeouts=create_timeouts(), depends_on=list(after))
            ),
        )
        return network, container
