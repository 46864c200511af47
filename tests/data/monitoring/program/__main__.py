"""Test stand-in for the monitoring wiring of the real __main__.py, run by components.synth.synthesize.

It wires the components the way the lead's program is asked to (see /work/notes/readme-monitoring.md):
GpuHost per Docker host plus a DockerExporter on its provider, the scrape config as a stack output, and, with
a `kubernetes` section, build_kubernetes() then KubernetesMonitoring in the owned `monitoring` namespace.
tests/test_monitoring.py switches to the real project once StackConfig has its `monitoring` field; this
program can then be deleted.
"""
import pulumi
from pulumi.runtime import config as runtime_config
from pydantic import ValidationError

from components.config import ConfigError, decode, load
from components.config.monitoring import MonitoringConfig, problems
from components.gpu_host import GpuHost, GpuHostArgs
from components.kubernetes import build_kubernetes
from components.monitoring import (
    DockerExporter,
    DockerExporterArgs,
    KubernetesMonitoring,
    KubernetesMonitoringArgs,
    exporter_address,
    prometheus_scrape_config_text,
)

MONITORING_NAMESPACE = "monitoring"


def key_path(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


def section(model, key: str):
    try:
        return model.model_validate(pulumi.Config("rocm-stack").get_object(key) or {})
    except ValidationError as error:
        raise pulumi.RunError("\n".join(
            f"rocm-stack:{key}{key_path(e['loc'])}: " + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
            for e in error.errors()
        )) from None


config = pulumi.Config("rocm-stack")
# The foundation's loader for everything but the section it does not know yet.
raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
others = {k: decode(v) for k, v in raw.items() if k != "rocm-stack:monitoring"}
try:
    cfg = load(pulumi.get_stack(), others)
except ConfigError as error:
    raise pulumi.RunError(str(error)) from None
monitoring = section(MonitoringConfig, "monitoring")
found = list(problems(monitoring, [(host.name, host.gpu_model) for host in cfg.hosts]))
if found:
    raise pulumi.RunError("\n".join(f"rocm-stack:{path}: {message}" for path, message in found))

hosts = {host.name: GpuHost(GpuHostArgs(host=host, images=cfg.images, security_profile=cfg.security_profile))
         for host in cfg.hosts}
if monitoring.enabled:
    for name, gpu_host in hosts.items():
        DockerExporter(name, DockerExporterArgs(config=monitoring, provider=gpu_host.provider))
    pulumi.export("prometheusScrapeConfig", prometheus_scrape_config_text(
        monitoring, {host.name: exporter_address(host.docker.host) for host in cfg.hosts}))

if cfg.kubernetes is not None and monitoring.enabled:
    kubernetes = cfg.kubernetes
    layer = build_kubernetes(kubernetes, cfg.environment)
    owned = layer.namespaces.get(MONITORING_NAMESPACE)
    KubernetesMonitoring("monitoring", KubernetesMonitoringArgs(
        config=monitoring,
        environment=cfg.environment,
        gpu_stack=kubernetes.mode,
        provider=layer.provider,
        namespace=owned.metadata.name if owned is not None else MONITORING_NAMESPACE,
    ), opts=pulumi.ResourceOptions(depends_on=layer.gpu_ready))
