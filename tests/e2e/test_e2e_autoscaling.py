"""The autoscaler's query proven on a real Prometheus server (Debian's `prometheus`, as in test_e2e_prometheus.py):
stand-in vLLM pods serve vLLM 0.11.2's exposition of `vllm:num_requests_waiting` with queues the test sets, Prometheus
scrapes them with the labels the cluster's scrape gives them, and the EXACT query and threshold of the ScaledObject
the prod stack declares are sent the way KEDA's prometheus scaler sends them. Its answer is turned into replicas by
the HPA's rule for an AverageValue external metric, through a burst and its decay.

The labels: kube-prometheus-stack's Prometheus (the Prometheus Operator) scrapes the workload's Service through the
stack's ServiceMonitor `rocm-vllm` and labels every target with `namespace` (__meta_kubernetes_namespace), `service`
(__meta_kubernetes_service_name), `pod`, `container` (prometheus-operator pkg/prometheus/promcfg.go L2134-2149
@ 6adcebc5), `job` (the Service's name, which the ServiceMonitor's relabeling replaces with `vllm`) and `endpoint`
(the port's name, L2196-2200); the stand-ins carry the same as static labels. vLLM's own labels are model_name and
engine (one series per data-parallel engine: vllm/v1/metrics/loggers.py of 0.11.2, tests/data/monitoring/reference).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from components.workloads.autoscaling import DRAIN_SETTLE_SECONDS, QUEUE_METRIC
from conftest import stack_file
from e2e.test_e2e_prometheus import PROMETHEUS, _free_port, _Handler, _Server, running_prometheus
from tools.synth import manifest_of, synthesize

BUSYBOX = shutil.which("busybox")
pytestmark = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus is not installed (apt-get install prometheus)")

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
# The HPA's default tolerance (kube-controller-manager --horizontal-pod-autoscaler-tolerance 0.1).
TOLERANCE = 0.1


def exposition(engines: dict[str, tuple[int, int]]) -> str:
    """vLLM 0.11.2's /metrics for the gauges read here: engine -> (running, waiting). prometheus_client writes HELP
    (the gauge's documentation) and TYPE before the samples, floats with one decimal."""
    out = []
    for name, doc, index in (
        ("vllm:num_requests_running", "Number of requests in model execution batches.", 0),
        ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 1),
    ):
        out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge"]
        out += [f'{name}{{engine="{e}",model_name="{MODEL}"}} {float(q[index])}' for e, q in engines.items()]
    return "\n".join(out) + "\n"


@dataclass
class Pod:
    """One stand-in replica: its engines' (running, waiting)."""

    namespace: str
    service: str
    name: str
    engines: dict[str, tuple[int, int]] = field(default_factory=lambda: {"0": (0, 0)})
    server: _Server | None = None

    def set(self, *waiting: int) -> None:
        self.engines = {str(i): (2 if w else 0, w) for i, w in enumerate(waiting)}


@dataclass
class Scaler:
    """What the ScaledObject says: its query, threshold and replica bounds."""

    query: str
    threshold: float
    least: int
    most: int


def keda_value(base: str, query: str) -> float:
    """The value KEDA's prometheus scaler acts on, requested and read as it does (pkg/scalers/prometheus_scaler.go
    ExecutePromQuery @ v2.20.2): GET <serverAddress>/api/v1/query?query=<url.QueryEscape>&time=<now, RFC 3339>, one
    element or none (none is an error with ignoreNullValues false), the sample's value parsed as a float."""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    url = f"{base}/api/v1/query?query={urllib.parse.quote_plus(query)}&time={now}"
    reply = json.loads(urllib.request.urlopen(url, timeout=5).read())
    result = reply["data"]["result"]
    if not result:
        raise LookupError("the result is empty: KEDA reports an error and the HPA keeps its count")
    assert len(result) == 1, f"KEDA refuses several elements: {result}"
    return float(result[0]["value"][1])


