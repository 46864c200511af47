"""Settings that would do nothing in the stack they are written in (issue 36 item 6), found by flipping each documented
key in each kind of stack (tests/test_settings_take_effect.py). Each is refused with the line that makes it take
effect, or, where a person may keep it on purpose (for a feature about to be switched on, or a setting shared by
several stacks), warned about in the preview (`pulumi.log.warn`, schema.from_pulumi). The monitoring and checks
sections keep theirs beside their own checks (schema.monitoring.effect_problems, schema.checks.problems)."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from .base import changed_fields
from .derived import StackWithWorkloads
from .docker import DEFAULT_IMAGES
from .workloads import InferenceKubernetes, TrainingKubernetes


def _keys(model: BaseModel, prefix: str, skip: Iterable[str] = ()) -> list[str]:
    """`prefix.key` of each field of `model` set to another value than its default, but `skip`."""
    return [f"{prefix}.{to_camel(name)}" for name in sorted(changed_fields(model) - set(skip))]


def problems(cfg: StackWithWorkloads, fleet_set: bool, registry_set: bool) -> Iterable[tuple[str, str]]:
    """Refusals: settings no resource of this stack reads. `fleet_set`, `registry_set`: `gpuFleet`, `registry` are
    written in the stack."""
    kubernetes, monitoring = cfg.kubernetes, cfg.monitoring
    if kubernetes is None:
        if fleet_set:
            yield (
                "gpuFleet",
                "does nothing without a Kubernetes layer (rocm-stack:kubernetes); add the cluster, or remove it",
            )
        if "prometheus_selector_labels" in changed_fields(monitoring):
            yield (
                "monitoring.prometheusSelectorLabels",
                "does nothing without a Kubernetes layer (rocm-stack:kubernetes), whose ServiceMonitor and PrometheusRule "
                "carry them; add the cluster, or remove it",
            )
        if "grafana_dashboard" in changed_fields(monitoring) and cfg.monitoring_host is None:
            yield (
                "monitoring.grafanaDashboard",
                "does nothing: this stack runs neither a Kubernetes layer nor a monitoring host, whose Grafana would "
                f"load it; set {_monitoring_host_line(cfg)}, or remove it",
            )
    if not cfg.hosts:
        why = "does nothing: this stack declares no Docker host (rocm-stack:hosts), whose {what}; add a host, or remove it"
        if "exporter_port" in changed_fields(monitoring):
            yield "monitoring.exporterPort", why.format(what="GPU exporter publishes it")
        if cfg.checks.image_rocm:
            yield "checks.imageRocm", why.format(what="preflight checks the amdgpu driver against it")
    if kubernetes is not None:
        if kubernetes.mode == "operator":
            for key in _keys(kubernetes.device_plugin, "kubernetes.devicePlugin"):
                yield key, "does nothing in kubernetes.mode operator (the GPU Operator deploys the device plugin: "
                "kubernetes.gpuOperator.deviceConfig.devicePlugin); set kubernetes.mode: device-plugin, or remove it"
        else:
            for key in _keys(kubernetes.gpu_operator, "kubernetes.gpuOperator"):
                yield key, "does nothing in kubernetes.mode device-plugin; set kubernetes.mode: operator, or remove it"
        device_config = kubernetes.gpu_operator.device_config
        prefix = "kubernetes.gpuOperator.deviceConfig"
        if kubernetes.mode == "operator" and not device_config.driver.enable:
            # The operator makes the KMM Module that reads version and image only for an enabled driver, and skips
            # the upgrade policy without one (ROCm/gpu-operator v1.5.1 internal/utils.go L494-504 ShouldUseKMM,
            # internal/controllers/upgrademgr.go L122-125), though the DeviceConfig carries them.
            for key in _keys(device_config.driver, f"{prefix}.driver", skip=["enable", "blacklist"]):
                yield key, f"does nothing while {prefix}.driver.enable is false; set it true, or remove it"
        if kubernetes.mode == "operator" and not device_config.config_manager.enable:
            for key in _keys(device_config.config_manager, f"{prefix}.configManager", skip=["enable"]):
                yield key, f"does nothing while {prefix}.configManager.enable is false; set it true, or remove it"
        service_monitor = device_config.metrics_exporter.service_monitor
        monitor_prefix = f"{prefix}.metricsExporter.serviceMonitor"
        if kubernetes.mode == "operator" and monitoring.enabled:
            # components.monitoring.device_config_service_monitor replaces it: the alert rules select its labels.
            for key in _keys(service_monitor, monitor_prefix):
                yield (
                    key,
                    "does nothing while monitoring.enabled is true: the stack's own ServiceMonitor replaces it (its "
                    "interval is monitoring.scrapeInterval, its labels monitoring.prometheusSelectorLabels); set "
                    "those, or monitoring.enabled: false, or remove it",
                )
        elif kubernetes.mode == "operator" and not service_monitor.enable:
            for key in _keys(service_monitor, monitor_prefix, skip=["enable"]):
                yield key, f"does nothing while {monitor_prefix}.enable is false; set it true, or remove it"
        owned = set(kubernetes.owned_namespaces())
        placed: list[tuple[str, int, TrainingKubernetes | InferenceKubernetes | None]] = [
            *(("training", i, t.kubernetes) for i, t in enumerate(cfg.training)),
            *(("inference", i, w.kubernetes) for i, w in enumerate(cfg.inference)),
        ]
        for section, index, k8s in placed:
            if k8s is not None and "pod_security" in k8s.model_fields_set and k8s.namespace not in owned:
                yield (
                    f"{section}[{index}].kubernetes.podSecurity",
                    f"does nothing: the stack labels only the namespaces it owns (kubernetes.namespaces) with their "
                    f"Pod Security level, and '{k8s.namespace}' is not one; declare it there, or remove it",
                )
    for index, inference in enumerate(cfg.inference):
        if "gated" in inference.model_fields_set and not inference.gated and inference.needs_token:
            yield (
                f"inference[{index}].gated",
                f"false does nothing: every model of '{inference.model.split('/')[0]}/' is gated, so the secret "
                "huggingfaceToken stays required; remove it",
            )
    if registry_set and not cfg.hosts:
        yield (
            "registry",
            "does nothing: this stack declares no Docker host (rocm-stack:hosts), whose Docker daemons log in to it "
            "(a cluster pulls with its own image pull secrets); add a host, or remove it",
        )


def warnings(cfg: StackWithWorkloads) -> Iterable[tuple[str, str]]:
    """Settings that do nothing here but a person may keep on purpose: said in the preview, not refused."""
    security = cfg.security
    if not cfg.hosts:
        for key in _keys(security, "security"):
            yield key, "does nothing: this stack declares no Docker host, whose GPU containers it is for (a pod's "
            "privileges follow Pod Security: docs/security.md)"
    elif security.allow_debug_in_prod and not (cfg.environment == "prod" and security.profile == "debug"):
        where = "in dev" if cfg.environment != "prod" else "while security.profile is hardened"
        yield "security.allowDebugInProd", f"does nothing {where}: it only lets prod run profile: debug"
    named = {c.image for host in cfg.hosts for c in host.containers}
    named |= {t.image for t in cfg.training} | {i.image for i in cfg.inference}
    written = {key for key, ref in cfg.images.items() if DEFAULT_IMAGES.get(key) != ref}
    for key in sorted(written - named - set(cfg.checks.image_rocm)):
        yield f"images.{key}", "does nothing: no container or workload names this image (their `image` keys)"
    for index, inference in enumerate(cfg.inference):
        docker = inference.docker
        if docker is not None and len(docker.partitions) == 1 and "max_unavailable" in changed_fields(docker):
            yield (
                f"inference[{index}].docker.maxUnavailable",
                "does nothing with one partition: its one server is replaced alone either way",
            )
    kubernetes = cfg.kubernetes
    if kubernetes is None:
        return
    autoscaled = any(i.kubernetes is not None and i.kubernetes.autoscaling is not None for i in cfg.inference)
    if not kubernetes.keda.installed(autoscaled):
        for key in _keys(kubernetes.keda, "kubernetes.keda", skip=["install", "prometheus_url"]):
            yield key, "does nothing: KEDA is installed only while an inference autoscales, or with keda.install: true"
    if not autoscaled and kubernetes.keda.prometheus_url is not None:
        yield (
            "kubernetes.keda.prometheusUrl",
            "does nothing: no inference autoscales (inference[].kubernetes.autoscaling)",
        )
    uses = {
        "jobSet": any(t.kubernetes is not None and t.kubernetes.uses_job_set for t in cfg.training),
        "leaderWorkerSet": any(i.kubernetes is not None and i.kubernetes.multi_node for i in cfg.inference),
    }
    for section, model in (("jobSet", kubernetes.job_set), ("leaderWorkerSet", kubernetes.leader_worker_set)):
        if not (uses[section] and model.install):
            why = "no workload needs it" if not uses[section] else f"kubernetes.{section}.install is false"
            for key in _keys(model, f"kubernetes.{section}", skip=["install"]):
                yield key, f"does nothing: the stack installs no {section} controller ({why})"
            if not uses[section] and "install" in changed_fields(model):
                yield f"kubernetes.{section}.install", f"does nothing: {why}, so the stack installs none either way"


def _monitoring_host_line(cfg: StackWithWorkloads) -> str:
    return f"monitoring.host: {cfg.hosts[0].name}" if cfg.hosts else "a Docker host and monitoring.host"
