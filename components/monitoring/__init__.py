"""GPU monitoring: the AMD device metrics exporter, Prometheus scraping, alert rules and the Grafana dashboard.

- `KubernetesMonitoring` (`rocm-stack:monitoring:KubernetesMonitoring`): the PrometheusRule, the dashboard
  ConfigMap for the Grafana sidecar and, in the standalone
  device-plugin mode (no GPU Operator to run the exporter), the exporter DaemonSet, its Service and a
  ServiceMonitor. In operator mode the DeviceConfig's `metricsExporter.prometheus.serviceMonitor` scrapes the
  exporter; `device_config_service_monitor()` gives that block so both modes label targets the same way.
- `kube_prometheus_stack()`: the optional pinned kube-prometheus-stack release, declared before the GPU stack (its
  CRDs come with it, and the DeviceConfig's ServiceMonitor needs them).
- `DockerExporter` (`rocm-stack:monitoring:DockerExporter`): the exporter container on one Docker GPU host.
- `prometheus_scrape_config()`: the prometheus.yml `scrape_configs` of the Docker hosts (device metrics exporter,
  node-exporter, cAdvisor) and their vLLM servers, from `declared_fleet()` (what the stack declares of them).
- docker_host.py: node-exporter and cAdvisor on every Docker host, and Prometheus, Alertmanager and Grafana on the
  monitoring host (`monitoring.host`).

The exporter runs with its built-in configuration (no MetricsFieldPrefix, port 5000 in the container), which
is what the alert rules and the dashboard expect.

Why one file: both fleets, Kubernetes and Docker, label, scrape and alert on the same metrics; keeping their builders
in one module keeps the job names, labels and rule files one definition that the two sides cannot drift apart on.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pulumi
import pulumi_docker as docker
import yaml

from domain.alerts import (
    CADVISOR_JOB,
    EXPORTER_JOB,
    MODEL_LABEL,
    NODE_EXPORTER_JOB,
    VLLM_JOB,
    VLLM_ROUTER_JOB,
    GpuStackWorkloads,
    prometheus_rule_spec,
)
from domain.fleet import DeclaredHost, DeclaredPartition
from domain.gpus import MODELS
from schema import StackConfig
from schema.docker import LogConfig, PortMapping
from schema.workloads import InferenceConfig
from schema.derived import partitions_claimed

# The exporters' host ports on every Docker host, re-exported (one definition, which the schema checks against
# the partitions' published ports).
from schema.monitoring import CADVISOR_PORT as CADVISOR_PORT, NODE_EXPORTER_PORT as NODE_EXPORTER_PORT
from schema.kubernetes import ProviderConfig
from schema.monitoring import KUBE_PROMETHEUS_STACK_CHART, PROMETHEUS_PORT, MonitoringConfig
from components.docker.deadlines import create_timeouts
from components.docker.gpu_host import published, pulled_image
from components.docker.logs import log_args
from components.docker.stop import graceful_stop
from domain.dashboard import dashboard_json_text
from components import supply

# The exporter's ServerPort when no config file is mounted (ROCm/device-metrics-exporter docs and chart).
EXPORTER_CONTAINER_PORT = 5000
# Docker's default stop timeout (moby/moby v28.5.2 container/container_unix.go L26 `defaultStopTimeout = 10`).
EXPORTER_STOP_GRACE_SECONDS = 10
EXPORTER_NAME = "amd-device-metrics-exporter"
KUBE_PROMETHEUS_STACK_RELEASE = "kube-prometheus-stack"
# The KubernetesMonitoring component's name (its resources are named after it).
KUBERNETES_MONITORING = "monitoring"
# Where the rule, the dashboard and kube-prometheus-stack live.
MONITORING_NAMESPACE = "monitoring"
# The read of that namespace where the stack neither owns it nor installs kube-prometheus-stack (Cluster.
# existing_namespace): its name says the fix.
MONITORING_NAMESPACE_CHECK = (
    f"namespace {MONITORING_NAMESPACE} (the monitoring objects go there: add it to kubernetes.namespaces, or set "
    "monitoring.kubePrometheusStack.install: true)"
)
DASHBOARD_CONFIGMAP = "rocm-gpu-dashboard"
PROMETHEUS_RULE = "rocm-gpu-alerts"
VLLM_SERVICE_MONITOR = "rocm-vllm"
ROUTER_SERVICE_MONITOR = "rocm-vllm-router"
# Where the monitoring host's Prometheus reads its secrets: each host's vLLM scrape token (vllm_metrics_token_file)
# and, with TLS, the proxies' certificate.
PROMETHEUS_SECRETS = "/etc/prometheus/secrets"
# A host's token file is this prefix and the host's name.
VLLM_METRICS_TOKEN_PREFIX = "vllm-metrics-token-"
# With the proxies on HTTPS (`vllmTlsCertificate`): the certificate Prometheus verifies them against, beside the token.
VLLM_CA_FILE = f"{PROMETHEUS_SECRETS}/vllm-ca.pem"
_PART_OF = {"app.kubernetes.io/part-of": "rocm-stack", "app.kubernetes.io/managed-by": "rocm-stack"}
_EXPORTER_SELECTOR = {"app.kubernetes.io/name": EXPORTER_NAME}


# The node labeller's `amd.com/gpu.device-id` as a Prometheus meta label: with attachMetadata.node, endpoints
# targets carry `__meta_kubernetes_node_label_<name>` with the name's invalid characters as `_` (Prometheus docs,
# kubernetes_sd_config: "attach_metadata ... node ... Valid for roles: pod, endpoints, endpointslice").
NODE_DEVICE_ID_LABEL = "__meta_kubernetes_node_label_amd_com_gpu_device_id"


def exporter_relabelings() -> list[dict[str, Any]]:
    """Target relabelings (ServiceMonitor/DeviceConfig camelCase form) giving every exporter target the
    `job` the alert rules select, a `host` label with the node name, as the Docker scrape config does, and the
    GPU model (MODEL_LABEL) its node's PCI device ID names (domain/gpus.py `pci_device_id`; needs
    attachMetadata.node).

    The target's own `pod`/`container` labels (the exporter pod) are dropped: with honorLabels they would
    fill in wherever the exporter reports no workload, and every idle GPU would look held by a pod."""
    by_device: dict[str, str] = {}
    for model in MODELS.values():
        by_device.setdefault(model.pci_device_id, model.name)
    return [
        {"action": "replace", "targetLabel": "job", "replacement": EXPORTER_JOB},
        {"action": "replace", "sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "host"},
        *(
            {
                "action": "replace",
                "sourceLabels": [NODE_DEVICE_ID_LABEL],
                "regex": f"(?i){device}",
                "targetLabel": MODEL_LABEL,
                "replacement": model,
            }
            for device, model in by_device.items()
        ),
        {"action": "labeldrop", "regex": "pod|container"},
    ]


def device_config_service_monitor(cfg: MonitoringConfig) -> dict[str, Any]:
    """The DeviceConfig `spec.metricsExporter.prometheus.serviceMonitor` for operator mode (amd.com/v1alpha1
    CRD fields). honorLabels keeps the exporter's own `pod`/`namespace`/`container` labels (the workload on the
    GPU) instead of Prometheus renaming them `exported_*` under the exporter pod's own."""
    return {
        "enable": True,
        "interval": cfg.scrape_interval,
        "honorLabels": True,
        "labels": dict(cfg.prometheus_selector_labels),
        "attachMetadata": {"node": True},
        "relabelings": exporter_relabelings(),
    }