def desired(current: int, value: float, scaler: Scaler) -> int:
    """The HPA's count for an External metric with an AverageValue target (kubernetes pkg/controller/podautoscaler/
    replica_calculator.go GetExternalPerPodMetricReplicas: ratio = value / (target * current); outside the
    tolerance, ceil(value / target)), within minReplicas..maxReplicas (horizontal.go normalizeDesiredReplicas);
    kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details: desiredReplicas =
    ceil[currentReplicas * (currentMetricValue / desiredMetricValue)], the current value being value / current."""
    ratio = value / (scaler.threshold * current)
    count = current if abs(1.0 - ratio) <= TOLERANCE else math.ceil(value / scaler.threshold)
    return max(scaler.least, min(scaler.most, count))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Scaler, dict[str, Pod]]]:
    """The prod stack's ScaledObject, and a Prometheus scraping stand-ins of its pods and of decoys that the query
    must leave out: another workload in the namespace, and a workload of the same name in another namespace."""
    plan = synthesize("prod", stack_file("prod"))
    [scaled] = [manifest_of(r) for r in plan.of_type("kubernetes:keda.sh/v1alpha1:ScaledObject")]
    [trigger] = scaled["spec"]["triggers"]
    scaler = Scaler(
        query=trigger["metadata"]["query"],
        threshold=float(trigger["metadata"]["threshold"]),
        least=scaled["spec"]["minReplicaCount"],
        most=scaled["spec"]["maxReplicaCount"],
    )
    service = manifest_of(plan.get("kubernetes:core/v1:Service", "llama-service"))["metadata"]
    namespace, name = service["namespace"], service["name"]
    pods = {f"{name}-{i}": Pod(namespace, name, f"{name}-7c9d5-{i}") for i in range(scaler.most)} | {
        "other": Pod(namespace, "mistral", "mistral-5f6b7-0"),
        "elsewhere": Pod("default", name, f"{name}-6a8e4-0"),
    }
    tmp = tmp_path_factory.mktemp("autoscaling")
    targets = []
    for pod in pods.values():
        server = _Server(("127.0.0.1", 0), _Handler)
        server.render, server.token = (lambda p=pod: exposition(p.engines)), None
        threading.Thread(target=server.serve_forever, daemon=True).start()
        pod.server = server
        labels = {
            "namespace": pod.namespace,
            "service": pod.service,
            "pod": pod.name,
            "container": "proxy",
            "endpoint": "http",
            "job": "vllm",
        }
        targets.append({"targets": [f"127.0.0.1:{server.server_port}"], "labels": labels})
    settings = {
        "global": {"scrape_interval": "1s"},
        "scrape_configs": [{"job_name": "vllm", "static_configs": targets}],
    }
    try:
        with running_prometheus(tmp, settings) as (_, prometheus):
            yield prometheus.base.removesuffix("/api/v1/"), scaler, pods
    finally:
        for pod in pods.values():
            assert pod.server is not None
            pod.server.shutdown()
            pod.server.server_close()


