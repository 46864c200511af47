"""What ROCm/device-metrics-exporter really emits, read from the vendored upstream files in
tests/data/monitoring/reference (see its SOURCE.md), and a PromQL name extractor to check queries against it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import promql_parser
import yaml

REFERENCE = Path(__file__).parent / "data" / "monitoring" / "reference"

# Prometheus' own series and target labels (`up`, `job`, `instance`); `host` is added by our scrape configs
# (Docker static labels, Kubernetes relabeling from the node name).
PROMETHEUS_METRICS = {"up"}
PROMETHEUS_LABELS = {"job", "instance", "host"}


def support_matrix() -> dict[str, list[str]]:
    """Exported metric name (default, empty MetricsFieldPrefix: the field name lower-cased) -> platforms."""
    matrix = yaml.safe_load((REFERENCE / "metrics-support-matrix.yaml").read_text(encoding="utf-8"))
    return {m["name"].lower(): m["platforms"] for m in matrix["metrics"]}


def exporter_labels() -> set[str]:
    """The GPU metric labels of the exporter's example config, plus the per-die `xcc_index` of
    gpu_gfx_busy_instantaneous that the upstream GPU dashboard uses."""
    config = json.loads((REFERENCE / "config-gpu.json").read_text(encoding="utf-8"))
    dashboard = (REFERENCE / "dashboard_gpu.json").read_text(encoding="utf-8")
    assert "{{xcc_index}}" in dashboard
    return {label.lower() for label in config["GPUConfig"]["Labels"]} | {"xcc_index"}


def kube_state_metrics() -> dict[str, set[str]]:
    """kube-state-metrics metric -> its label names, read from the vendored docs tables
    (reference/ksm-*-metrics.md: rows `| kube_... | Gauge | ... | `label`=&lt;...&gt; ... | STABLE |`)."""
    metrics: dict[str, set[str]] = {}
    for path in sorted(REFERENCE.glob("ksm-*-metrics.md")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if match := re.match(r"^\|\s*(kube_[a-z_]+)\s*\|", line):
                metrics[match.group(1)] = set(re.findall(r"`([a-z_]+)`=", line))
    return metrics


def promql_names(expr: str) -> tuple[set[str], set[str]]:
    """Metric names and label names (matchers, on/ignoring, by/without) used by a PromQL expression."""
    metrics: set[str] = set()
    labels: set[str] = set()

    def visit(node: promql_parser.Expr) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            metrics.add(node.name)
            labels.update(m.name for m in node.matchers.matchers)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier and node.modifier.matching:
            labels.update(node.modifier.matching.labels)
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier:
            labels.update(node.modifier.labels)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return metrics, labels
