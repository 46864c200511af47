"""GPU alert rules built from the monitoring thresholds, as Prometheus rule groups.

One builder feeds both outputs: the `monitoring.coreos.com/v1` PrometheusRule spec (Kubernetes) and the plain
rules file `monitoring/rules/gpu-alerts.rules.yml` (Docker-only Prometheus). The committed file is the defaults;
`rocm-stack alerts` (tools/alerts.py) rewrites it and tests/test_monitoring_alerts.py fails when it drifts.

A fleet may mix GPU models and families: every model has its own group whose rules select its GPUs by the
`gpu_model` target label (MODEL_LABEL) and use its metric set and thresholds; a GPU without a known model label
trips GpuModelUnknown instead of going unwatched.

Metric and label names are those ROCm/device-metrics-exporter emits with its default (empty) MetricsFieldPrefix,
lower-cased field names from docs/configuration/metrics-support-matrix.yaml:
  gpu_junction_temperature (MI3xx), gpu_edge_temperature (MI2xx), gpu_memory_temperature,
  gpu_package_power (MI3xx), gpu_average_package_power (MI2xx), gpu_gfx_busy_instantaneous (MI3xx, one series
  per compute die: label xcc_index, as in grafana/dashboard_gpu.json), gpu_gfx_activity (MI2xx; the upstream
  dashboards read it only on MI2xx cards), gpu_used_vram, gpu_total_vram, gpu_ecc_correct_total,
  gpu_ecc_uncorrect_total.
Labels: hostname, gpu_id, gpu_partition_id, pod, namespace, job_id are always set by the exporter
(docs/configuration/configmap.md; example/config-gpu.json "Labels"); `pod` is non-empty when Kubernetes has
allocated the GPU to a pod, `job_id` when Slurm has allocated it to a job. `gpu_health` is 1 healthy, 0
unhealthy (pkg/amdgpu/gpuagent/gpuagent_gpu_metrics.go @ v1.5.1: "Health of the GPU (0 = Unhealthy | 1 =
Healthy)").

On Kubernetes a second group watches the GPU stack itself through kube-state-metrics (which
kube-prometheus-stack runs): the operator Deployment, the device plugin / labeller / exporter DaemonSets and
each node's allocatable `amd.com/gpu` (docs/metrics/{workload,cluster}/*-metrics.md, all STABLE).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import yaml

from schema.kubernetes import GPU_RESOURCE_NAME
from domain.gpus import MODELS
from schema.monitoring import MonitoringConfig, Thresholds
from schema.project import ROOT

# Every scrape of the exporter (Docker scrape config, our ServiceMonitor, the DeviceConfig's via relabeling)
# carries this job label, so "exporter down" can select exactly those targets.
EXPORTER_JOB = "amd-device-metrics-exporter"
# A GPU (or GPU partition) on a host, as the exporter identifies it.
GPU_KEY = ("hostname", "gpu_id", "gpu_partition_id")
RULES_FILE = ROOT / "monitoring" / "rules" / "gpu-alerts.rules.yml"
# hosts[].gpuModel of a GPU rocm-stack has no figures for: labelled so, watched only by the model-free rules.
OTHER_MODEL = "other"

# The target label naming a GPU's model (a domain/gpus.py name): Docker scrape targets carry their host's
# hosts[].gpuModel, Kubernetes targets get it from the node labeller's amd.com/gpu.device-id (components/monitoring).
MODEL_LABEL = "gpu_model"
# Per family: the hot sensor, the power metric and the utilisation expression ({m}: the model's matcher).
_FAMILY_METRICS: dict[str, dict[str, Any]] = {
    "MI3xx": {
        "temperature": ("gpu_junction_temperature", "junction (hotspot)"),
        "power": "gpu_package_power",
        # Per-die busy percentage; the GPU's utilisation is the mean over its dies (as the upstream dashboard).
        "utilization": "avg without (xcc_index) (gpu_gfx_busy_instantaneous{m})",
    },
    "MI2xx": {
        "temperature": ("gpu_edge_temperature", "edge"),
        "power": "gpu_average_package_power",
        "utilization": "gpu_gfx_activity{m}",
    },
}
_WHERE = "{{ $labels.hostname }} GPU {{ $labels.gpu_id }}"
# kube-state-metrics' label value of an extended resource: invalid label characters become `_`
# (internal/store/utils.go `invalidLabelCharRE = regexp.MustCompile(`[^a-zA-Z0-9_]`)`, SanitizeLabelName):
# kube_node_status_allocatable{resource="amd_com_gpu", unit="integer"} (internal/store/node.go).
KSM_GPU_RESOURCE = re.sub(r"[^a-zA-Z0-9_]", "_", GPU_RESOURCE_NAME)
# How far back a node's allocatable GPUs are remembered: a drop is measured against the most it had.
ALLOCATABLE_MEMORY = "1d"
# Pods of a Deployment are owned by its ReplicaSet (kube_pod_owner, docs/metrics/workload/pod-metrics.md):
# serving replicas, idle whenever nobody sends requests, which is no reason to page.
SERVING_OWNER_KIND = "ReplicaSet"


@dataclass(frozen=True)
class GpuStackWorkloads:
    """The Kubernetes objects that expose and measure the GPUs, as (namespace, name); a None namespace matches
    the name in any namespace."""

    deployments: tuple[tuple[str | None, str], ...] = ()
    daemon_sets: tuple[tuple[str | None, str], ...] = ()


def _num(value: float) -> str:
    return format(value, "g")


def _alert(
    name: str, expr: str, for_: str | None, severity: str, summary: str, description: str, model: str | None = None
) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_:
        rule["for"] = for_
    # The model as a rule label too: one alert name per model group is otherwise a duplicate rule to promtool.
    rule["labels"] = {"severity": severity, **({MODEL_LABEL: model} if model else {})}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def alert_rules(cfg: MonitoringConfig, model: str) -> list[dict[str, Any]]:
    """Alerting rules for the GPUs of one model (selected by MODEL_LABEL), with its thresholds."""
    t: Thresholds = cfg.effective_thresholds(model)
    family = MODELS[model].line
    metrics = _FAMILY_METRICS[family]
    temperature, sensor = metrics["temperature"]
    is_model = f'{MODEL_LABEL}="{model}"'
    m = "{" + is_model + "}"
    key = ", ".join(GPU_KEY)
    # A workload holds the GPU when a scheduler label names it (Kubernetes pod, Slurm job) or, on plain Docker
    # hosts where the exporter sees no scheduler, when it holds a real share of the VRAM. Serving pods (owned by
    # a Deployment's ReplicaSet) are left out: an inference replica nobody queries is idle by design.
    workload = (
        f'(gpu_used_vram{{{is_model}, pod!=""}} unless on (namespace, pod) '
        f'kube_pod_owner{{owner_kind="{SERVING_OWNER_KIND}"}})'
        f' or gpu_used_vram{{{is_model}, job_id!=""}}'
        f' or (gpu_used_vram{{{is_model}, pod="", job_id=""}} / gpu_total_vram{m}'
        f" > {_num(t.idle_vram_in_use_fraction)})"
    )
    temperature_name = "GpuJunctionTemperatureHigh" if family == "MI3xx" else "GpuEdgeTemperatureHigh"
    where = _WHERE
    return [
        _alert(
            temperature_name,
            f"{temperature}{m} > {_num(t.gpu_temperature_celsius)}",
            t.sustained_for,
            "warning",
            f"GPU {sensor} temperature high",
            f"{where} {sensor} temperature is {{{{ $value }}}} °C, above {_num(t.gpu_temperature_celsius)} °C "
            f"for {t.sustained_for}: check cooling before the GPU throttles.",
            model=model,
        ),
        _alert(
            "GpuMemoryTemperatureHigh",
            f"gpu_memory_temperature{m} > {_num(t.memory_temperature_celsius)}",
            t.sustained_for,
            "warning",
            "GPU memory (HBM) temperature high",
            f"{where} memory temperature is {{{{ $value }}}} °C, above {_num(t.memory_temperature_celsius)} °C "
            f"for {t.sustained_for}.",
            model=model,
        ),
        # A model without a board power (MI308X unless modelThresholds sets it) has no power-at-cap rule.
        *(
            []
            if t.power_cap_watts is None
            else [
                _alert(
                    "GpuPowerAtCap",
                    f"{metrics['power']}{m} >= {_num(t.power_cap_watts * t.power_cap_fraction)}",
                    t.sustained_for,
                    "info",
                    "GPU running at its power cap",
                    f"{where} draws {{{{ $value }}}} W, at least {_num(t.power_cap_fraction * 100)}% of its "
                    f"{_num(t.power_cap_watts)} W cap for {t.sustained_for}: it is power-throttled.",
                    model=model,
                )
            ]
        ),
        _alert(
            "GpuIdleWhileAllocated",
            f"({metrics['utilization'].format(m=m)} < {_num(t.idle_utilization_percent)})\n"
            f"and on ({key})\n({workload})",
            t.idle_for,
            "warning",
            "GPU idle while a workload holds it",
            f"{where} is below {_num(t.idle_utilization_percent)}% busy for {t.idle_for} although "
            "{{ if $labels.pod }}pod {{ $labels.pod }}{{ else if $labels.job_id }}Slurm job {{ $labels.job_id }}"
            "{{ else }}a process holding VRAM{{ end }} has it: the job may be stuck or starved of input.",
            model=model,
        ),
        _alert(
            "GpuVramNearlyFull",
            f"gpu_used_vram{m} / gpu_total_vram{m} > {_num(t.vram_full_fraction)}",
            t.sustained_for,
            "warning",
            "GPU VRAM nearly full",
            f"{where} uses {{{{ $value | humanizePercentage }}}} of its VRAM for {t.sustained_for}: "
            "the next allocation may fail with out-of-memory.",
            model=model,
        ),
        _alert(
            "GpuEccUncorrectableErrors",
            f"increase(gpu_ecc_uncorrect_total{m}[{t.ecc_window}]) > 0",
            None,
            "critical",
            "GPU uncorrectable ECC errors",
            f"{where} reported {{{{ $value | humanize }}}} new uncorrectable ECC errors in {t.ecc_window}: "
            "drain the GPU and check its RAS/CPER records.",
            model=model,
        ),
        _alert(
            "GpuEccCorrectableErrorsRising",
            f"increase(gpu_ecc_correct_total{m}[{t.ecc_window}]) > {t.ecc_correctable_max_increase}",
            None,
            "warning",
            "GPU correctable ECC errors rising",
            f"{where} reported {{{{ $value | humanize }}}} correctable ECC errors in {t.ecc_window} "
            f"(more than {t.ecc_correctable_max_increase}): memory may be degrading.",
            model=model,
        ),
        _alert(
            "GpuUnhealthy",
            f"gpu_health{m} == 0",
            t.sustained_for,
            "critical",
            "GPU reports itself unhealthy",
            f"{where} has reported gpu_health 0 (unhealthy) for {t.sustained_for}: drain it and check its RAS "
            "events before scheduling work there again.",
            model=model,
        ),
    ]


def exporter_alert_rules(cfg: MonitoringConfig) -> list[dict[str, Any]]:
    """Rules on the exporters themselves and on GPUs no model's rules watch (fleet-wide thresholds)."""
    t: Thresholds = cfg.effective_thresholds()
    known = "|".join([*MODELS, OTHER_MODEL])
    return [
        _alert(
            "GpuModelUnknown",
            f'gpu_health{{{MODEL_LABEL}!~"{known}"}}',
            t.exporter_down_for,
            "warning",
            "GPU of no known model: its temperature, power and idle alerts are off",
            f"{_WHERE} has no {MODEL_LABEL} label of a model the alert rules know: "
            "on Docker set the host's gpuModel; on Kubernetes check the node's amd.com/gpu.device-id label "
            "(the GPU Operator's node labeller) and that Prometheus attaches node metadata.",
        ),
        _alert(
            "GpuMetricsExporterDown",
            f'up{{job="{EXPORTER_JOB}"}} == 0',
            t.exporter_down_for,
            "warning",
            "AMD device metrics exporter down",
            f"Prometheus has failed to scrape the exporter at {{{{ $labels.instance }}}} for {t.exporter_down_for}: "
            "GPU alerts are blind on that host.",
        ),
        _alert(
            "GpuMetricsExporterAbsent",
            f'absent(up{{job="{EXPORTER_JOB}"}})',
            t.exporter_down_for,
            "warning",
            "No AMD device metrics exporter is scraped",
            f"Prometheus has had no target of job {EXPORTER_JOB} for {t.exporter_down_for}: the exporter is not "
            "deployed or not discovered (ServiceMonitor labels, scrape config), so no GPU alert can fire.",
        ),
    ]


