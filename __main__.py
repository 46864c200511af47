"""rocm-stack: read the stack config, wire the components. All logic lives in components/."""

import pulumi

from schema import ConfigError, from_pulumi
from schema.docker import host_images
from schema.workloads import host_data_dirs, namespace_pod_security, queued_workloads
from components import supply
from components.docker.gpu_host import GpuHost, GpuHostArgs
from components.k8s import build_kubernetes, gpu_stack_workloads
from components.monitoring import (
    KUBERNETES_MONITORING,
    MONITORING_NAMESPACE,
    DockerExporter,
    DockerExporterArgs,
    KubernetesMonitoring,
    KubernetesMonitoringArgs,
    declared_fleet,
    exporter_address,
    prometheus_scrape_config,
    prometheus_scrape_config_text,
)
from components.monitoring.docker_host import (
    HostExporters,
    HostExportersArgs,
    MonitoringHost,
    MonitoringHostArgs,
    alert_destinations,
)
from components.workloads import build_workloads, host_checks, host_for_gpu_host
from components.workloads.proxy import secret_metrics_token

try:
    cfg, secrets = from_pulumi()
except ConfigError as error:
    # Nothing has been declared yet: stop with the list of problems, not a traceback.
    raise pulumi.RunError(str(error)) from None

# Every image, chart and CRD file below comes from the mirror when the stack has one (components/supply.py).
supply.use(cfg.mirror)
monitoring = cfg.monitoring if cfg.monitoring.enabled else None

hosts = {
    host.name: GpuHost(
        host.name,
        GpuHostArgs(
            host=host_for_gpu_host(cfg, host),
            images=host_images(host, cfg.images),
            security_profile=cfg.security_profile,
            registry=cfg.registry,
            registry_password=secrets.registry_password,
            checks=host_checks(cfg, host),
            secret_env=secrets.env_is_secret("hosts"),
        ),
    )
    for host in cfg.hosts
}
pulumi.export("environment", cfg.environment)
pulumi.export("dockerHosts", {name: host.provider.host for name, host in hosts.items()})

if monitoring is not None:
    for host_config in cfg.hosts:
        DockerExporter(
            host_config.name,
            DockerExporterArgs(
                config=monitoring,
                provider=hosts[host_config.name].provider,
                logs=host_config.logs,
                pull_timeout_seconds=host_config.docker.pull_timeout_seconds,
            ),
        )
        HostExporters(
            host_config.name,
            HostExportersArgs(
                provider=hosts[host_config.name].provider,
                logs=host_config.logs,
                pull_timeout_seconds=host_config.docker.pull_timeout_seconds,
                data_dirs=host_data_dirs(cfg, host_config.name),
            ),
        )
    fleet = declared_fleet(cfg)
    keyed = secrets.vllm_api_key is not None
    pulumi.export("prometheusScrapeConfig", prometheus_scrape_config_text(monitoring, fleet, keyed=keyed))
    if cfg.monitoring_host is not None:
        monitoring_host = next(host for host in cfg.hosts if host.name == cfg.monitoring_host)
        servers = MonitoringHost(
            monitoring_host.name,
            MonitoringHostArgs(
                config=monitoring,
                scrape_config=prometheus_scrape_config(monitoring, fleet, keyed),
                fleet=fleet,
                provider=hosts[monitoring_host.name].provider,
                address=exporter_address(monitoring_host.docker.host),
                logs=monitoring_host.logs,
                pull_timeout_seconds=monitoring_host.docker.pull_timeout_seconds,
                grafana_admin_password=secrets.grafana_admin_password,
                vllm_metrics_token=secret_metrics_token(secrets.vllm_api_key) if keyed else None,
            ),
        )
        pulumi.export("monitoringUrls", servers.urls)
        pulumi.export("alertDestinations", alert_destinations(monitoring.receivers))
    elif cfg.hosts:
        pulumi.export(
            "alertDestinations",
            "nowhere: no monitoring host (monitoring.host) evaluates the Docker hosts' alerts; set it, or give your "
            "Prometheus the prometheusScrapeConfig output and `rocm-stack alerts`",
        )

kubernetes = None
if cfg.kubernetes is not None:
    kubernetes = build_kubernetes(
        cfg.kubernetes,
        cfg.environment,
        monitoring=monitoring,
        needs_job_set=any(t.kubernetes is not None and t.kubernetes.uses_job_set for t in cfg.training),
        needs_keda=any(i.kubernetes is not None and i.kubernetes.autoscaling is not None for i in cfg.inference),
        needs_leader_worker_set=any(i.kubernetes is not None and i.kubernetes.multi_node for i in cfg.inference),
        queued=queued_workloads(cfg),
        pod_security=namespace_pod_security(
            cfg,
            privileged=[MONITORING_NAMESPACE] if cfg.monitoring.installs_kube_prometheus_stack(cfg.environment) else [],
        ),
    )
    pulumi.export("kubernetesNamespaces", sorted(kubernetes.namespaces))
    pulumi.export("gpuResourceName", kubernetes.gpu_resource_name)
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

workloads = build_workloads(cfg, secrets, kubernetes, hosts)
pulumi.export("workloads", workloads.outputs())
# Every image the stack pulls, at its source (`rocm-stack images`: what an air-gapped mirror must hold).
pulumi.export("images", supply.pulled())
