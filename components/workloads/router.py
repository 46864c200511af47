"""The vLLM production-stack router in front of an inference workload's replicas on Kubernetes: its one entry point.

Upstream: github.com/vllm-project/production-stack, tag vllm-stack-0.1.12 (66b60661), src/vllm_router; the image is
schema.workloads.ROUTER_IMAGE. What this module relies on, by file and line at that tag (tests/test_router.py reads
them from the mirror):

- Discovery (`--service-discovery k8s`, pod-ip): service_discovery.py K8sPodIPServiceDiscovery watches the pods of
  one namespace by label selector (`watch.Watch().stream(list_namespaced_pod, namespace=..., label_selector=...)`,
  L674-678) and reads each new pod (`read_namespaced_pod`, L536, for its sleep mode): Role verbs get, list, watch.
  It also patches a pod's `sleeping` label (L562/L578), but only after forwarding a client's /sleep or /wake_up
  (request.py L1104-1108), which vLLM serves only in its development mode: that verb is left out.
  A pod is used once all its containers are ready and it is not terminating (L692-697), so replicas added or
  removed by an autoscaler are found without a list of backends.
- It asks each pod's `/v1/models` with `Authorization: Bearer $VLLM_API_KEY` when that variable is set (L601-606)
  and scrapes each pod's `/metrics` without a key (stats/engine_stats.py L127), which the replicas' proxies leave
  open (proxy.POD_OPEN_PATHS).
- Requests are forwarded with the client's headers, less hop-by-hop ones and X-Request-Id
  (services/request_service/request.py `_build_backend_request_headers`, L205-221, `_HOP_BY_HOP_HEADERS` L82-92):
  the client's `Authorization` reaches the replica's proxy unchanged.
- `/health` answers 503 when the discovery watcher or the engine-stats scraper is down (routers/main_router.py
  L212-247); `/metrics` is the router's Prometheus endpoint (routers/metrics_router.py L81).
- `session` routing hashes the session id (the `--session-key` header, else that field of the JSON body:
  routing_logic.py `extract_session_id` L107-115) onto a consistent-hash ring of the current endpoints (L198-249);
  without it the least-QPS endpoint serves.

Authentication: the router has none of its own; the same nginx sidecar as in the replicas (proxy.py, the same
Secret) is the pod's only listener, the router listening on the pod's loopback. The replicas keep their own proxy:
a NetworkPolicy holds only where the CNI enforces it (pods.ingress_policy), and without one every pod of the cluster
would reach vLLM's unauthenticated paths (/invocations, proxy.py) directly. The client's key passes through.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.apps import v1 as apps_v1
from pulumi_kubernetes.core import v1 as core_v1
from pulumi_kubernetes.meta import v1 as meta_v1
from pulumi_kubernetes.policy import v1 as policy_v1
from pulumi_kubernetes.rbac import v1 as rbac_v1

from schema.workloads import InferenceRouter
from components import supply
from . import proxy
from .autoscaling import proxy_drain_hook
from .pods import (
    API_KEY_KEY,
    POD_SECURITY,
    api_ingress,
    api_service,
    ingress_policy,
    labels_of,
    program_config_map,
    proxy_container,
    proxy_pod_volumes,
    rolling_update,
    secret_env_var,
)

ROUTER_APP = "vllm-router"
# The router's own port (parser.py `--port`, default 8001), on the pod's loopback behind the proxy.
ROUTER_PORT = 8001
# What the API server's pod watch needs (module docstring): core group pods, no more.
DISCOVERY_VERBS = ("get", "list", "watch")
# The chart's router resources (helm/values.yaml routerSpec.resources @ vllm-stack-0.1.12: requests cpu 400m,
# memory 1000Mi, limit memory 1000Mi).
ROUTER_RESOURCES = core_v1.ResourceRequirementsArgs(
    requests={"cpu": "400m", "memory": "1000Mi"}, limits={"memory": "1000Mi"}
)
# The image runs as root (docker/Dockerfile: no USER); the router needs no privilege, so any user will do.
ROUTER_USER = 65532
PROBE_PERIOD_SECONDS = 10
# The API server ends the router's pod watch after this long (`--k8s-watcher-timeout-seconds`; the router's default
# 0: never) and the router watches again. Its shutdown joins the watch thread (app.py lifespan L138 ->
# service_discovery.py K8sPodIPServiceDiscovery.close L841-847 `self.watcher_thread.join()`), which only ends
# between two streams: without a timeout a stopping router waits for SIGKILL (the 30 s grace), measured in
# tests/e2e/test_e2e_router.py.
WATCH_TIMEOUT_SECONDS = 10


def selector_text(labels: Mapping[str, str]) -> str:
    """A label selector in the API's string form (`k=v,k=v`), as `--k8s-label-selector` passes it on."""
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def router_args(
    router: InferenceRouter,
    namespace: pulumi.Input[str],
    backend_labels: Mapping[str, str],
    backend_port: int,
    host: str,
) -> list[pulumi.Input[str]]:
    """The router's command-line flags (parser.py @ vllm-stack-0.1.12)."""
    args: list[pulumi.Input[str]] = [
        "--host",
        host,
        "--port",
        str(ROUTER_PORT),
        "--service-discovery",
        "k8s",
        "--k8s-service-discovery-type",
        "pod-ip",
        "--k8s-namespace",
        namespace,
        "--k8s-label-selector",
        selector_text(backend_labels),
        "--k8s-port",
        str(backend_port),
        "--k8s-watcher-timeout-seconds",
        str(WATCH_TIMEOUT_SECONDS),
        "--routing-logic",
        router.routing_logic,
    ]
    if router.routing_logic == "session":
        args += ["--session-key", router.session_key]
    return args


