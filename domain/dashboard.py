"""Grafana dashboard of the GPUs: per-GPU temperature, power, utilisation, VRAM and ECC errors.

Generated rather than hand-edited so its queries stay in step with the alert rules; the committed
`monitoring/dashboards/rocm-gpus.json` (for Docker setups' Grafana provisioning) is rewritten by
`python -m domain.dashboard`, and the Kubernetes component ships the same JSON in a ConfigMap for the
Grafana sidecar. Queries follow ROCm/device-metrics-exporter grafana/dashboard_gpu.json: junction temperature and
gpu_package_power on MI3xx, edge temperature and gpu_average_package_power on MI2xx, per-die
gpu_gfx_busy_instantaneous (label xcc_index) on MI3xx and gpu_gfx_activity elsewhere. Both families' queries
are present so one dashboard serves any fleet; the series a GPU does not export simply stay empty.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from domain.alerts import EXPORTER_JOB, GPU_KEY

DASHBOARD_FILE = Path(__file__).resolve().parents[1] / "monitoring" / "dashboards" / "rocm-gpus.json"
DASHBOARD_UID = "rocm-stack-gpus"

_DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# `hostname` and `gpu_id` are labels the exporter always sets; the variables are named for people.
_SELECTOR = '{hostname=~"$host", gpu_id=~"$gpu"}'
_LEGEND = "{{hostname}} GPU {{gpu_id}}"


def _query_variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "label": label,
        "type": "query",
        "datasource": _DATASOURCE,
        "query": {"query": query, "refId": f"{name}-variable"},
        "definition": query,
        "refresh": 2,  # on time-range change: new hosts and GPUs appear without reloading
        "multi": True,
        "includeAll": True,
        "current": {"text": "All", "value": "$__all"},
        "sort": 3,  # numerically ascending, so GPU 10 follows GPU 9
    }


def _target(ref: str, expr: str, legend: str) -> dict[str, Any]:
    return {"refId": ref, "datasource": _DATASOURCE, "expr": expr, "legendFormat": legend}


def _timeseries(title: str, unit: str, targets: list[dict[str, Any]], grid: tuple[int, int, int, int],
                **limits: float) -> dict[str, Any]:
    x, y, w, h = grid
    return {
        "type": "timeseries",
        "title": title,
        "datasource": _DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit, **limits}, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "right", "calcs": ["lastNotNull", "max"],
                       "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": targets,
    }


def dashboard() -> dict[str, Any]:
    by_gpu = ", ".join(GPU_KEY)
    panels = [
        _timeseries("GPU temperature (junction on MI3xx, edge on MI2xx)", "celsius", [
            _target("A", f"gpu_junction_temperature{_SELECTOR}", f"{_LEGEND} junction"),
            _target("B", f"gpu_edge_temperature{_SELECTOR}", f"{_LEGEND} edge"),
        ], (0, 0, 12, 8)),
        _timeseries("Memory (HBM) temperature", "celsius", [
            _target("A", f"gpu_memory_temperature{_SELECTOR}", _LEGEND),
        ], (12, 0, 12, 8)),
        _timeseries("Package power", "watt", [
            _target("A", f"gpu_package_power{_SELECTOR}", _LEGEND),
            _target("B", f"gpu_average_package_power{_SELECTOR}", f"{_LEGEND} (average)"),
        ], (0, 8, 12, 8), min=0),
        _timeseries("GFX utilisation", "percent", [
            _target("A", f"avg without (xcc_index) (gpu_gfx_busy_instantaneous{_SELECTOR})", _LEGEND),
            # MI2xx only: where per-die series exist (MI3xx) they are the better measure.
            _target("B", f"gpu_gfx_activity{_SELECTOR} unless on ({by_gpu}) gpu_gfx_busy_instantaneous", _LEGEND),
        ], (12, 8, 12, 8), min=0, max=100),
        _timeseries("VRAM used", "percentunit", [
            _target("A", f"gpu_used_vram{_SELECTOR} / gpu_total_vram{_SELECTOR}", _LEGEND),
        ], (0, 16, 12, 8), min=0, max=1),
        _timeseries("ECC errors per interval", "short", [
            _target("A", f"increase(gpu_ecc_uncorrect_total{_SELECTOR}[$__rate_interval])", f"{_LEGEND} uncorrectable"),
            _target("B", f"increase(gpu_ecc_correct_total{_SELECTOR}[$__rate_interval])", f"{_LEGEND} correctable"),
        ], (12, 16, 12, 8), min=0),
        {
            "type": "stat",
            "title": "Exporter targets up",
            "datasource": _DATASOURCE,
            "gridPos": {"x": 0, "y": 24, "w": 24, "h": 4},
            "fieldConfig": {
                "defaults": {
                    "mappings": [{"type": "value", "options": {"0": {"text": "DOWN", "color": "red"},
                                                               "1": {"text": "UP", "color": "green"}}}],
                },
                "overrides": [],
            },
            "options": {"colorMode": "background", "reduceOptions": {"calcs": ["lastNotNull"]}},
            "targets": [_target("A", f'up{{job="{EXPORTER_JOB}", host=~"$host"}}', "{{host}}")],
        },
    ]
    for panel_id, panel in enumerate(panels, start=1):
        panel["id"] = panel_id
    return {
        "uid": DASHBOARD_UID,
        "title": "ROCm GPUs",
        "tags": ["rocm", "amd", "gpu"],
        "timezone": "browser",
        "schemaVersion": 39,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus"},
            _query_variable("host", "Host", "label_values(gpu_total_vram, hostname)"),
            _query_variable("gpu", "GPU", 'label_values(gpu_total_vram{hostname=~"$host"}, gpu_id)'),
        ]},
        "panels": panels,
    }


def dashboard_json_text() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DASHBOARD_FILE, help="file to write (default: the committed one)")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(dashboard_json_text(), encoding="utf-8")


if __name__ == "__main__":
    main()
