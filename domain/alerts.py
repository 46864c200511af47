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

On Docker hosts (docker_host_alert_rules) what the stack declares (domain/fleet.py) is recorded as series
(declared_rules: each host's GPU count, each partition's container), and compared with what the exporter,
cAdvisor and node-exporter report:
- cAdvisor (google/cadvisor v0.60.5 lib/metrics/prometheus.go): `container_last_seen` (L127; a container is
  reported only while its cgroup exists: an exited one drops out), `container_start_time_seconds` (L2297, the
  container's State.StartedAt, container/docker/handler.go L254-256: it changes on every restart),
  `container_health_state` (L138-141, getContainerHealthState L2465: 1 healthy, 0 starting or unhealthy, -1 no
  health check; in cAdvisor since v0.54.0), container label `name` = the Docker name (DefaultContainerLabels
  L2215, LabelName "name").
- node-exporter (prometheus/node_exporter collector/filesystem_common.go): `node_filesystem_avail_bytes`,
  `node_filesystem_size_bytes`, `node_filesystem_readonly`, labels device, fstype, mountpoint (the e2e reads them
  from the real binary, tests/e2e/test_e2e_prometheus.py).
vLLM (vllm_alert_rules) by the names of vLLM 0.11.2, the pinned rocm/vllm image's (vllm/v1/metrics/loggers.py,
vendored as tests/data/monitoring/reference/vllm-0.11.2-metrics-loggers.py.txt): gauge
`vllm:num_requests_waiting` and histogram `vllm:time_to_first_token_seconds`, labels model_name and engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import yaml

from domain.fleet import DeclaredHost

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
# The jobs of the Docker hosts' other exporters and of the vLLM servers (components/monitoring scrape config; the
# Kubernetes vLLM ServiceMonitor relabels its job to VLLM_JOB too).
NODE_EXPORTER_JOB = "node-exporter"
CADVISOR_JOB = "cadvisor"
VLLM_JOB = "vllm"
VLLM_ROUTER_JOB = "vllm-router"
# Declared state, recorded from the stack config (declared_rules): value = GPUs the host should report, and one
# series per partition container (labels host, name, workload) whose value is its start grace in seconds.
DECLARED_GPUS = "rocm_stack_host_gpus_declared"
DECLARED_PARTITION = "rocm_stack_partition_start_grace_seconds"
# Filesystems in memory hold no checkpoint or model cache.
MEMORY_FS = 'fstype!~"tmpfs|ramfs"'
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


def declared_rules(fleet: Sequence[DeclaredHost]) -> list[dict[str, Any]]:
    """Recording rules of what the stack declares of its Docker hosts (constant series), for the alerts to compare
    with what is reported: no PromQL turns a target label's string into a number to compare a count with."""
    rules: list[dict[str, Any]] = []
    for host in sorted(fleet, key=lambda h: h.name):
        rules.append({"record": DECLARED_GPUS, "expr": f"vector({host.gpus})", "labels": {"host": host.name}})
        rules.extend(
            {
                "record": DECLARED_PARTITION,
                "expr": f"vector({p.start_grace_seconds})",
                "labels": {"host": host.name, "name": p.name, "workload": p.workload},
            }
            for p in sorted(host.partitions, key=lambda p: p.name)
        )
    return rules