def kube_prometheus_stack_values(cfg: MonitoringConfig) -> dict[str, Any]:
    return {
        "grafana": {
            "enabled": cfg.grafana_dashboard,
            "sidecar": {
                "dashboards": {
                    "enabled": True,
                    "label": "grafana_dashboard",
                    "labelValue": "1",
                    "searchNamespace": "ALL",
                }
            },
        },
        # Select every ServiceMonitor/PrometheusRule, not only this release's: the GPU Operator's ServiceMonitor
        # carries the DeviceConfig's labels, not `release: kube-prometheus-stack`.
        "prometheus": {
            "prometheusSpec": {
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
            }
        },
    }


def kube_prometheus_stack_url() -> str:
    """The in-cluster address of the Prometheus of the stack's kube-prometheus-stack: the chart's Service
    `{{ template "kube-prometheus-stack.fullname" . }}-prometheus` (templates/prometheus/service.yaml L6), where
    fullname is the release name when it contains the chart's name (_helpers.tpl L14-25), on
    `prometheus.service.port` 9090 (values.yaml L3780; prometheus-community/helm-charts @ cf408a29, chart 88.5.3)."""
    return f"http://{KUBE_PROMETHEUS_STACK_RELEASE}-prometheus.{MONITORING_NAMESPACE}.svc:{PROMETHEUS_PORT}"


