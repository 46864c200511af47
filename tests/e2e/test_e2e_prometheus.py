"""The monitoring proven on a real Prometheus server (Debian's `prometheus`, which `.ci/run` installs): the exact
generated scrape configuration and rules of a mixed MI300X + MI250 Docker fleet with a training and a vLLM partition
per host, only the targets rewritten to loopback stand-ins, the scrape/evaluation intervals and the rules' `for:`
scaled down (the rule expressions byte-identical). One server for every scenario; the stand-ins switch content.

Stand-in formats (what each serves, and where its shape comes from):
- device-metrics-exporter: its default field names lower-cased (docs/configuration/metrics-support-matrix.yaml, MI3xx
  vs MI2xx rows) with the labels of example/config-gpu.json `GPUConfig.Labels` (ROCm/device-metrics-exporter
  @ afd0fe81, tests/data/monitoring/reference), per-die gpu_gfx_busy_instantaneous{xcc_index} on MI3xx as
  grafana/dashboard_gpu.json reads it.
- node-exporter: the real `prometheus-node-exporter` binary's own /metrics, captured at the start of the test; the
  disk-full scenario rewrites its node_filesystem_avail_bytes values.
- cAdvisor: google/cadvisor v0.60.5 lib/metrics/prometheus.go (container_last_seen, container_start_time_seconds,
  container_health_state, labels id/image/name from DefaultContainerLabels).
- vLLM 0.11.2: vllm/v1/metrics/loggers.py (tests/data/monitoring/reference/vllm-0.11.2-metrics-loggers.py.txt):
  gauges vllm:num_requests_running/waiting, vllm:kv_cache_usage_perc, histogram
  vllm:time_to_first_token_seconds, labels model_name and engine; served only with the host's scrape token, as the
  proxy in front of a keyed vLLM on Docker does (tests/test_vllm_proxy.py runs that proxy).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring import declared_fleet, prometheus_scrape_config, vllm_metrics_token_file
from components.workloads.proxy import metrics_token
from domain import alerts, dashboard
from schema import load

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (apt-get install prometheus)")

P = "rocm-stack:"
KEY = "k3y-of-the-e2e"
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
STACK = {
    P + "environment": "dev",
    P + "hosts": [
        {
            "name": "mi300x-host",
            "docker": {"host": "ssh://deploy@mi300x-host.example.internal"},
            "gpus": 8,
            "gpuModel": "MI300X",
            "gpuAccess": "renderNodes",
            "renderNodes": "hosts/mi300x-8gpu.render-nodes.json",
            "containers": [{"name": "train-a", "gpus": [0, 1, 2, 3]}, {"name": "serve-b", "gpus": [4, 5, 6, 7]}],
        },
        {
            "name": "mi250-host",
            "docker": {"host": "ssh://deploy@mi250-host.example.internal"},
            "gpus": 4,
            "gpuModel": "MI250",
            "gpuAccess": "all",
            "containers": [{"name": "train-a", "gpus": [0, 1]}, {"name": "serve-b", "gpus": [2, 3]}],
        },
    ],
    P + "training": [{"name": "pretrain", "docker": {"partitions": ["mi300x-host/train-a", "mi250-host/train-a"]}}],
    P + "inference": [
        {"name": "chat", "model": MODEL, "docker": {"partitions": ["mi300x-host/serve-b", "mi250-host/serve-b"]}}
    ],
    P + "vllmApiKey": KEY,
}
SCALED_FOR = "1s"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Fleet:
    """What the stand-ins report; the scenarios change it."""

    def __init__(self, node_text: str) -> None:
        self.gpus = {"mi300x-host": 8, "mi250-host": 4}
        self.hot: tuple[str, int] | None = None
        self.ecc_uncorrectable = 0
        self.exited: set[tuple[str, str]] = set()
        self.unhealthy: set[tuple[str, str]] = set()
        self.restarting: set[tuple[str, str]] = set()
        self.full_disk: set[str] = set()
        self.queue: dict[str, int] = {}
        self.scrapes = 0
        self.started = int(time.time()) - 3600
        self.node_text = node_text
        self.lock = threading.Lock()

    def exporter(self, host: str, model: str) -> str:
        lines = []
        for gpu in range(self.gpus[host]):
            labels = (
                f'gpu_id="{gpu}",gpu_partition_id="0",hostname="{host}",pod="",namespace="",container="",'
                f'job_id="",job_user="",job_partition="",serial_number="SN{gpu}",card_model="{model}",'
                f'gpu_compute_partition_type="spx",gpu_memory_partition_type="nps1"'
            )
            hot = 105 if self.hot == (host, gpu) else 60
            ecc = self.ecc_uncorrectable if (host, gpu) == ("mi300x-host", 1) else 0
            values: dict[str, float] = {
                "gpu_memory_temperature": 50,
                "gpu_used_vram": 40000,
                "gpu_total_vram": 196592 if model == "MI300X" else 65520,
                "gpu_ecc_correct_total": 0,
                "gpu_ecc_uncorrect_total": ecc,
                "gpu_health": 1,
            }
            if model == "MI300X":
                values |= {"gpu_junction_temperature": hot, "gpu_package_power": 400}
                lines += [f'gpu_gfx_busy_instantaneous{{{labels},xcc_index="{x}"}} 80' for x in range(8)]
            else:
                values |= {"gpu_edge_temperature": hot, "gpu_average_package_power": 300, "gpu_gfx_activity": 80}
            lines += [f"{name}{{{labels}}} {value}" for name, value in values.items()]
        return "\n".join(lines) + "\n"

    def cadvisor(self, host: str) -> str:
        now = time.time()
        lines = []
        for n, name in enumerate(("amd-device-metrics-exporter", "train-a", "serve-b")):
            if (host, name) in self.exited:
                continue
            labels = f'id="/system.slice/docker-{n}{host}.scope",image="img-{name}",name="{name}"'
            started = self.started + (self.scrapes if (host, name) in self.restarting else 0)
            health = -1 if name != "serve-b" else 0 if (host, name) in self.unhealthy else 1
            lines += [
                f"container_last_seen{{{labels}}} {now:.0f}",
                f"container_start_time_seconds{{{labels}}} {started}",
                f"container_health_state{{{labels}}} {health}",
            ]
        return "\n".join(lines) + "\n"

    def node(self, host: str) -> str:
        if host not in self.full_disk:
            return self.node_text
        return re.sub(r"^(node_filesystem_avail_bytes\{.*\}) \S+$", r"\1 1", self.node_text, flags=re.M)

    def vllm(self, host: str) -> str:
        labels = f'engine="0",model_name="{MODEL}"'
        waiting = self.queue.get(host, 0) + (self.scrapes if host in self.queue else 0)
        requests = 100 * self.scrapes
        buckets = "".join(
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} {requests}\n'
            for le in ("0.1", "0.5", "1.0", "+Inf")
        )
        return (
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{{{labels}}} 2.0\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{{{labels}}} {waiting}.0\n"
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f"vllm:kv_cache_usage_perc{{{labels}}} 0.25\n"
            "# TYPE vllm:time_to_first_token_seconds histogram\n"
            f"{buckets}"
            f"vllm:time_to_first_token_seconds_count{{{labels}}} {requests}\n"
            f"vllm:time_to_first_token_seconds_sum{{{labels}}} {requests * 0.05}\n"
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    render: Callable[[], str]
    token: str | None


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if self.server.token is not None and self.headers.get("Authorization") != f"Bearer {self.server.token}":
            self.send_response(401)
            self.end_headers()
            return
        body = self.server.render().encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except BrokenPipeError:  # Prometheus gave up on a scrape while the test stopped
            pass

    def log_message(self, *args: object) -> None:
        pass


def _node_exporter_text(tmp: Path) -> str:
    """One scrape of the real node-exporter on loopback."""
    if NODE_EXPORTER is None:
        pytest.fail("prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)")
    port = _free_port()
    process = subprocess.Popen(
        [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(5)


class Prometheus:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}/api/v1/"

    def get(self, path: str, **params: str) -> Any:
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        reply = json.loads(urllib.request.urlopen(url, timeout=5).read())
        assert reply["status"] == "success", reply
        return reply["data"]

    def alerts(self) -> list[dict[str, Any]]:
        return list(self.get("alerts")["alerts"])

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: not within {timeout} s; alerts: {self.alerts()}")
            time.sleep(0.2)


@contextlib.contextmanager
def running_prometheus(tmp: Path, settings: dict[str, Any]) -> Iterator[tuple[subprocess.Popen[bytes], Prometheus]]:
    """The real Prometheus on a free loopback port with `settings` as its configuration, once it answers."""
    (tmp / "prometheus.yml").write_text(yaml.safe_dump(settings, sort_keys=False))
    port = _free_port()
    assert PROMETHEUS is not None
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(tmp / "prometheus.log").open("w"),
    )
    prometheus = Prometheus(port)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                prometheus.get("status/buildinfo")
                break
            except OSError:
                assert process.poll() is None, (tmp / "prometheus.log").read_text()
                assert time.monotonic() < deadline, "prometheus did not start"
                time.sleep(0.1)
        yield process, prometheus
    finally:
        process.terminate()
        process.wait(10)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Prometheus, Fleet, dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("prometheus")
    stack = load("dev", STACK, {P + "vllmApiKey"}, place_unlocked=True)
    fleet = declared_fleet(stack)
    generated = prometheus_scrape_config(stack.monitoring, fleet, keyed=True)
    rules_text = alerts.rules_file_text(stack.monitoring, fleet)
    state = Fleet(_node_exporter_text(tmp))
    models = {h.name: h.gpu_model for h in fleet}
    servers: list[_Server] = []

    def stand_in(job: str, labels: dict[str, str]) -> str:
        host = labels["host"]
        # A keyed host's vLLM job is `vllm-<host>` (relabelled to `vllm`), each with that host's token.
        job = alerts.VLLM_JOB if job == f"{alerts.VLLM_JOB}-{host}" else job
        render: Callable[[], str] = {
            alerts.EXPORTER_JOB: lambda: state.exporter(host, models[host]),
            alerts.NODE_EXPORTER_JOB: lambda: state.node(host),
            alerts.CADVISOR_JOB: lambda: state.cadvisor(host),
            alerts.VLLM_JOB: lambda: state.vllm(host),
        }[job]
        server = _Server(("127.0.0.1", 0), _Handler)
        server.render, server.token = render, metrics_token(KEY, host) if job == alerts.VLLM_JOB else None
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"127.0.0.1:{server.server_port}"

    # The test configuration: the generated jobs with loopback targets, 1 s scrapes, the token file here.
    config = json.loads(json.dumps(generated))
    for job in config["scrape_configs"]:
        job["scrape_interval"] = "1s"
        for static in job["static_configs"]:
            static["targets"] = [stand_in(job["job_name"], static["labels"])]
        if "authorization" in job:
            host = job["job_name"].removeprefix(f"{alerts.VLLM_JOB}-")
            assert job["authorization"]["credentials_file"] == vllm_metrics_token_file(host)
            (tmp / f"token-{host}").write_text(metrics_token(KEY, host))
            job["authorization"]["credentials_file"] = str(tmp / f"token-{host}")
    rules = yaml.safe_load(rules_text)
    for group in rules["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = SCALED_FOR
    (tmp / "rules.yml").write_text(yaml.safe_dump(rules, sort_keys=False))
    settings = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(tmp / "rules.yml")],
        **config,
    }
    try:
        with running_prometheus(tmp, settings) as (process, prometheus):

            def scraped() -> None:
                while process.poll() is None:
                    with state.lock:
                        state.scrapes += 1
                    time.sleep(1)

            threading.Thread(target=scraped, daemon=True).start()
            yield prometheus, state, {"generated": generated, "rules": rules_text, "loaded": rules, "fleet": fleet}
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def test_the_test_rules_differ_from_the_generated_ones_in_for_only(server: Any) -> None:
    _, _, made = server
    generated = yaml.safe_load(made["rules"])["groups"]
    loaded = made["loaded"]["groups"]
    assert [[r.get("expr") for r in g["rules"]] for g in loaded] == [
        [r.get("expr") for r in g["rules"]] for g in generated
    ]
    strip = [[{k: v for k, v in r.items() if k != "for"} for r in g["rules"]] for g in generated]
    assert [[{k: v for k, v in r.items() if k != "for"} for r in g["rules"]] for g in loaded] == strip


def _firing(prometheus: Prometheus) -> list[dict[str, Any]]:
    return prometheus.alerts()


def test_targets_up_labelled_and_nothing_fires_while_healthy(server: Any) -> None:
    prometheus, _, made = server

    def all_up() -> bool:
        targets = prometheus.get("targets")["activeTargets"]
        return len(targets) == sum(len(j["static_configs"]) for j in made["generated"]["scrape_configs"]) and all(
            t["health"] == "up" for t in targets
        )

    prometheus.wait("every target up", all_up)
    targets = prometheus.get("targets")["activeTargets"]
    assert {(t["labels"]["job"], t["labels"]["host"], t["labels"]["gpu_model"]) for t in targets} == {
        (job, host, model)
        for job in (alerts.EXPORTER_JOB, alerts.NODE_EXPORTER_JOB, alerts.CADVISOR_JOB, alerts.VLLM_JOB)
        for host, model in (("mi300x-host", "MI300X"), ("mi250-host", "MI250"))
    }
    # The GPU series carry their host's model (the alert rules' selector) and host.
    series = prometheus.get("query", query="count by (host, gpu_model) (gpu_health)")["result"]
    assert {(s["metric"]["host"], s["metric"]["gpu_model"], s["value"][1]) for s in series} == {
        ("mi300x-host", "MI300X", "8"),
        ("mi250-host", "MI250", "4"),
    }
    # The declared series are recorded, and a few evaluations later nothing is pending or firing.
    prometheus.wait(
        "declared series recorded",
        lambda: len(prometheus.get("query", query=alerts.DECLARED_PARTITION)["result"]) == 4,
    )
    time.sleep(4)
    assert _firing(prometheus) == []


def _alert_active(prometheus: Prometheus, alert: str, labels: dict[str, str]) -> Callable[[], bool]:
    def check() -> bool:
        return any(
            a["labels"]["alertname"] == alert
            and a["state"] in ("pending", "firing")
            and all(a["labels"].get(k) == v for k, v in labels.items())
            for a in prometheus.alerts()
        )

    return check


SCENARIOS: list[tuple[str, Callable[[Fleet], None], str, dict[str, str]]] = [
    ("GPU gone", lambda f: f.gpus.update({"mi300x-host": 7}), "GpuCountBelowDeclared", {"host": "mi300x-host"}),
    ("temperature", lambda f: setattr(f, "hot", ("mi250-host", 2)), "GpuEdgeTemperatureHigh", {"gpu_id": "2"}),
    ("ECC", lambda f: setattr(f, "ecc_uncorrectable", 3), "GpuEccUncorrectableErrors", {"gpu_id": "1"}),
    (
        "container exited",
        lambda f: f.exited.add(("mi250-host", "train-a")),
        "PartitionStopped",
        {"host": "mi250-host", "name": "train-a", "workload": "training"},
    ),
    (
        "container restarting",
        lambda f: f.restarting.add(("mi300x-host", "train-a")),
        "ContainerRestarting",
        {"host": "mi300x-host", "name": "train-a"},
    ),
    (
        "container unhealthy",
        lambda f: f.unhealthy.add(("mi300x-host", "serve-b")),
        "ContainerUnhealthy",
        {"host": "mi300x-host", "name": "serve-b"},
    ),
    ("disk full", lambda f: f.full_disk.add("mi300x-host"), "FilesystemNearlyFull", {"host": "mi300x-host"}),
    ("vLLM queue", lambda f: f.queue.update({"mi250-host": 20}), "VllmQueueGrowing", {"host": "mi250-host"}),
]


def test_each_fault_raises_its_alert(server: Any) -> None:
    prometheus, state, _ = server
    for what, fault, alert, labels in SCENARIOS:
        with state.lock:
            fault(state)
        prometheus.wait(f"{what}: {alert}", _alert_active(prometheus, alert, labels))
    # The description's query template works on the server: the declared count is read back.
    (gone,) = [a for a in prometheus.alerts() if a["labels"]["alertname"] == "GpuCountBelowDeclared"]
    assert gone["annotations"]["description"].startswith("mi300x-host reports 7 GPUs, its config declares 8:")


def test_every_dashboard_panel_query_returns_series_for_the_fleet(server: Any) -> None:
    prometheus, _, _ = server
    variables = {"$model": ".*", "$host": ".*", "$gpu": ".*", "$__rate_interval": "30s"}
    queries = [
        (panel["title"], target["expr"])
        for panel in dashboard.dashboard()["panels"]
        for target in panel.get("targets", [])
    ]
    assert len(queries) >= 12
    empty = []
    for title, expr in queries:
        for name, value in variables.items():
            expr = expr.replace(name, value)
        if not prometheus.get("query", query=expr)["result"]:
            empty.append((title, expr))
    assert empty == []


def test_the_fleet_table_shows_each_host_declared_against_seen(server: Any) -> None:
    """The dashboard's fleet row (issue 39): each column's query on the real server, joined on `host` as Grafana's
    merge transformation joins the panel's table frames. A GPU gone and a stopped partition show in their host's row."""
    prometheus, state, _ = server
    with state.lock:
        state.gpus["mi300x-host"] = 7
        state.exited.add(("mi250-host", "train-a"))

    def table() -> dict[str, dict[str, float]]:
        rows: dict[str, dict[str, float]] = {}
        for name, expr in dashboard.FLEET_COLUMNS:
            for series in prometheus.get("query", query=expr.replace("$host", ".*"))["result"]:
                assert set(series["metric"]) == {"host"}, series  # one key column to join on
                rows.setdefault(series["metric"]["host"], {})[name] = float(series["value"][1])
        return rows

    expected = {
        "mi300x-host": {
            "GPUs declared": 8,
            "GPUs seen": 7,
            "GPUs healthy": 7,
            "Partitions declared": 2,
            "Partitions up": 2,
        },
        "mi250-host": {
            "GPUs declared": 4,
            "GPUs seen": 4,
            "GPUs healthy": 4,
            "Partitions declared": 2,
            "Partitions up": 1,
        },
    }
    age = "Last GPU health report (s ago)"
    prometheus.wait(
        "the fleet table shows the faults",
        lambda: {h: {k: v for k, v in r.items() if k != age} for h, r in table().items()} == expected,
    )
    # Scraped every second here: the last report is seconds old (the default 30 s interval shows up to about 30).
    assert all(0 <= row[age] < 10 for row in table().values()), table()