def _selector(namespace: str | None, names: list[str], label: str) -> str:
    matchers = [f'namespace="{namespace}"'] if namespace is not None else []
    matchers.append(f'{label}="{names[0]}"' if len(names) == 1 else f'{label}=~"{"|".join(names)}"')
    return "{" + ", ".join(matchers) + "}"


def _by_namespace(objects: tuple[tuple[str | None, str], ...]) -> dict[str | None, list[str]]:
    grouped: dict[str | None, list[str]] = {}
    for namespace, name in objects:
        grouped.setdefault(namespace, []).append(name)
    return grouped


def kubernetes_alert_rules(cfg: MonitoringConfig, stack: GpuStackWorkloads) -> list[dict[str, Any]]:
    """Rules on the GPU stack's Kubernetes objects and the nodes' allocatable GPUs (kube-state-metrics)."""
    t: Thresholds = cfg.effective_thresholds()
    rules = []
    if stack.deployments:
        available = " or ".join(
            f"kube_deployment_status_replicas_available{_selector(ns, names, 'deployment')} < 1"
            for ns, names in _by_namespace(stack.deployments).items()
        )
        missing = " or ".join(
            f"absent(kube_deployment_status_replicas_available{_selector(ns, [name], 'deployment')})"
            for ns, name in stack.deployments
        )
        rules.append(
            _alert(
                "GpuOperatorDown",
                f"{available} or {missing}",
                t.exporter_down_for,
                "critical",
                "AMD GPU Operator not running",
                f"Deployment {{{{ $labels.namespace }}}}/{{{{ $labels.deployment }}}} has had no available replica for "
                f"{t.exporter_down_for}: DeviceConfig changes, driver upgrades and failed operands are not handled.",
            )
        )
    if stack.daemon_sets:
        unavailable = " or ".join(
            f"kube_daemonset_status_number_unavailable{_selector(ns, names, 'daemonset')} > 0"
            for ns, names in _by_namespace(stack.daemon_sets).items()
        )
        rules.append(
            _alert(
                "GpuStackDaemonSetUnavailable",
                unavailable,
                t.exporter_down_for,
                "critical",
                "GPU device plugin, labeller or metrics exporter pods unavailable",
                f"{{{{ $value }}}} pod(s) of DaemonSet {{{{ $labels.namespace }}}}/{{{{ $labels.daemonset }}}} have been "
                f"unavailable for {t.exporter_down_for}: their nodes advertise no {GPU_RESOURCE_NAME} (device plugin) "
                "or report no GPU metrics (exporter).",
            )
        )
    allocatable = f'kube_node_status_allocatable{{resource="{KSM_GPU_RESOURCE}", unit="integer"}}'
    rules.append(
        _alert(
            "GpuAllocatableDropped",
            f"{allocatable}\n< max_over_time({allocatable}[{ALLOCATABLE_MEMORY}])\n"
            # A cordoned node is being drained on purpose (driver upgrade: the operator removes the device plugin).
            "unless on (node) kube_node_spec_unschedulable == 1",
            t.exporter_down_for,
            "warning",
            f"Node lost allocatable {GPU_RESOURCE_NAME}",
            f"Node {{{{ $labels.node }}}} offers {{{{ $value }}}} {GPU_RESOURCE_NAME} for {t.exporter_down_for}, fewer "
            f"than it had in the last {ALLOCATABLE_MEMORY}: a GPU fell off the bus, failed health checks, or the device "
            "plugin lost it.",
        )
    )
    return rules