def kube_prometheus_stack(
    cfg: MonitoringConfig,
    environment: str,
    provider: pulumi.ProviderResource,
    namespace: pulumi.Input[str],
    cluster: ProviderConfig,
) -> pulumi.CustomResource | None:
    """The pinned kube-prometheus-stack release when the stack installs it, else None. Declared before the GPU stack,
    whose DeviceConfig waits for its CRDs; KubernetesMonitoring (declared after the GPU stack) was its parent: the
    alias keeps its state. The Prometheus Operator CRDs are the stack's own (chart_crds: applied at the chart's
    version, never deleted), the release skips them; Helm creates the namespace when missing (createNamespace)."""
    if not cfg.installs_kube_prometheus_stack(environment):
        return None
    from components.k8s.helm import chart_crds, pinned_release  # components.k8s's __init__ imports this module

    stack_cfg = cfg.kube_prometheus_stack
    name = f"{KUBERNETES_MONITORING}-{KUBE_PROMETHEUS_STACK_RELEASE}"
    crds = chart_crds(
        name,
        {f"{name}-crds-{kind}": url for kind, url in stack_cfg.crd_urls().items()},
        cluster,
        environment,
        parent=None,
    )
    return pinned_release(
        name,
        release_name=KUBE_PROMETHEUS_STACK_RELEASE,
        chart=KUBE_PROMETHEUS_STACK_CHART,
        version=stack_cfg.chart_version,
        repository=stack_cfg.repository,
        namespace=namespace,
        values=kube_prometheus_stack_values(cfg),
        timeout_seconds=stack_cfg.timeout_seconds,
        environment=environment,
        parent=None,
        provider=provider,
        depends_on=crds,
        create_namespace=True,
        skip_crds=True,
        aliases=[pulumi.Alias(parent=pulumi.create_urn(KUBERNETES_MONITORING, KubernetesMonitoring.TYPE))],
        images=supply.kube_prometheus_stack_images(grafana=cfg.grafana_dashboard),
    )


@dataclass(frozen=True)
class KubernetesMonitoringArgs:
    config: MonitoringConfig
    environment: Literal["dev", "prod"]
    gpu_stack: Literal["operator", "device-plugin"]
    """Which GPU layer runs the exporter: the Operator (DeviceConfig) or nobody (standalone device plugin)."""
    provider: pulumi.ProviderResource
    namespace: pulumi.Input[str]
    """Where the rule, dashboard and (optionally) kube-prometheus-stack live; must exist (pass the Namespace
    resource's `metadata.name` so the dependency is tracked)."""
    exporter_node_selector: Mapping[str, str] = field(default_factory=dict)
    """Device-plugin mode: the nodes the privileged exporter DaemonSet runs on, those of the device plugin (it runs
    in `namespace`, whose Pod Security level must allow privileged pods)."""
    exporter_tolerations: Sequence[Mapping[str, str]] = ()
    """Device-plugin mode: the GPU nodes' taints' tolerations (KubernetesConfig.gpu_tolerations())."""
    gpu_stack_workloads: GpuStackWorkloads = GpuStackWorkloads()
    """The GPU stack's Deployments and DaemonSets the alerts watch (KubernetesLayer.gpu_stack_workloads())."""
    prometheus_operator: Sequence[pulumi.Resource] = ()
    """What brings the Prometheus Operator CRDs (KubernetesLayer.prometheus_operator): the CRs are created after."""