def docker_host_alert_rules(cfg: MonitoringConfig) -> list[dict[str, Any]]:
    """Docker hosts: GPUs missing against the declared count, partitions stopped, restarting or unhealthy
    (cAdvisor), filesystems nearly full (node-exporter), and those exporters themselves."""
    t: Thresholds = cfg.effective_thresholds()
    gpus = f'gpu_health{{job="{EXPORTER_JOB}"}}'
    cadvisor = f'job="{CADVISOR_JOB}"'
    node = f'job="{NODE_EXPORTER_JOB}"'
    declared_gpus = f"""{{{{ printf "{DECLARED_GPUS}{{host='%s'}}" $labels.host | query | first | value }}}}"""
    return [
        _alert(
            "GpuCountBelowDeclared",
            # A host whose exporter reports no GPU at all has no count: 0 from the declared series stands in.
            f"(count by (host) ({gpus}) or 0 * {DECLARED_GPUS})\n< on (host) {DECLARED_GPUS}\n"
            f'and on (host) up{{job="{EXPORTER_JOB}"}} == 1',
            t.exporter_down_for,
            "critical",
            "Host reports fewer GPUs than its config declares",
            f"{{{{ $labels.host }}}} reports {{{{ $value }}}} GPUs, its config declares {declared_gpus}: a GPU fell off "
            "the bus or lost its driver (check `amd-smi list` and dmesg on the host); the missing GPU reports no "
            "metric, so no other GPU alert sees it.",
        ),
        _alert(
            "PartitionStopped",
            f"{DECLARED_PARTITION} unless on (host, name) container_last_seen{{{cadvisor}}}\n"
            f"and on (host) up{{{cadvisor}}} == 1",
            t.exporter_down_for,
            "critical",
            "A partition's container is not running",
            f"The {{{{ $labels.workload }}}} container {{{{ $labels.name }}}} on {{{{ $labels.host }}}} has not been "
            f"running for {t.exporter_down_for}: it exited (a finished or failed training, restarts used up) or was "
            "removed; `docker logs` it on the host, and remove a finished training from the stack.",
        ),
        _alert(
            "ContainerRestarting",
            f'changes(container_start_time_seconds{{{cadvisor}, name!=""}}[{t.container_restart_window}])\n'
            f">= {t.container_restarts}",
            None,
            "warning",
            "Container restarting",
            f"Container {{{{ $labels.name }}}} on {{{{ $labels.host }}}} restarted {{{{ $value }}}} times in "
            f"{t.container_restart_window}: it is crash-looping under its restart policy.",
        ),
        _alert(
            "ContainerUnhealthy",
            # Past its start grace: a vLLM loading its model is `starting` (also 0) for up to its startup timeout.
            f"container_health_state{{{cadvisor}}} == 0\n"
            f"and on (host, name)\n(time() - container_start_time_seconds{{{cadvisor}}}) > on (host, name) "
            f"{DECLARED_PARTITION}",
            t.sustained_for,
            "critical",
            "Container failing its health check",
            f"Container {{{{ $labels.name }}}} on {{{{ $labels.host }}}} has failed its Docker health check for "
            f"{t.sustained_for} after its start grace: Docker does not restart an unhealthy container, so it keeps "
            "running without serving.",
        ),
        _alert(
            "FilesystemNearlyFull",
            f"node_filesystem_avail_bytes{{{node}, {MEMORY_FS}}} / node_filesystem_size_bytes{{{node}, {MEMORY_FS}}}\n"
            f"< {_num(t.filesystem_free_fraction)}\nand node_filesystem_readonly{{{node}}} == 0",
            t.sustained_for,
            "critical",
            "Filesystem nearly full",
            "{{ $labels.mountpoint }} ({{ $labels.device }}) on {{ $labels.host }} has "
            "{{ $value | humanizePercentage }} free: checkpoint writes (training.docker.checkpointDir) and model "
            "downloads (inference.docker.modelCacheDir) on it will fail.",
        ),
        _alert(
            "HostExporterDown",
            f'up{{job=~"{NODE_EXPORTER_JOB}|{CADVISOR_JOB}"}} == 0',
            t.exporter_down_for,
            "warning",
            "node-exporter or cAdvisor down",
            f"Prometheus has failed to scrape {{{{ $labels.job }}}} at {{{{ $labels.instance }}}} for "
            f"{t.exporter_down_for}: container and filesystem alerts are blind on {{{{ $labels.host }}}}.",
        ),
    ]


