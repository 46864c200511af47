"""Grafana dashboard of the fleet (a table, one row per Docker host: GPUs declared, seen and healthy, partitions
declared and up, the age of the last GPU health report), of the GPUs (per-GPU temperature, power, utilisation, VRAM, ECC, health) and of the vLLM
servers (requests running/waiting, time to first token, KV-cache usage) and of the Docker hosts (GPUs against the
declared count, partitions running, container restarts, filesystems free), built with Grafana's
grafana-foundation-sdk (pinned in requirements.txt to the Grafana 11.6 build; its PyPI versions are
`<epoch>!<Grafana version>`, and an unpinned install picks the highest epoch, the Grafana 10.1 build).

Generated rather than hand-edited so its queries stay in step with the alert rules; the committed
`monitoring/dashboards/rocm-gpus.json` (for Docker setups' Grafana provisioning) is rewritten by
`rocm-stack dashboard --write`, and the Kubernetes component ships the same JSON in a ConfigMap for the
Grafana sidecar. GPU queries follow ROCm/device-metrics-exporter grafana/dashboard_gpu.json: junction
temperature and gpu_package_power on MI3xx, edge temperature and gpu_average_package_power on MI2xx, per-die
gpu_gfx_busy_instantaneous (label xcc_index) on MI3xx and gpu_gfx_activity elsewhere; both families' queries are
present so one dashboard serves any fleet. vLLM names are those of vLLM 0.11.2 (vllm/v1/metrics/loggers.py,
labels model_name and engine); its KV-cache gauge is `vllm:kv_cache_usage_perc` (`vllm:gpu_cache_usage_perc`
is hidden since 0.10 and removed in 0.12).
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import common, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from grafana_foundation_sdk.models.common import (
    BigValueColorMode,
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    TooltipDisplayMode,
)

from domain.alerts import (
    CADVISOR_JOB,
    DECLARED_GPUS,
    DECLARED_PARTITION,
    EXPORTER_JOB,
    GPU_KEY,
    MEMORY_FS,
    MODEL_LABEL,
    NODE_EXPORTER_JOB,
)
from schema.project import ROOT

DASHBOARD_FILE = ROOT / "monitoring" / "dashboards" / "rocm-gpus.json"
DASHBOARD_UID = "rocm-stack-gpus"

_DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# `hostname` and `gpu_id` are labels the exporter always sets, `gpu_model` the target label the alert rules
# select a model by (domain/alerts.py MODEL_LABEL); the variables are named for people.
_SELECTOR = f'{{{MODEL_LABEL}=~"$model", hostname=~"$host", gpu_id=~"$gpu"}}'
_LEGEND = "{{hostname}} GPU {{gpu_id}}"
_BY_MODEL = "{{model_name}}"


def _query(ref: str, expr: str, legend: str) -> prometheus.Dataquery:
    return prometheus.Dataquery().ref_id(ref).datasource(_DATASOURCE).expr(expr).legend_format(legend)


def _timeseries(
    title: str,
    unit: str,
    queries: list[prometheus.Dataquery],
    *,
    min_val: float | None = None,
    max_val: float | None = None,
) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .datasource(_DATASOURCE)
        .unit(unit)
        .height(8)
        .span(12)
        .legend(
            common.VizLegendOptions()
            .display_mode(LegendDisplayMode.TABLE)
            .placement(LegendPlacement.RIGHT)
            .calcs(["lastNotNull", "max"])
            .show_legend(True)
        )
        .tooltip(common.VizTooltipOptions().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING))
    )
    for query in queries:
        panel = panel.with_target(query)
    if min_val is not None:
        panel = panel.min(min_val)
    if max_val is not None:
        panel = panel.max(max_val)
    return panel


def _gpu_variable(name: str, label: str, query: str) -> QueryVariable:
    return (
        QueryVariable(name)
        .label(label)
        .datasource(_DATASOURCE)
        .query(query)
        # On time-range change: new hosts and GPUs appear without reloading.
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .multi(True)
        .include_all(True)
        .current(model.VariableOption(text="All", value="$__all"))
        # Numerically ascending, so GPU 10 follows GPU 9.
        .sort(model.VariableSort.NUMERICAL_ASC)
    )


def _zero_or_one(title: str, expr: str, legend: str, zero: str, one: str) -> stat.Panel:
    """A 0/1 gauge per series, red for 0."""
    return (
        stat.Panel()
        .title(title)
        .datasource(_DATASOURCE)
        .height(4)
        .span(12)
        .with_target(_query("A", expr, legend))
        .color_mode(BigValueColorMode.BACKGROUND)
        .reduce_options(common.ReduceDataOptions().calcs(["lastNotNull"]))
        .mappings(
            [
                model.ValueMap(
                    options={
                        "0": model.ValueMappingResult(text=zero, color="red"),
                        "1": model.ValueMappingResult(text=one, color="green"),
                    }
                )
            ]
        )
    )


# The fleet table's columns: each an instant query by host (table format), joined on `host` by Grafana's "merge"
# transformation ("combine the results from multiple queries into a single result", Grafana docs, Transform data).
_EXPORTED_GPUS = f'gpu_health{{job="{EXPORTER_JOB}", host=~"$host"}}'
_DECLARED_PARTITIONS = f'{DECLARED_PARTITION}{{host=~"$host"}}'
FLEET_COLUMNS = (
    ("GPUs declared", f'max by (host) ({DECLARED_GPUS}{{host=~"$host"}})'),
    ("GPUs seen", f"count by (host) ({_EXPORTED_GPUS})"),
    ("GPUs healthy", f"sum by (host) ({_EXPORTED_GPUS})"),
    ("Partitions declared", f"count by (host) ({_DECLARED_PARTITIONS})"),
    (
        "Partitions up",
        f'count by (host) ({_DECLARED_PARTITIONS} and on (host, name) container_last_seen{{job="{CADVISOR_JOB}"}})\n'
        f"or 0 * count by (host) ({_DECLARED_PARTITIONS})",
    ),
    # The exporter's GPU health check (gpu_health, per GPU): how long ago its last report was scraped.
    ("Last GPU health report (s ago)", f"time() - max by (host) (timestamp({_EXPORTED_GPUS}))"),
)


FLEET_ROW, FLEET_TABLE = "Fleet", "Fleet: one row per host"
# Panels placed above the ones that existed before them (their ids come after).
ADDED_ON_TOP = (FLEET_ROW, FLEET_TABLE)


def _fleet_table() -> table.Panel:
    """One row per Docker host: GPUs declared / seen / healthy, partitions declared / up, the last health report."""
    panel = table.Panel().title(FLEET_TABLE).datasource(_DATASOURCE).height(7).span(24)
    refs = [chr(ord("A") + k) for k in range(len(FLEET_COLUMNS))]
    for ref, (_, expr) in zip(refs, FLEET_COLUMNS):
        panel = panel.with_target(_query(ref, expr, "").instant().format(PromQueryFormat.TABLE))
    return panel.transformations(
        [
            model.DataTransformerConfig(id_val="merge", options={}),
            model.DataTransformerConfig(
                id_val="organize",
                options={
                    "excludeByName": {"Time": True},
                    "renameByName": {f"Value #{ref}": name for ref, (name, _) in zip(refs, FLEET_COLUMNS)},
                },
            ),
        ]
    )


def dashboard_builder() -> Dashboard:
    by_gpu = ", ".join(GPU_KEY)
    return (
        Dashboard("ROCm GPUs")
        .uid(DASHBOARD_UID)
        .tags(["rocm", "amd", "gpu", "vllm"])
        .timezone("browser")
        .editable()
        .refresh("30s")
        .time("now-6h", "now")
        .with_variable(DatasourceVariable("datasource").label("Data source").type("prometheus"))
        # A mixed fleet: one model at a time. "All" is `.*`, which also keeps GPUs without a model label.
        .with_variable(
            _gpu_variable("model", "GPU model", f"label_values(gpu_total_vram, {MODEL_LABEL})")
            .all_value(".*")
            .sort(model.VariableSort.ALPHABETICAL_ASC)
        )
        .with_variable(
            _gpu_variable("host", "Host", f'label_values(gpu_total_vram{{{MODEL_LABEL}=~"$model"}}, hostname)')
        )
        .with_variable(_gpu_variable("gpu", "GPU", 'label_values(gpu_total_vram{hostname=~"$host"}, gpu_id)'))
        # The whole fleet on one screen: what each host declares against what it reports.
        .with_row(Row(FLEET_ROW))
        .with_panel(_fleet_table())
        .with_row(Row("GPUs"))
        .with_panel(
            _timeseries(
                "GPU temperature (junction on MI3xx, edge on MI2xx)",
                "celsius",
                [
                    _query("A", f"gpu_junction_temperature{_SELECTOR}", f"{_LEGEND} junction"),
                    _query("B", f"gpu_edge_temperature{_SELECTOR}", f"{_LEGEND} edge"),
                ],
            )
        )
        .with_panel(
            _timeseries(
                "Memory (HBM) temperature",
                "celsius",
                [
                    _query("A", f"gpu_memory_temperature{_SELECTOR}", _LEGEND),
                ],
            )
        )
        .with_panel(
            _timeseries(
                "Package power",
                "watt",
                [
                    _query("A", f"gpu_package_power{_SELECTOR}", _LEGEND),
                    _query("B", f"gpu_average_package_power{_SELECTOR}", f"{_LEGEND} (average)"),
                ],
                min_val=0,
            )
        )
        .with_panel(
            _timeseries(
                "GFX utilisation",
                "percent",
                [
                    _query("A", f"avg without (xcc_index) (gpu_gfx_busy_instantaneous{_SELECTOR})", _LEGEND),
                    # MI2xx only: where per-die series exist (MI3xx) they are the better measure.
                    _query(
                        "B", f"gpu_gfx_activity{_SELECTOR} unless on ({by_gpu}) gpu_gfx_busy_instantaneous", _LEGEND
                    ),
                ],
                min_val=0,
                max_val=100,
            )
        )
        .with_panel(
            _timeseries(
                "VRAM used",
                "percentunit",
                [
                    _query("A", f"gpu_used_vram{_SELECTOR} / gpu_total_vram{_SELECTOR}", _LEGEND),
                ],
                min_val=0,
                max_val=1,
            )
        )
        .with_panel(
            _timeseries(
                "ECC errors per interval",
                "short",
                [
                    _query(
                        "A",
                        f"increase(gpu_ecc_uncorrect_total{_SELECTOR}[$__rate_interval])",
                        f"{_LEGEND} uncorrectable",
                    ),
                    _query(
                        "B", f"increase(gpu_ecc_correct_total{_SELECTOR}[$__rate_interval])", f"{_LEGEND} correctable"
                    ),
                ],
                min_val=0,
            )
        )
        # 1 healthy, 0 unhealthy (the exporter's gpu_health), the GpuUnhealthy alert's input.
        .with_panel(_zero_or_one("GPU health", f"gpu_health{_SELECTOR}", _LEGEND, "UNHEALTHY", "healthy"))
        .with_panel(
            _zero_or_one("Exporter targets up", f'up{{job="{EXPORTER_JOB}", host=~"$host"}}', "{{host}}", "DOWN", "UP")
        )
        # What the Docker-host alerts read: GPUs against the declared count, partitions, restarts, disks.
        .with_row(Row("Docker hosts"))
        .with_panel(
            _timeseries(
                "GPUs reported / declared",
                "short",
                [
                    _query(
                        "A", f'count by (host) (gpu_health{{job="{EXPORTER_JOB}", host=~"$host"}})', "{{host}} reported"
                    ),
                    _query("B", f'{DECLARED_GPUS}{{host=~"$host"}}', "{{host}} declared"),
                ],
                min_val=0,
            )
        )
        .with_panel(
            _zero_or_one(
                "Partitions running",
                # 1 for a declared partition cAdvisor reports, 0 for one it does not (PartitionStopped's input).
                f'count by (host, name, workload) ({DECLARED_PARTITION}{{host=~"$host"}} '
                f'and on (host, name) container_last_seen{{job="{CADVISOR_JOB}"}})\n'
                f'or 0 * {DECLARED_PARTITION}{{host=~"$host"}}',
                "{{host}}/{{name}} ({{workload}})",
                "STOPPED",
                "running",
            )
        )
        .with_panel(
            _timeseries(
                "Container restarts (15 min)",
                "short",
                [
                    _query(
                        "A",
                        f'changes(container_start_time_seconds{{job="{CADVISOR_JOB}", host=~"$host", name!=""}}[15m])',
                        "{{host}}/{{name}}",
                    )
                ],
                min_val=0,
            )
        )
        .with_panel(
            _timeseries(
                "Filesystem free",
                "percentunit",
                [
                    _query(
                        "A",
                        f'node_filesystem_avail_bytes{{job="{NODE_EXPORTER_JOB}", host=~"$host", {MEMORY_FS}}}\n'
                        f'/ node_filesystem_size_bytes{{job="{NODE_EXPORTER_JOB}", host=~"$host", {MEMORY_FS}}}',
                        "{{host}} {{mountpoint}}",
                    )
                ],
                min_val=0,
                max_val=1,
            )
        )
        .with_row(Row("vLLM"))
        .with_panel(
            _timeseries(
                "Requests running / waiting",
                "short",
                [
                    _query("A", "sum by (model_name) (vllm:num_requests_running)", f"{_BY_MODEL} running"),
                    _query("B", "sum by (model_name) (vllm:num_requests_waiting)", f"{_BY_MODEL} waiting"),
                ],
                min_val=0,
            )
        )
        .with_panel(
            _timeseries(
                "Time to first token (p50, p95)",
                "s",
                [
                    _query(
                        "A",
                        "histogram_quantile(0.5, sum by (le, model_name) "
                        "(rate(vllm:time_to_first_token_seconds_bucket[$__rate_interval])))",
                        f"{_BY_MODEL} p50",
                    ),
                    _query(
                        "B",
                        "histogram_quantile(0.95, sum by (le, model_name) "
                        "(rate(vllm:time_to_first_token_seconds_bucket[$__rate_interval])))",
                        f"{_BY_MODEL} p95",
                    ),
                ],
                min_val=0,
            )
        )
        .with_panel(
            _timeseries(
                "KV-cache usage",
                "percentunit",
                [
                    # Per replica (engine label within a pod, pod from the scrape): the fullest one matters.
                    _query("A", "max by (model_name) (vllm:kv_cache_usage_perc)", f"{_BY_MODEL} fullest replica"),
                ],
                min_val=0,
                max_val=1,
            )
        )
    )


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard JSON model (what the SDK's encoder writes)."""
    return json.loads(dashboard_json_text())


def dashboard_json_text() -> str:
    board = dashboard_builder().build()
    # Stable panel ids (Grafana links and the sidecar's re-imports address panels by id): in dashboard order, except
    # that panels added above older ones take the next free ids, so no panel's id changes.
    panels = board.panels or []
    later = [p for p in panels if getattr(p, "title", None) in ADDED_ON_TOP]
    for panel_id, panel in enumerate([*(p for p in panels if p not in later), *later], start=1):
        panel.id_val = panel_id
    return json.dumps(board, cls=JSONEncoder, indent=2, ensure_ascii=False) + "\n"