class KubernetesMonitoring(pulumi.ComponentResource):
    TYPE = "rocm-stack:monitoring:KubernetesMonitoring"
    prometheus_rule: pulumi.CustomResource
    dashboard: pulumi.CustomResource | None
    service_monitor: pulumi.CustomResource | None
    vllm_monitor: pulumi.CustomResource
    router_monitor: pulumi.CustomResource

    def __init__(self, name: str, args: KubernetesMonitoringArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__(self.TYPE, name, None, opts)
        # Imported here: `rocm-stack alerts` imports this module without Kubernetes (pulumi_kubernetes' submodules
        # add 0.7 s to it, measured).
        from pulumi_kubernetes.apiextensions import CustomResource
        from pulumi_kubernetes.core import v1 as core_v1
        from pulumi_kubernetes.meta import v1 as meta_v1

        cfg = args.config
        on_cluster = pulumi.ResourceOptions(parent=self, provider=args.provider)
        selectable = {**_PART_OF, **cfg.prometheus_selector_labels}
        # PrometheusRule and ServiceMonitor are Prometheus Operator CRDs: created after what brings them.
        after_operator = pulumi.ResourceOptions.merge(
            on_cluster, pulumi.ResourceOptions(depends_on=list(args.prometheus_operator) or None)
        )

        watched = args.gpu_stack_workloads
        if args.gpu_stack == "device-plugin":
            # The stack's own exporter DaemonSet (below), in this component's namespace.
            watched = GpuStackWorkloads(watched.deployments, (*watched.daemon_sets, (None, EXPORTER_NAME)))
        self.prometheus_rule = CustomResource(
            f"{name}-{PROMETHEUS_RULE}",
            api_version="monitoring.coreos.com/v1",
            kind="PrometheusRule",
            metadata=meta_v1.ObjectMetaArgs(name=PROMETHEUS_RULE, namespace=args.namespace, labels=selectable),
            spec=prometheus_rule_spec(cfg, watched),
            opts=after_operator,
        )

        # vLLM's Prometheus endpoint (/metrics, which the pods' key-checking proxy leaves open: proxy.POD_OPEN_PATHS)
        # on every rocm-stack vLLM Service: the dashboard's vLLM row reads it. The routers' (router.py) under a job
        # of their own: a router exports vllm:num_requests_waiting and vllm:num_requests_running per backend too
        # (production-stack src/vllm_router/services/metrics_service/__init__.py L5-9 @ vllm-stack-0.1.12), which
        # the vLLM alerts and queue-length queries must not count twice (they select job="vllm").
        # Imported here: components.workloads' __init__ imports this module (a circle through the package).
        from components.workloads.pods import app_labels
        from components.workloads.router import ROUTER_APP

        self.vllm_monitor, self.router_monitor = (
            CustomResource(
                f"{name}-{monitor}",
                api_version="monitoring.coreos.com/v1",
                kind="ServiceMonitor",
                metadata=meta_v1.ObjectMetaArgs(name=monitor, namespace=args.namespace, labels=selectable),
                spec={
                    "selector": {"matchLabels": app_labels(app)},
                    "namespaceSelector": {"any": True},
                    "endpoints": [
                        {
                            "port": "http",
                            "path": "/metrics",
                            "interval": cfg.scrape_interval,
                            # The job the alert rules select, as on Docker hosts.
                            "relabelings": [{"action": "replace", "targetLabel": "job", "replacement": job}],
                        }
                    ],
                },
                opts=after_operator,
            )
            for monitor, app, job in (
                (VLLM_SERVICE_MONITOR, "vllm", VLLM_JOB),
                (ROUTER_SERVICE_MONITOR, ROUTER_APP, VLLM_ROUTER_JOB),
            )
        )

        self.dashboard = None
        if cfg.grafana_dashboard:
            self.dashboard = core_v1.ConfigMap(
                f"{name}-{DASHBOARD_CONFIGMAP}",
                metadata=meta_v1.ObjectMetaArgs(
                    name=DASHBOARD_CONFIGMAP,
                    namespace=args.namespace,
                    # The label kube-prometheus-stack's Grafana sidecar imports dashboards from.
                    labels={**_PART_OF, "grafana_dashboard": "1"},
                ),
                data={"rocm-gpus.json": dashboard_json_text()},
                opts=on_cluster,
            )

        self.service_monitor = None
        if args.gpu_stack == "device-plugin":
            service = self._standalone_exporter(
                name, cfg, args.namespace, args.exporter_node_selector, args.exporter_tolerations, on_cluster
            )
            self.service_monitor = CustomResource(
                f"{name}-{EXPORTER_NAME}",
                api_version="monitoring.coreos.com/v1",
                kind="ServiceMonitor",
                metadata=meta_v1.ObjectMetaArgs(name=EXPORTER_NAME, namespace=args.namespace, labels=selectable),
                spec={
                    "selector": {"matchLabels": _EXPORTER_SELECTOR},
                    "namespaceSelector": {"matchNames": [args.namespace]},
                    # Node labels for the GPU model relabeling (exporter_relabelings).
                    "attachMetadata": {"node": True},
                    "endpoints": [
                        {
                            "port": "metrics",
                            "path": "/metrics",
                            "interval": cfg.scrape_interval,
                            # Keep the exporter's workload labels (pod, namespace, container) over the target's.
                            "honorLabels": True,
                            "relabelings": exporter_relabelings(),
                        }
                    ],
                },
                opts=pulumi.ResourceOptions.merge(after_operator, pulumi.ResourceOptions(depends_on=[service])),
            )

        self.register_outputs(
            {
                "prometheusRule": PROMETHEUS_RULE,
                "dashboardConfigMap": DASHBOARD_CONFIGMAP if self.dashboard is not None else None,
                "kubePrometheusStack": cfg.installs_kube_prometheus_stack(args.environment),
            }
        )

    def _standalone_exporter(
        self,
        name: str,
        cfg: MonitoringConfig,
        namespace: pulumi.Input[str],
        node_selector: Mapping[str, str],
        tolerations: Sequence[Mapping[str, str]],
        opts: pulumi.ResourceOptions,
    ) -> pulumi.Resource:
        """The exporter DaemonSet and Service, following the upstream chart's DaemonSet: privileged with the
        host's /dev and /sys (GPU access through amd-smi) and the kubelet pod-resources socket (to label
        metrics with the pod a GPU is allocated to)."""
        # Imported here: pulumi_kubernetes as in __init__ above; components.k8s's __init__ imports this module.
        from pulumi_kubernetes.apps import v1 as apps_v1
        from pulumi_kubernetes.core import v1 as core_v1
        from components.k8s.tolerations import toleration_args
        from pulumi_kubernetes.meta import v1 as meta_v1
        from pulumi_kubernetes.rbac import v1 as rbac_v1

        labels = {**_PART_OF, **_EXPORTER_SELECTOR}
        metadata = meta_v1.ObjectMetaArgs(name=EXPORTER_NAME, namespace=namespace, labels=labels)
        account = core_v1.ServiceAccount(f"{name}-{EXPORTER_NAME}", metadata=metadata, opts=opts)
        # Pods: POD_UUID and ExtraPodLabels come from the API server. Nodes read-only: the upstream chart also
        # grants `update` for the exporter's node health labelling, which this stack does not use.
        role = rbac_v1.ClusterRole(
            f"{name}-{EXPORTER_NAME}",
            metadata=meta_v1.ObjectMetaArgs(name=EXPORTER_NAME, labels=labels),
            rules=[
                rbac_v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["get", "list", "watch"]),
                rbac_v1.PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["get", "list", "watch"]),
                rbac_v1.PolicyRuleArgs(api_groups=[""], resources=["events"], verbs=["create"]),
            ],
            opts=opts,
        )
        rbac_v1.ClusterRoleBinding(
            f"{name}-{EXPORTER_NAME}",
            metadata=meta_v1.ObjectMetaArgs(name=EXPORTER_NAME, labels=labels),
            role_ref=rbac_v1.RoleRefArgs(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=role.metadata.name
            ),
            subjects=[rbac_v1.SubjectArgs(kind="ServiceAccount", name=account.metadata.name, namespace=namespace)],
            opts=opts,
        )
        host_paths = {"dev": "/dev", "sys": "/sys", "pod-resources": "/var/lib/kubelet/pod-resources"}
        apps_v1.DaemonSet(
            f"{name}-{EXPORTER_NAME}",
            metadata=metadata,
            spec=apps_v1.DaemonSetSpecArgs(
                selector=meta_v1.LabelSelectorArgs(match_labels=_EXPORTER_SELECTOR),
                update_strategy=apps_v1.DaemonSetUpdateStrategyArgs(
                    type="RollingUpdate",
                    rolling_update=apps_v1.RollingUpdateDaemonSetArgs(max_unavailable=1),
                ),
                template=core_v1.PodTemplateSpecArgs(
                    metadata=meta_v1.ObjectMetaArgs(labels=labels),
                    spec=core_v1.PodSpecArgs(
                        service_account_name=account.metadata.name,
                        node_selector=dict(node_selector),
                        tolerations=toleration_args(tolerations) or None,
                        containers=[
                            core_v1.ContainerArgs(
                                name="exporter",
                                image=supply.image(cfg.exporter_image),
                                image_pull_policy="IfNotPresent",
                                env=[
                                    core_v1.EnvVarArgs(
                                        name="NODE_NAME",
                                        value_from=core_v1.EnvVarSourceArgs(
                                            field_ref=core_v1.ObjectFieldSelectorArgs(field_path="spec.nodeName")
                                        ),
                                    )
                                ],
                                ports=[
                                    core_v1.ContainerPortArgs(
                                        name="metrics", container_port=EXPORTER_CONTAINER_PORT, protocol="TCP"
                                    )
                                ],
                                security_context=core_v1.SecurityContextArgs(privileged=True),
                                # The upstream chart's defaults.
                                resources=core_v1.ResourceRequirementsArgs(
                                    requests={"cpu": "500m", "memory": "512M"},
                                    limits={"cpu": "2", "memory": "4Gi"},
                                ),
                                volume_mounts=[
                                    core_v1.VolumeMountArgs(name=volume, mount_path=path)
                                    for volume, path in host_paths.items()
                                ],
                            )
                        ],
                        volumes=[
                            core_v1.VolumeArgs(
                                name=volume, host_path=core_v1.HostPathVolumeSourceArgs(path=path, type="Directory")
                            )
                            for volume, path in host_paths.items()
                        ],
                    ),
                ),
            ),
            opts=opts,
        )
        return core_v1.Service(
            f"{name}-{EXPORTER_NAME}",
            metadata=metadata,
            spec=core_v1.ServiceSpecArgs(
                type="ClusterIP",
                selector=_EXPORTER_SELECTOR,
                ports=[
                    core_v1.ServicePortArgs(
                        name="metrics", port=cfg.exporter_port, target_port="metrics", protocol="TCP"
                    )
                ],
            ),
            opts=opts,
        )


