"""rocm-stack: read the stack config, wire the components. All logic lives in components/."""

import pulumi

from schema import ConfigError, from_pulumi
from schema.docker import host_images
from schema.workloads import namespace_pod_security
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
    prometheus_scrape_config_text,
)
from components.workloads import build_workloads, host_checks, host_for_gpu_host

try:
    cfg, secrets = from_pulumi()
except ConfigError as error:
    # Nothing has been declared yet: stop with the list of problems, not a traceback.
    raise pulumi.RunError(str(error)) from None

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
    pulumi.export(
        "prometheusScrapeConfig",
        prometheus_scrape_config_text(monitoring, declared_fleet(cfg), keyed=secrets.vllm_api_key is not None),
    )

kubernetes = None
if cfg.kubernetes is not None:
    kubernetes = build_kubernetes(
        cfg.kubernetes,
        cfg.environment,
        monitoring=monitoring,
        needs_job_set=any(t.kubernetes is not None and t.kubernetes.uses_job_set for t in cfg.training),
        pod_security=namespace_pod_security(
            cfg,
            privileged=[MONITORING_NAMESPACE] if cfg.monitoring.installs_kube_prometheus_stack(cfg.environment) else [],
        ),
    )
    pulumi.export("kubernetesNamespaces", sorted(kubernetes.namespaces))
    pulumi.export("gpuResourceName", kubernetes.gpu_resource_name)
    if monitoring is not None:
        KubernetesMonitoring(
            KUBERNETES_MONITORING,
            KubernetesMonitoringArgs(
                config=monitoring,
                environment=cfg.environment,
                gpu_stack=cfg.kubernetes.mode,
                provider=kubernetes.provider,
                namespace=kubernetes.namespace_name(MONITORING_NAMESPACE),
                exporter_node_selector=cfg.kubernetes.device_plugin.node_selector,
                exporter_tolerations=cfg.kubernetes.gpu_tolerations(),
                gpu_stack_workloads=gpu_stack_workloads(cfg.kubernetes),
                prometheus_operator=kubernetes.prometheus_operator,
            ),
            opts=pulumi.ResourceOptions(depends_on=kubernetes.gpu_ready),
        )

workloads = build_workloads(cfg, secrets, kubernetes, hosts)
pulumi.export("workloads", workloads.outputs())