@dataclass(frozen=True)
class VllmRouterArgs:
    router: InferenceRouter
    environment: str
    provider: Provider
    namespace: pulumi.Input[str]
    workload: str
    """The inference workload's name (the router's objects are `<workload>-router`)."""
    backend_labels: Mapping[str, str]
    """The labels of the pods that serve (the router's discovery selector): a Deployment's pods, or a
    LeaderWorkerSet's leaders (add `leaderworkerset.sigs.k8s.io/worker-index: "0"`)."""
    backend_port: int
    """The port of those pods the router sends to (their proxy's when they have one)."""
    api_key: core_v1.Secret | None
    """The workload's key Secret (pods.API_KEY_KEY and proxy.API_KEY_MAP): the router's proxy checks it and the
    router presents it for discovery; None: no proxy, the router listens on the pod network itself."""
    service_type: str = "ClusterIP"
    allow_load_balancer: bool = False
    port: int = 8000
    """The Service's port (the workload's `port`)."""
    clients: Sequence[Mapping[str, str]] | None = None
    metrics_namespace: str = "monitoring"
    backends: Sequence[pulumi.Resource] = ()
    """The workload it routes to: the router's Deployment (its discovery selector) changes only once that is up, so
    a Deployment replaced by a LeaderWorkerSet keeps serving through the router until the leaders are ready."""