@dataclass(frozen=True)
class DockerExporterArgs:
    config: MonitoringConfig
    provider: docker.Provider
    """The host's Docker provider (GpuHost.provider): the exporter runs on that daemon."""
    logs: LogConfig
    """The host's log rotation (hosts[].logs), as every container there has it."""
    pull_timeout_seconds: int
    """The host's `docker.pullTimeoutSeconds`."""


class DockerExporter(pulumi.ComponentResource):
    """The device metrics exporter on one Docker GPU host, as upstream's `docker run` (--device=/dev/kfd
    --device=/dev/dri -p 5000:5000); named after the host so reordering hosts renames nothing."""

    image: docker.RemoteImage
    container: docker.Container

    def __init__(self, host: str, args: DockerExporterArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:monitoring:DockerExporter", host, None, opts)
        cfg = args.config
        on_host = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.image = pulled_image(f"{host}-{EXPORTER_NAME}", cfg.exporter_image, args.pull_timeout_seconds, on_host)
        self.container = docker.Container(
            f"{host}-{EXPORTER_NAME}",
            name=EXPORTER_NAME,
            image=self.image.image_id,
            # The exporter labels every metric with its hostname; make it the host's name, not a container id.
            hostname=host,
            devices=[
                docker.ContainerDeviceArgs(host_path=d, container_path=d, permissions="rwm")
                for d in ("/dev/kfd", "/dev/dri")
            ],
            ports=published([PortMapping(internal=EXPORTER_CONTAINER_PORT, external=cfg.exporter_port)]),
            **log_args(args.logs),
            restart="unless-stopped",
            must_run=True,
            # Nothing to finish or save: Docker's own default grace.
            **graceful_stop(EXPORTER_STOP_GRACE_SECONDS),
            opts=pulumi.ResourceOptions.merge(on_host, pulumi.ResourceOptions(custom_timeouts=create_timeouts())),
        )
        self.register_outputs({"container": self.container.name, "port": cfg.exporter_port})


def exporter_address(docker_host: str) -> str:
    """Where Prometheus reaches a host's published exporter port, from the host's Docker endpoint:
    the ssh/tcp host name, or localhost for the local socket (dev: Prometheus on the same machine)."""
    match = re.match(r"^(?:ssh://(?:[^@/]+@)?|tcp://)(\[[^\]]+\]|[^:/\s]+)", docker_host)
    return match.group(1) if match else "localhost"


def declared_fleet(cfg: StackConfig) -> tuple[DeclaredHost, ...]:
    """Every Docker host as the monitoring sees it: its exporter address, GPU model and logical GPU count, and the
    partitions a workload claims (vLLM's /metrics on its published API port)."""
    claimed = partitions_claimed(cfg)

    def partition(host: str, container: str) -> DeclaredPartition | None:
        workload = claimed.get((host, container))
        if workload is None:
            return None
        if isinstance(workload, InferenceConfig):
            assert workload.docker is not None
            return DeclaredPartition(
                container,
                "inference",
                workload.startup_timeout_seconds,
                workload.docker.published_port or workload.port,
            )
        return DeclaredPartition(container, "training", 0)

    return tuple(
        DeclaredHost(
            host.name,
            exporter_address(host.docker.host),
            host.gpu_model,
            host.logical_gpus,
            tuple(p for c in host.containers if (p := partition(host.name, c.name)) is not None),
        )
        for host in cfg.hosts
    )


def prometheus_scrape_config(
    cfg: MonitoringConfig, fleet: Sequence[DeclaredHost], keyed: bool, tls: bool = False
) -> dict[str, Any]:
    """prometheus.yml `scrape_configs` of the Docker hosts: one job per exporter (device metrics exporter,
    node-exporter, cAdvisor) with a static target per host, and the vLLM servers' (`keyed`: one job per host). Every
    target carries `host` and its GPU model (MODEL_LABEL, which the GPU alert rules select by); vLLM targets also
    the partition's `container`. Sorted by name, so the output is stable.

    `keyed` (a vLLM API key is set): vLLM's port is its nginx proxy's, which lets /metrics pass only with its host's
    scrape token (proxy.metrics_token), and Prometheus sets credentials per job, not per target: so one job per host,
    `vllm-<host>`, reading that host's token from vllm_metrics_token_file(host) and relabelled to the job `vllm` that
    the rules and the dashboard select. Not the API key itself (it would let whoever reads Prometheus' files run
    inference), and not an open /metrics limited by source address (the published port is reached through Docker's
    NAT, which may show the bridge gateway as the source). `tls` (the proxies serve HTTPS): scheme https, the
    certificate verified against VLLM_CA_FILE and the target's host name (Prometheus's tls_config: the server name
    defaults to the target's host)."""
    hosts = sorted(fleet, key=lambda h: h.name)

    def job(name: str, targets: list[tuple[str, dict[str, str]]], **extra: Any) -> dict[str, Any]:
        return {
            "job_name": name,
            "scrape_interval": cfg.scrape_interval,
            "metrics_path": "/metrics",
            **extra,
            "static_configs": [{"targets": [target], "labels": labels} for target, labels in targets],
        }

    def per_host(port: int) -> list[tuple[str, dict[str, str]]]:
        return [(f"{h.address}:{port}", {"host": h.name, MODEL_LABEL: h.gpu_model}) for h in hosts]

    def servers(of: Sequence[DeclaredHost]) -> list[tuple[str, dict[str, str]]]:
        return [
            (f"{h.address}:{p.metrics_port}", {"host": h.name, MODEL_LABEL: h.gpu_model, "container": p.name})
            for h in of
            for p in sorted(h.partitions, key=lambda p: p.name)
            if p.metrics_port is not None
        ]

    def keyed_job(host: DeclaredHost) -> dict[str, Any]:
        tls_args: dict[str, Any] = {"scheme": "https", "tls_config": {"ca_file": VLLM_CA_FILE}} if tls else {}
        return job(
            f"{VLLM_JOB}-{host.name}",
            servers([host]),
            **tls_args,
            authorization={"type": "Bearer", "credentials_file": vllm_metrics_token_file(host.name)},
            relabel_configs=[{"target_label": "job", "replacement": VLLM_JOB}],
        )

    if keyed:
        vllm = [keyed_job(h) for h in hosts if servers([h])]
    else:
        vllm = [job(VLLM_JOB, servers(hosts))] if servers(hosts) else []
    return {
        "scrape_configs": [
            job(EXPORTER_JOB, per_host(cfg.exporter_port)),
            job(NODE_EXPORTER_JOB, per_host(NODE_EXPORTER_PORT)),
            job(CADVISOR_JOB, per_host(CADVISOR_PORT)),
            *vllm,
        ]
    }


def vllm_metrics_token_file(host: str) -> str:
    """The file the monitoring host's Prometheus reads host `host`'s vLLM scrape token from (the token container
    writes it: docker_host.py)."""
    return f"{PROMETHEUS_SECRETS}/{VLLM_METRICS_TOKEN_PREFIX}{host}"


def prometheus_scrape_config_text(
    cfg: MonitoringConfig, fleet: Sequence[DeclaredHost], keyed: bool, tls: bool = False
) -> str:
    return yaml.safe_dump(prometheus_scrape_config(cfg, fleet, keyed, tls), sort_keys=False)
