"""The Kubernetes GPU layer: provider and namespaces, then cert-manager + AMD GPU Operator + DeviceConfig
(`mode: operator`) or the standalone ROCm device plugin (`mode: device-plugin`).

`build_kubernetes_layer(cfg)` declares it all (`build_kubernetes`, then the GPU monitoring objects) and returns what
other components need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi

from domain.alerts import GpuStackWorkloads
from schema import StackConfig
from schema.kubernetes import GPU_OPERATOR_CHART, GPU_RESOURCE_NAME, LWS_NAMESPACE, KubernetesConfig
from schema.monitoring import MonitoringConfig
from schema.queues import NOTHING_QUEUED, QueuedWorkloads
from schema.derived import namespace_pod_security, queued_workloads, workload_namespace_needs
from components.monitoring import (
    KUBERNETES_MONITORING,
    MONITORING_NAMESPACE,
    MONITORING_NAMESPACE_CHECK,
    KubernetesMonitoring,
    KubernetesMonitoringArgs,
    device_config_service_monitor,
    kube_prometheus_stack,
)

from .cluster import Cluster, ClusterArgs
from .helm import CrdChartArgs
from .jobset import JobSetController
from .lws import LeaderWorkerSetController
from .kueue import Kueue, KueueArgs
from .keda import Keda, KedaArgs
from .device_plugin import DEVICE_PLUGIN_DAEMONSET, LABELLER_DAEMONSET, DevicePlugin, DevicePluginArgs
from .cert_manager import CertManager, CertManagerArgs
from .gpu_operator import GpuOperator, GpuOperatorArgs
from .admission import PodPolicy, PodPolicyArgs

if TYPE_CHECKING:
    from pulumi_kubernetes import Provider
    from pulumi_kubernetes.core.v1 import Namespace


@dataclass(frozen=True)
class KubernetesLayer:
    cluster: Cluster
    # Resources GPU workloads should depend on: `amd.com/gpu` exists once these are up.
    gpu_ready: Sequence[pulumi.Resource]
    cert_manager: CertManager | None = None
    gpu_operator: GpuOperator | None = None
    device_plugin: DevicePlugin | None = None
    # The JobSet controller when the stack installs it (multi-node training needs JobSet).
    job_set: JobSetController | None = None
    # The LeaderWorkerSet controller when the stack installs it (multi-node inference needs it).
    leader_worker_set: LeaderWorkerSetController | None = None
    # Kueue and the queues (`kubernetes.queues`): queued workloads wait for its release, whose webhook suspends them.
    kueue: Kueue | None = None
    # KEDA when an inference workload autoscales and the stack installs it: ScaledObjects wait for its CRDs.
    keda: Keda | None = None
    # The extended resource both modes expose: request it in pod limits (`amd.com/gpu: 1`).
    gpu_resource_name: str = GPU_RESOURCE_NAME
    # What brings the Prometheus Operator CRDs: the stack's kube-prometheus-stack release, else the deploy-time
    # check of the ServiceMonitor CRD when the DeviceConfig asks for one (GpuOperator), else nothing (the cluster's).
    prometheus_operator: Sequence[pulumi.Resource] = ()
    # Where the monitoring objects go (with monitoring enabled): the owned namespace, the one Helm creates with
    # kube-prometheus-stack, or the cluster's, read first.
    monitoring_namespace: pulumi.Input[str] | None = None

    @property
    def provider(self) -> Provider:
        return self.cluster.provider

    @property
    def namespaces(self) -> dict[str, Namespace]:
        return self.cluster.namespaces

    def namespace_name(self, namespace: str) -> pulumi.Input[str]:
        return self.cluster.namespace_name(namespace)


def gpu_stack_workloads(config: KubernetesConfig) -> GpuStackWorkloads:
    """What the monitoring alerts watch: the operator's controller Deployment and the DaemonSets that put
    `amd.com/gpu` and the GPU metrics on the nodes, by the names they get in the cluster."""
    if config.mode == "device-plugin":
        plugin = config.device_plugin
        names = [DEVICE_PLUGIN_DAEMONSET, *([LABELLER_DAEMONSET] if plugin.node_labeller.enable else [])]
        return GpuStackWorkloads(daemon_sets=tuple((plugin.namespace, name) for name in names))
    operator = config.gpu_operator
    settings = operator.device_config
    # Chart templates/deployment.yaml `{{ include "helm-charts-k8s.fullname" . }}-controller-manager`, where
    # fullname is the release name when it contains the chart name, else "<release>-<chart>" (_helpers.tpl).
    release = operator.release_name
    fullname = release if GPU_OPERATOR_CHART in release else f"{release}-{GPU_OPERATOR_CHART}"
    # The operands are named <DeviceConfig>-device-plugin / -node-labeller / -metrics-exporter
    # (internal/utils.go L77-79, metricsexporter.go L61 `ExporterName = "metrics-exporter"` @ v1.5.1).
    suffixes = [
        suffix
        for suffix, enabled in (
            ("device-plugin", settings.device_plugin.enable),
            ("node-labeller", settings.device_plugin.node_labeller),
            ("metrics-exporter", settings.metrics_exporter.enable),
        )
        if enabled
    ]
    return GpuStackWorkloads(
        deployments=((operator.namespace, f"{fullname}-controller-manager"),),
        daemon_sets=tuple((operator.namespace, f"{settings.name}-{suffix}") for suffix in suffixes),
    )


def build_kubernetes(
    config: KubernetesConfig,
    environment: str,
    monitoring: MonitoringConfig | None = None,
    needs_job_set: bool = False,
    needs_leader_worker_set: bool = False,
    pod_security: Mapping[str, str] | None = None,
    needs_keda: bool = False,
    queued: QueuedWorkloads = NOTHING_QUEUED,
) -> KubernetesLayer:
    """`monitoring`: the enabled monitoring section (the DeviceConfig's ServiceMonitor, kube-prometheus-stack).
    `needs_job_set`: a workload runs as a JobSet (installed unless `jobSet.install` says the cluster has it).
    `needs_keda`: an inference workload autoscales (KEDA installed then, unless `keda.install` says otherwise).
    `needs_leader_worker_set`: an inference runs as a LeaderWorkerSet (unless `leaderWorkerSet.install` is off).
    `pod_security`: owned namespace -> its Pod Security level (schema.derived.namespace_pod_security).
    `queued`: what the queued workloads need of Kueue's configuration (schema.derived.queued_workloads)."""
    cluster = Cluster("k8s", ClusterArgs(config=config, environment=environment, pod_security=pod_security or {}))
    prometheus_operator: list[pulumi.Resource] = []
    monitoring_namespace: pulumi.Input[str] | None = None
    if monitoring is not None:
        monitoring_namespace = cluster.namespace_name(MONITORING_NAMESPACE)
        release = kube_prometheus_stack(
            monitoring, environment, cluster.provider, monitoring_namespace, config.provider
        )
        prometheus_operator = [release] if release is not None else []
        if MONITORING_NAMESPACE not in cluster.namespaces:
            # Not the stack's: Helm creates it with the release (what lands there waits for the release), or it is
            # the cluster's Prometheus's, read before anything is put in it.
            monitoring_namespace = (
                release.namespace  # type: ignore[attr-defined]
                if release is not None
                else cluster.existing_namespace(MONITORING_NAMESPACE_CHECK, MONITORING_NAMESPACE)
            )

    def chart_args(namespace: str) -> CrdChartArgs:
        return CrdChartArgs(environment, cluster.provider, cluster.namespace_name(namespace), config.provider)

    job_set = None
    if needs_job_set and config.job_set.install:
        job_set = JobSetController("jobset", config.job_set, chart_args(config.job_set.namespace))
    leader_worker_set = None
    if needs_leader_worker_set and config.leader_worker_set.install:
        leader_worker_set = LeaderWorkerSetController("lws", config.leader_worker_set, chart_args(LWS_NAMESPACE))
    kueue = None
    if config.queues is not None:
        kueue = Kueue(
            "kueue",
            KueueArgs(
                config=config.queues,
                environment=environment,
                provider=cluster.provider,
                namespace_name=cluster.namespace_name,
                queued=queued,
            ),
        )
    keda = None
    if config.keda.installed(needs_keda):
        keda = Keda(
            "keda",
            KedaArgs(
                config=config.keda,
                environment=environment,
                provider=cluster.provider,
                namespace=cluster.namespace_name(config.keda.namespace),
            ),
        )
    # Mode-specific SDK modules are imported only when used: pulumi_kubernetes submodules are slow to import.
    if config.mode == "device-plugin":
        device_plugin = DevicePlugin(
            "amdgpu-device-plugin",
            DevicePluginArgs(
                config=config.device_plugin,
                provider=cluster.provider,
                namespace=cluster.namespace_name(config.device_plugin.namespace),
                tolerations=config.gpu_tolerations(),
            ),
        )
        return KubernetesLayer(
            cluster=cluster,
            gpu_ready=[device_plugin],
            device_plugin=device_plugin,
            job_set=job_set,
            leader_worker_set=leader_worker_set,
            kueue=kueue,
            keda=keda,
            prometheus_operator=prometheus_operator,
            monitoring_namespace=monitoring_namespace,
        )

    cert_manager = None
    if config.cert_manager.install:
        cert_manager = CertManager(
            "cert-manager",
            CertManagerArgs(
                config=config.cert_manager,
                environment=environment,
                provider=cluster.provider,
                namespace=cluster.namespace_name(config.cert_manager.namespace),
            ),
        )
    gpu_operator = GpuOperator(
        "amd-gpu-operator",
        GpuOperatorArgs(
            config=config.gpu_operator,
            environment=environment,
            provider=cluster.provider,
            namespace=cluster.namespace_name(config.gpu_operator.namespace),
            cert_manager=cert_manager.release if cert_manager is not None else None,
            service_monitor=device_config_service_monitor(monitoring) if monitoring is not None else None,
            tolerations=config.gpu_tolerations(),
            dcm_config=config.dcm_config(),
            prometheus_operator=prometheus_operator,
        ),
    )
    if gpu_operator.service_monitor_crd is not None:
        prometheus_operator = [gpu_operator.service_monitor_crd]
    return KubernetesLayer(
        cluster=cluster,
        gpu_ready=[gpu_operator.device_config],
        cert_manager=cert_manager,
        gpu_operator=gpu_operator,
        job_set=job_set,
        leader_worker_set=leader_worker_set,
        kueue=kueue,
        keda=keda,
        prometheus_operator=prometheus_operator,
        monitoring_namespace=monitoring_namespace,
    )


def build_kubernetes_layer(cfg: StackConfig) -> KubernetesLayer | None:
    """The stack's Kubernetes layer (None without `rocm-stack:kubernetes`): `build_kubernetes` with what the
    workloads need of it, then the GPU monitoring objects once the GPUs are up."""
    if cfg.kubernetes is None:
        return None
    monitoring = cfg.monitoring if cfg.monitoring.enabled else None
    charted_privileged = (
        [MONITORING_NAMESPACE] if cfg.monitoring.installs_kube_prometheus_stack(cfg.environment) else []
    )
    kubernetes = build_kubernetes(
        cfg.kubernetes,
        cfg.environment,
        monitoring=monitoring,
        needs_job_set=any(t.kubernetes is not None and t.kubernetes.uses_job_set for t in cfg.training),
        needs_keda=any(i.kubernetes is not None and i.kubernetes.autoscaling is not None for i in cfg.inference),
        needs_leader_worker_set=any(i.kubernetes is not None and i.kubernetes.multi_node for i in cfg.inference),
        queued=queued_workloads(cfg),
        pod_security=namespace_pod_security(cfg, privileged=charted_privileged),
    )
    # Where a workload needs privileged, Pod Security enforces nothing: a pod policy admits baseline plus exactly
    # the stack's exceptions there (admission.py). Not where the GPU layer's or kube-prometheus-stack's pods run.
    for namespace, needs in workload_namespace_needs(cfg).items():
        if needs.level() == "privileged" and namespace not in (cfg.kubernetes.gpu_layer_namespace, *charted_privileged):
            PodPolicy(
                f"rocm-stack-pods-{namespace}",
                PodPolicyArgs(
                    provider=kubernetes.provider,
                    namespace=namespace,
                    needs=needs,
                    depends_on=[kubernetes.namespaces[namespace]],
                ),
            )
    if monitoring is not None and kubernetes.monitoring_namespace is not None:
        KubernetesMonitoring(
            KUBERNETES_MONITORING,
            KubernetesMonitoringArgs(
                config=monitoring,
                environment=cfg.environment,
                gpu_stack=cfg.kubernetes.mode,
                provider=kubernetes.provider,
                namespace=kubernetes.monitoring_namespace,
                exporter_node_selector=cfg.kubernetes.device_plugin.node_selector,
                exporter_tolerations=cfg.kubernetes.gpu_tolerations(),
                gpu_stack_workloads=gpu_stack_workloads(cfg.kubernetes),
                prometheus_operator=kubernetes.prometheus_operator,
            ),
            opts=pulumi.ResourceOptions(depends_on=kubernetes.gpu_ready),
        )
    return kubernetes