def rule_groups(cfg: MonitoringConfig, stack: GpuStackWorkloads | None = None) -> list[dict[str, Any]]:
    """One group per GPU model, the exporter group, and with `stack` (Kubernetes) the group watching the GPU
    stack's objects."""
    groups = [{"name": f"rocm-gpu-{model.lower()}", "rules": alert_rules(cfg, model)} for model in MODELS]
    groups.append({"name": "rocm-gpu-exporter", "rules": exporter_alert_rules(cfg)})
    if stack is not None:
        groups.append({"name": "rocm-gpu-kubernetes", "rules": kubernetes_alert_rules(cfg, stack)})
    return groups


def prometheus_rule_spec(cfg: MonitoringConfig, stack: GpuStackWorkloads | None = None) -> dict[str, Any]:
    """`spec` of a monitoring.coreos.com/v1 PrometheusRule."""
    return {"groups": rule_groups(cfg, stack)}


class _RulesDumper(yaml.SafeDumper):
    """Multi-line PromQL as literal blocks, so the file reads like hand-written rules."""


_RulesDumper.add_representer(
    str,
    lambda dumper, value: dumper.represent_scalar("tag:yaml.org,2002:str", value, style="|" if "\n" in value else None),
)


def rules_file_text(cfg: MonitoringConfig) -> str:
    """The same groups as a Prometheus rules file (`rule_files:` in prometheus.yml)."""
    header = (
        "# GPU alert rules of every GPU model, each selected by its gpu_model target label (rocm-stack monitoring).\n"
        "# Generated by `rocm-stack alerts`; edit domain/alerts.py or the stack config, not this file.\n"
    )
    return header + yaml.dump(
        {"groups": rule_groups(cfg)}, Dumper=_RulesDumper, sort_keys=False, allow_unicode=True, width=120
    )