def vllm_alert_rules(cfg: MonitoringConfig) -> list[dict[str, Any]]:
    """vLLM servers: not answering /metrics, a queue that keeps growing, slow first tokens."""
    t: Thresholds = cfg.effective_thresholds()
    vllm = f'job="{VLLM_JOB}"'
    where = "{{ $labels.instance }}{{ with $labels.model_name }} ({{ . }}){{ end }}"
    waiting = f"vllm:num_requests_waiting{{{vllm}}}"
    return [
        _alert(
            "VllmServerDown",
            f"up{{{vllm}}} == 0",
            t.exporter_down_for,
            "critical",
            "vLLM server down",
            f"Prometheus has failed to scrape vLLM at {{{{ $labels.instance }}}} for {t.exporter_down_for}: the "
            "server (or its proxy) is stopped, hung, or still loading its model.",
        ),
        _alert(
            "VllmQueueGrowing",
            f"{waiting} > {t.vllm_waiting_requests}\nand deriv({waiting}[{t.sustained_for}]) > 0",
            t.sustained_for,
            "warning",
            "vLLM request queue growing",
            f"{where} has {{{{ $value }}}} requests waiting and the queue has grown for {t.sustained_for}: requests "
            "arrive faster than the server completes them (add replicas, or check the KV cache).",
        ),
        _alert(
            "VllmTimeToFirstTokenHigh",
            "histogram_quantile(0.95, sum by (le, job, instance, host, model_name) "
            f"(rate(vllm:time_to_first_token_seconds_bucket{{{vllm}}}[{t.sustained_for}])))\n"
            f"> {_num(t.vllm_time_to_first_token_seconds)}",
            t.sustained_for,
            "warning",
            "vLLM time to first token high",
            f"{where}: 95% of requests got their first token within {{{{ $value | humanizeDuration }}}} over the last "
            f"{t.sustained_for}, above {_num(t.vllm_time_to_first_token_seconds)} s.",
        ),
    ]


def rule_groups(
    cfg: MonitoringConfig, stack: GpuStackWorkloads | None = None, fleet: Sequence[DeclaredHost] = ()
) -> list[dict[str, Any]]:
    """One group per GPU model, the exporter and vLLM groups; with `stack` (Kubernetes) the group watching the
    GPU stack's objects, else the Docker hosts' group and, with `fleet`, what the stack declares of them."""
    groups = [{"name": f"rocm-gpu-{model.lower()}", "rules": alert_rules(cfg, model)} for model in MODELS]
    groups.append({"name": "rocm-gpu-exporter", "rules": exporter_alert_rules(cfg)})
    groups.append({"name": "rocm-vllm", "rules": vllm_alert_rules(cfg)})
    if stack is not None:
        groups.append({"name": "rocm-gpu-kubernetes", "rules": kubernetes_alert_rules(cfg, stack)})
    else:
        groups.append({"name": "rocm-docker-hosts", "rules": docker_host_alert_rules(cfg)})
    if fleet:
        groups.append({"name": "rocm-stack-declared", "rules": declared_rules(fleet)})
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


def rules_file_text(cfg: MonitoringConfig, fleet: Sequence[DeclaredHost]) -> str:
    """The groups of a Docker-hosts Prometheus as a rules file (`rule_files:` in prometheus.yml). `fleet` is
    required: a Prometheus of a stack's hosts needs its declared series (components/monitoring declared_fleet), and
    only the committed defaults file has none (no declared series: the declared-state alerts stay silent)."""
    header = (
        "# rocm-stack alert rules: the GPUs of every model (each selected by its gpu_model target label), the Docker\n"
        "# hosts' containers and filesystems, the vLLM servers.\n"
        "# Generated by `rocm-stack alerts`; edit domain/alerts.py or the stack config, not this file.\n"
    )
    return header + yaml.dump(
        {"groups": rule_groups(cfg, fleet=fleet)}, Dumper=_RulesDumper, sort_keys=False, allow_unicode=True, width=120
    )