class VllmRouter(pulumi.ComponentResource):
    """The router's ServiceAccount, Role and RoleBinding (pod discovery), its Deployment (router + nginx sidecar),
    Service, NetworkPolicy and, with more than one pod, a PodDisruptionBudget."""

    service: core_v1.Service
    deployment: apps_v1.Deployment
    proxy_config: core_v1.ConfigMap | None

    def __init__(self, name: str, args: VllmRouterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:workloads:VllmRouter", name, None, opts)
        self.labels = labels = labels_of(args.workload, ROUTER_APP)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)

        def metadata() -> meta_v1.ObjectMetaArgs:
            return meta_v1.ObjectMetaArgs(name=name, namespace=args.namespace, labels=labels)

        account = core_v1.ServiceAccount(
            f"{name}-account", metadata=metadata(), automount_service_account_token=False, opts=child
        )
        role = rbac_v1.Role(
            f"{name}-role",
            metadata=metadata(),
            rules=[rbac_v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=list(DISCOVERY_VERBS))],
            opts=child,
        )
        rbac_v1.RoleBinding(
            f"{name}-binding",
            metadata=metadata(),
            role_ref=rbac_v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=role.metadata.name),
            subjects=[rbac_v1.SubjectArgs(kind="ServiceAccount", name=account.metadata.name, namespace=args.namespace)],
            opts=child,
        )

        proxied = args.api_key is not None
        env: list[core_v1.EnvVarArgs] = []
        volumes: list[core_v1.VolumeArgs] = [
            core_v1.VolumeArgs(name="tmp", empty_dir=core_v1.EmptyDirVolumeSourceArgs(size_limit="1Gi"))
        ]
        self.proxy_config = None
        if args.api_key is not None:
            env.append(secret_env_var("VLLM_API_KEY", args.api_key, API_KEY_KEY))
            config = proxy.nginx_config(proxy.POD_PORT, f"127.0.0.1:{ROUTER_PORT}", proxy.POD_OPEN_PATHS)
            self.proxy_config = program_config_map(
                f"{name}-proxy", {proxy.CONFIG_FILE: config}, args.namespace, labels, child
            )
            volumes += proxy_pod_volumes(self.proxy_config, args.api_key)
        listen = proxy.POD_PORT if proxied else ROUTER_PORT

        def health(failures: int) -> core_v1.ProbeArgs:
            # Through the sidecar (it forwards /health without a key): the router listens on the loopback.
            return core_v1.ProbeArgs(
                http_get=core_v1.HTTPGetActionArgs(path=proxy.HEALTH_PATH, port=listen),
                period_seconds=PROBE_PERIOD_SECONDS,
                timeout_seconds=5,
                failure_threshold=failures,
            )

        router = core_v1.ContainerArgs(
            name="router",
            image=supply.image(args.router.image),
            # The image's ENTRYPOINT is the router (docker/Dockerfile: /opt/venv/bin/vllm-router).
            args=router_args(
                args.router,
                args.namespace,
                args.backend_labels,
                args.backend_port,
                "127.0.0.1" if proxied else "0.0.0.0",
            ),
            env=env or None,
            ports=None if proxied else [core_v1.ContainerPortArgs(name="http", container_port=ROUTER_PORT)],
            resources=ROUTER_RESOURCES,
            security_context=core_v1.SecurityContextArgs(
                allow_privilege_escalation=False,
                read_only_root_filesystem=True,
                run_as_non_root=True,
                run_as_user=ROUTER_USER,
                capabilities=core_v1.CapabilitiesArgs(drop=["ALL"]),
            ),
            readiness_probe=health(3),
            liveness_probe=health(6),
            # The batch API's files (off) and Python's temporary files.
            volume_mounts=[core_v1.VolumeMountArgs(name="tmp", mount_path="/tmp")],
        )
        # The sidecar outlives the router's shutdown (its requests in flight, then the watch thread's end).
        containers = [router, proxy_container(proxy.POD_PORT, proxy_drain_hook(ROUTER_PORT))] if proxied else [router]
        replicas = args.router.effective_replicas(args.environment)
        self.deployment = apps_v1.Deployment(
            name,
            metadata=metadata(),
            spec=apps_v1.DeploymentSpecArgs(
                replicas=replicas,
                selector=meta_v1.LabelSelectorArgs(match_labels=labels),
                # A new router pod is ready before an old one goes: the entry point stays up through a roll (no GPUs
                # to wait for, unlike the replicas' maxSurge 0).
                strategy=rolling_update(max_surge=1, max_unavailable=0),
                template=core_v1.PodTemplateSpecArgs(
                    metadata=meta_v1.ObjectMetaArgs(labels=labels),
                    spec=core_v1.PodSpecArgs(
                        service_account_name=account.metadata.name,
                        # The one pod of the stack that talks to the API server (its pod watch).
                        automount_service_account_token=True,
                        enable_service_links=False,
                        security_context=POD_SECURITY,
                        topology_spread_constraints=[
                            core_v1.TopologySpreadConstraintArgs(
                                max_skew=1,
                                topology_key="kubernetes.io/hostname",
                                when_unsatisfiable="ScheduleAnyway",
                                label_selector=meta_v1.LabelSelectorArgs(match_labels=labels),
                            )
                        ],
                        containers=containers,
                        volumes=volumes,
                    ),
                ),
            ),
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(args.backends))),
        )
        self.service = api_service(
            f"{name}-service",
            metadata(),
            labels,
            args.service_type,
            args.allow_load_balancer,
            args.port,
            child,
        )
        self.network_policy = ingress_policy(
            f"{name}-ingress",
            metadata(),
            labels,
            [api_ingress(args.service_type, args.clients, args.metrics_namespace)],
            child,
        )
        self.disruption_budget = None
        if replicas > 1:
            self.disruption_budget = policy_v1.PodDisruptionBudget(
                f"{name}-pdb",
                metadata=metadata(),
                spec=policy_v1.PodDisruptionBudgetSpecArgs(
                    max_unavailable=1, selector=meta_v1.LabelSelectorArgs(match_labels=labels)
                ),
                opts=child,
            )
        self.register_outputs({"deployment": self.deployment.metadata.name, "service": self.service.metadata.name})