def settled(base: str, scaler: Scaler, expected: float, timeout: float = 10) -> float:
    """KEDA's value once Prometheus has scraped what the stand-ins now serve."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = keda_value(base, scaler.query)
            if value == expected:
                return value
        except LookupError:
            pass
        assert time.monotonic() < deadline, f"{scaler.query} never returned {expected}"
        time.sleep(0.2)


def test_no_series_is_an_error_that_holds_the_count_not_a_zero(cluster: Any) -> None:
    """ignoreNullValues false: a query over no scraped replica (here: a workload nobody scrapes) returns no element,
    which KEDA reports as an error; the HPA then keeps its count instead of reading 0 and scaling down."""
    base, scaler, _ = cluster
    with pytest.raises(LookupError, match="empty"):
        keda_value(base, scaler.query.replace('service="llama"', 'service="nobody"'))


def test_the_scaled_objects_query_returns_the_workloads_queue_and_drives_a_burst_and_its_decay(cluster: Any) -> None:
    base, scaler, pods = cluster
    assert scaler.query == f'sum({QUEUE_METRIC}{{namespace="ml",service="llama"}})'
    serving = [pods[f"llama-{i}"] for i in range(scaler.most)]
    # The decoys are loaded throughout: the query must not see them.
    pods["other"].set(50)
    pods["elsewhere"].set(40)
    for pod in serving:
        pod.set(0)

    # Idle at minReplicas (2): nothing waits.
    replicas = scaler.least
    assert settled(base, scaler, 0.0) == 0.0
    assert desired(replicas, 0.0, scaler) == 2

    # A burst: 23 requests wait on the two replicas, one of them data-parallel (two engines, summed).
    serving[0].set(9, 5)
    serving[1].set(9)
    value = settled(base, scaler, 23.0)
    replicas = desired(replicas, value, scaler)
    assert replicas == 4  # ceil(23 / 5) = 5, capped at maxReplicas

    # The two new replicas take requests; 15 wait in all: ratio 15 / (5 x 4) = 0.75, outside the tolerance, so the
    # HPA recommends ceil(15 / 5) = 3; its scale-down stabilization window (300 s) keeps 4 while that lasts.
    serving[0].set(4, 2)
    serving[1].set(4)
    serving[2].set(3)
    serving[3].set(2)
    assert desired(4, settled(base, scaler, 15.0), scaler) == 3

    # Near the target: 19 wait on 4 replicas, ratio 0.95 within the tolerance: no change at all.
    serving[3].set(6)
    assert desired(4, settled(base, scaler, 19.0), scaler) == 4

    # The decay: the queue drains; the HPA asks for minReplicas. After the window it removes one pod per minute
    # (the Pods policy): 4 -> 3 at 300 s, 3 -> 2 at 360 s after the queue emptied (docs/workloads.md).
    for pod in serving:
        pod.set(0)
    assert desired(4, settled(base, scaler, 0.0), scaler) == scaler.least == 2


def pre_stop(plan: Any, container: str) -> list[str]:
    deployment = manifest_of(plan.get("kubernetes:apps/v1:Deployment", "llama"))
    [found] = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == container]
    return list(found["lifecycle"]["preStop"]["exec"]["command"])


def test_a_stopping_replica_finishes_its_requests_before_vllm_gets_sigterm(tmp_path: Path) -> None:
    """The vLLM container's exact preStop hook, run against a stand-in vLLM on the pod's port: it waits while a
    request runs or waits (vLLM 0.11.2 would cut it on SIGTERM), returns within a poll once both gauges are 0. The
    proxy sidecar's hook (its `sh -c` loop, with busybox's wget applet as in the nginx alpine image; Debian package
    `busybox`) returns once vLLM stops answering, so nginx's SIGTERM comes after vLLM's drain."""
    if BUSYBOX is None:
        pytest.fail("busybox is not installed (apt-get install busybox)")
    port = _free_port()
    config = stack_file("prod")
    config["rocm-stack:inference"][0]["port"] = port
    config["rocm-stack:inference"][0]["kubernetes"]["terminationGracePeriodSeconds"] = 60
    plan = synthesize("prod", config)
    pod = Pod("ml", "llama", "llama-0", {"0": (1, 2)})
    server = _Server(("127.0.0.1", port), _Handler)
    server.render, server.token = (lambda: exposition(pod.engines)), None
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        hook = subprocess.Popen(pre_stop(plan, "vllm"))
        time.sleep(DRAIN_SETTLE_SECONDS + 2)
        assert hook.poll() is None, "the hook returned while requests were in flight"
        pod.engines = {"0": (1, 0)}
        time.sleep(2)
        assert hook.poll() is None, "the hook returned while a request was running"
        pod.engines = {"0": (0, 0)}
        idle = time.monotonic()
        assert hook.wait(timeout=10) == 0
        assert time.monotonic() - idle < 3
        applets = tmp_path / "bin"
        applets.mkdir()
        (applets / "wget").symlink_to(BUSYBOX)
        path = f"{applets}:{os.environ['PATH']}"
        proxy = subprocess.Popen(pre_stop(plan, "proxy"), env={**os.environ, "PATH": path})
        time.sleep(2)
        assert proxy.poll() is None, "the proxy's hook returned while vLLM answered"
    finally:
        server.shutdown()
        server.server_close()
    gone = time.monotonic()
    assert proxy.wait(timeout=10) == 0
    assert time.monotonic() - gone < 4
