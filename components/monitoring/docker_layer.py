"""The Docker hosts' monitoring (`build_docker_monitoring`): the device metrics exporter, node-exporter and cAdvisor
on every host, Prometheus, Alertmanager and Grafana on the monitoring host (`monitoring.host`), and the scrape
configuration for a Prometheus of the user's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from schema import StackConfig, StackSecrets
from schema.derived import host_data_dirs
from components.docker.gpu_host import GpuHost
from components.monitoring import (
    DockerExporter,
    DockerExporterArgs,
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
)
from components.workloads.proxy import secret_scrape_secret

NO_MONITORING_HOST = (
    "nowhere: no monitoring host (monitoring.host) evaluates the Docker hosts' alerts; set it, or give your "
    "Prometheus the prometheusScrapeConfig output and `rocm-stack alerts`"
)


def build_docker_monitoring(cfg: StackConfig, secrets: StackSecrets, hosts: Mapping[str, GpuHost]) -> dict[str, Any]:
    """Declares the Docker hosts' monitoring (nothing with monitoring off); returns the stack outputs it gives."""
    if not cfg.monitoring.enabled:
        return {}
    monitoring = cfg.monitoring
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
    tls = keyed and secrets.vllm_tls_certificate is not None
    outputs: dict[str, Any] = {"prometheusScrapeConfig": prometheus_scrape_config_text(monitoring, fleet, keyed, tls)}
    if cfg.monitoring_host is not None:
        monitoring_host = next(host for host in cfg.hosts if host.name == cfg.monitoring_host)
        servers = MonitoringHost(
            monitoring_host.name,
            MonitoringHostArgs(
                config=monitoring,
                scrape_config=prometheus_scrape_config(monitoring, fleet, keyed, tls),
                fleet=fleet,
                provider=hosts[monitoring_host.name].provider,
                address=exporter_address(monitoring_host.docker.host),
                logs=monitoring_host.logs,
                pull_timeout_seconds=monitoring_host.docker.pull_timeout_seconds,
                grafana_admin_password=secrets.grafana_admin_password,
                secret_receivers="monitoring" in secrets.secret_sections,
                vllm_scrape_secret=secret_scrape_secret(secrets.vllm_api_key) if keyed else None,
                vllm_ca=secrets.vllm_tls_certificate if tls else None,
            ),
        )
        outputs["monitoringUrls"] = servers.urls
        outputs["monitoringTunnel"] = servers.tunnel
        outputs["alertDestinations"] = servers.alert_destinations
    elif cfg.hosts:
        outputs["alertDestinations"] = NO_MONITORING_HOST
    return outputs
