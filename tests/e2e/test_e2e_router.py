"""The vLLM production-stack router run for real with the exact flags and proxy configuration the prod stack
deploys (components/workloads/router.py), in front of stand-in replicas, discovering them through a stand-in
Kubernetes API server (tests/e2e/router_standins.py):

- the router's source at the tag the stack deploys (vllm-stack-0.1.12, whose image the chart runs; never copied into
  the repository: `make upstream` fetches it, tests/upstream.txt) on Python >= 3.12 with its own pinned requirements
  (src/vllm_router/requirements.txt): `make router-venv` builds that environment in .venv-router from PyPI; the
  module skips without the source or the environment, naming the command. (PyPI's `vllm-router` is another program,
  vllm-project/router's Rust router: production-stack publishes its router only as the image and the source.)
- the real nginx (Debian's, as tests/test_vllm_proxy.py) with the router's ConfigMap text from the prod plan.

What it shows: the router asks the API server only to list+watch pods by the stack's selector and to get each pod
(the Role's verbs); it serves only the selected pods, presenting VLLM_API_KEY for their model list; the client's key
passes through to the replica; the proxy refuses requests without it and leaves /health and /metrics open; one
session id always reaches one replica, two router pods agree on it, and a replica added through the watch takes
sessions only from the others' share (consistent hashing), never moving one between the old replicas.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from admission_cel import refusals, request
from components.workloads import SERVING_POLICY, proxy, router
from conftest import stack_file
from e2e.router_standins import ApiServer, Replica, pod
from tools.synth import synthesize

ROOT = Path(__file__).resolve().parents[2]
TAG = "vllm-stack-0.1.12"
VENV_PYTHON = ROOT / ".venv-router" / "bin" / "python"
sys.path.insert(0, str(ROOT / "tests"))
from test_vllm_proxy import NGINX, _running  # noqa: E402 (the nginx runner of the proxy tests)
from upstream_go import git_dir  # noqa: E402

KEY = "k3y-0f_the.stack~+/=="  # test_vllm_proxy's KEY: _running writes its key map
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
REPLICA_IPS = ("127.0.0.2", "127.0.0.3")
NEW_REPLICA_IP = "127.0.0.4"
ROGUE_IP = "127.0.0.5"

pytestmark = [
    pytest.mark.skipif(not VENV_PYTHON.exists(), reason="no router environment: `make router-venv`"),
    pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx-light)"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _chat(port: int, session: str | None, key: str | None = KEY, path: str = "/v1/chat/completions") -> tuple[int, Any]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    if session is not None:
        headers["x-session-id"] = session
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _served_by(port: int, session: str) -> str:
    status, answer = _chat(port, session)
    assert status == 200, answer
    return str(answer["choices"][0]["message"]["content"])


@pytest.fixture(scope="module")
def deployed() -> dict[str, Any]:
    """The router's container and proxy configuration as the prod stack declares them."""
    plan = synthesize("prod", stack_file("prod"))
    pod_spec = plan.get("kubernetes:apps/v1:Deployment", "llama-router")["inputs"]["spec"]["template"]["spec"]
    [container] = [c for c in pod_spec["containers"] if c["name"] == "router"]
    config = plan.get("kubernetes:core/v1:ConfigMap", "llama-router-proxy")["inputs"]["data"][proxy.CONFIG_FILE]
    admission = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
    policy = plan.get(admission, SERVING_POLICY)["inputs"]
    binding = plan.get(admission + "Binding", f"{SERVING_POLICY}-binding")["inputs"]
    return {"args": container["args"], "config": config, "serving_policy": (policy, binding)}


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """src/vllm_router at the pinned tag (skips where `make upstream` has not fetched it)."""
    repository = git_dir("vllm-project/production-stack", TAG)
    target = tmp_path_factory.mktemp("production-stack")
    archive = subprocess.run(
        ["git", f"--git-dir={repository}", "archive", TAG, "src/vllm_router"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


class Cluster:
    def __init__(self, deployed: dict[str, Any], source: Path, workdir: Path) -> None:
        args = deployed["args"]
        self.selector = dict(item.split("=", 1) for item in _flag(args, "--k8s-label-selector").split(","))
        self.namespace = _flag(args, "--k8s-namespace")
        self.port = int(_flag(args, "--k8s-port"))
        self.api = ApiServer(self.namespace)
        self.replicas: dict[str, Replica] = {}
        self.processes: list[subprocess.Popen[bytes]] = []
        self.servers: list[Any] = [self.api]
        threading.Thread(target=self.api.serve_forever, daemon=True).start()
        for index, ip in enumerate(REPLICA_IPS):
            self.add_replica(f"llama-{index}", ip)
        # A pod of the namespace that is no replica: the router must never send to it.
        self.api.add(pod("training-0", "127.0.0.9", {"app.kubernetes.io/name": "training"}, self.namespace))
        kubeconfig = workdir / "kubeconfig"
        server = f"http://127.0.0.1:{self.api.server_address[1]}"
        kubeconfig.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "c", "cluster": {"server": server}}],
                    "users": [{"name": "u", "user": {"token": "t"}}],
                    "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                    "current-context": "c",
                }
            )
        )
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "VLLM_API_KEY": KEY, "PYTHONPATH": str(source)}
        self.router_ports = []
        for _ in range(2):  # prod's two router pods
            port = _free_port()
            flags = list(args)
            flags[flags.index("--port") + 1] = str(port)
            log = (workdir / f"router-{port}.log").open("wb")
            self.processes.append(
                subprocess.Popen(
                    [str(VENV_PYTHON), "-m", "vllm_router.app", *flags], env=env, stdout=log, stderr=log, cwd=workdir
                )
            )
            self.router_ports.append(port)
        self.logs = workdir

    def add_replica(self, name: str, ip: str) -> None:
        replica = Replica(ip, self.port, MODEL, KEY)
        threading.Thread(target=replica.serve_forever, daemon=True).start()
        self.replicas[ip] = replica
        self.servers.append(replica)
        self.api.add(pod(name, ip, self.selector, self.namespace))

    def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        for port in self.router_ports:
            while True:
                try:
                    status, body = _get(f"http://127.0.0.1:{port}/v1/models")
                    if status == 200 and MODEL in body.decode():
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline or any(p.poll() is not None for p in self.processes):
                    logs = "\n".join(p.read_text()[-2000:] for p in self.logs.glob("router-*.log"))
                    pytest.fail(f"the router did not discover the replicas:\n{logs}")
                time.sleep(0.3)

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait(5)
        for server in self.servers:
            server.shutdown()
            server.server_close()


@pytest.fixture(scope="module")
def cluster(deployed: dict[str, Any], source: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    assert int(_flag(deployed["args"], "--port")) == router.ROUTER_PORT
    running = Cluster(deployed, source, tmp_path_factory.mktemp("router"))
    try:
        running.wait_ready()
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def front(cluster: Cluster, deployed: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The router pod's nginx with the plan's configuration; its ports moved to free ones (the first router's)."""
    upstream = f"set $vllm 127.0.0.1:{router.ROUTER_PORT};"
    assert upstream in deployed["config"]
    config = deployed["config"].replace(f"listen {proxy.POD_PORT};", f"listen {_free_port()};")
    config = config.replace(upstream, f"set $vllm 127.0.0.1:{cluster.router_ports[0]};")
    with _running(tmp_path_factory.mktemp("front"), config) as port:
        yield port


def test_discovery_asks_only_what_the_role_allows(cluster: Cluster) -> None:
    """Every request of both routers to the API server: GET, the pod collection by the stack's selector as a watch
    (bounded by the stack's watch timeout) or one pod by name."""
    verbs = set()
    for method, path, query in cluster.api.requests:
        assert method == "GET", (method, path)
        collection = f"/api/v1/namespaces/{cluster.namespace}/pods"
        if path == collection:
            assert query["labelSelector"] == [",".join(f"{k}={v}" for k, v in sorted(cluster.selector.items()))]
            assert query["timeoutSeconds"] == [str(router.WATCH_TIMEOUT_SECONDS)]
            verbs |= {"list", "watch"} if query.get("watch") == ["True"] else {"list"}
        else:
            assert path.startswith(collection + "/")
            verbs.add("get")
    assert verbs <= set(router.DISCOVERY_VERBS) and "watch" in verbs


def test_the_proxy_lets_only_the_key_through(cluster: Cluster, front: int) -> None:
    for path in ("/v1/chat/completions", "/v1/completions", "/tokenize", "/sleep"):
        status, _ = _chat(front, "s", key=None, path=path)
        assert status == 401, path
    assert _chat(front, "s", key="wrong")[0] == 401
    status, body = _get(f"http://127.0.0.1:{front}/health")
    assert (status, json.loads(body)) == (200, {"status": "healthy"})
    status, body = _get(f"http://127.0.0.1:{front}/metrics")
    assert status == 200 and b"vllm:current_qps" in body
    status, answer = _chat(front, "s")
    assert status == 200
    replica = cluster.replicas[answer["choices"][0]["message"]["content"]]
    assert replica.seen[-1]["authorization"] == f"Bearer {KEY}"  # the client's key, passed on


def test_a_session_stays_on_one_replica_and_both_routers_agree(cluster: Cluster, front: int) -> None:
    sessions = [f"conversation-{n}" for n in range(24)]
    first = {s: _served_by(front, s) for s in sessions}
    assert set(first.values()) == set(REPLICA_IPS)  # the sessions spread over both replicas
    for s in sessions:
        assert {_served_by(front, s) for _ in range(3)} == {first[s]}
        assert _served_by(cluster.router_ports[1], s) == first[s]  # the other router pod
    assert "127.0.0.9" not in {_served_by(front, f"other-{n}") for n in range(20)}


def test_a_replica_added_by_label_takes_sessions_only_from_the_others_share(cluster: Cluster, front: int) -> None:
    sessions = [f"chat-{n}" for n in range(40)]
    before = {s: _served_by(front, s) for s in sessions}
    cluster.add_replica("llama-2", NEW_REPLICA_IP)
    deadline = time.monotonic() + 30
    while NEW_REPLICA_IP not in {_served_by(front, s) for s in sessions}:
        assert time.monotonic() < deadline, "the new replica never got a session"
        time.sleep(0.5)
    after = {s: _served_by(front, s) for s in sessions}
    moved = {s for s in sessions if after[s] != before[s]}
    assert moved and all(after[s] == NEW_REPLICA_IP for s in moved)
    assert len(moved) < len(sessions) / 2


def test_a_stopped_router_exits_within_the_watch_timeout(cluster: Cluster) -> None:
    """SIGTERM (the kubelet's stop): the router's shutdown joins its watch thread, which ends when the API server
    closes the stream (the stack's timeoutSeconds), well inside the pod's 30 s grace."""
    process = cluster.processes[1]
    started = time.monotonic()
    process.terminate()
    process.wait(router.WATCH_TIMEOUT_SECONDS + 10)
    assert time.monotonic() - started < router.WATCH_TIMEOUT_SECONDS + 5


def test_a_pod_copying_the_replicas_labels_gets_nothing(cluster: Cluster, deployed: dict[str, Any], front: int) -> None:
    """Issue 34 item 1: a bare pod with the replicas' labels, created in serving's namespace by a training team's
    identity, is refused by the stack's admission policy (evaluated on its CREATE request as the API server does:
    tests/admission_cel.py), so the routers never see it: no key, no prompt, while 30 sessions are served."""
    rogue = Replica(ROGUE_IP, cluster.port, MODEL, None)
    threading.Thread(target=rogue.serve_forever, daemon=True).start()
    cluster.servers.append(rogue)
    manifest = pod("rogue", ROGUE_IP, cluster.selector, cluster.namespace)
    review = request("CREATE", "", "pods", manifest, "system:serviceaccount:ml:default", cluster.namespace)
    assert refusals(*deployed["serving_policy"], review)  # the API server answers 403: the pod never exists
    served = {_served_by(front, f"tenant-{n}") for n in range(30)}
    assert ROGUE_IP not in served and rogue.seen == []


def test_without_the_policy_the_rogue_pod_gets_the_key_and_prompts(cluster: Cluster, front: int) -> None:
    """The finding reproduced, so the test above is no empty pass: the same pod admitted (as on main, which has no
    policy) gets the routers' key for its model list before any client request, then a share of the sessions."""
    [rogue] = [s for s in cluster.servers if isinstance(s, Replica) and s.key is None]
    cluster.api.add(pod("rogue", ROGUE_IP, cluster.selector, cluster.namespace))
    deadline = time.monotonic() + 30
    while not any(seen.get("path") == "/v1/models" for seen in rogue.seen):
        assert time.monotonic() < deadline, "the routers never asked the rogue pod"
        time.sleep(0.3)
    assert rogue.seen[0]["authorization"] == f"Bearer {KEY}"
    deadline = time.monotonic() + 30
    while ROGUE_IP not in {_served_by(front, f"rogue-{n}") for n in range(30)}:
        assert time.monotonic() < deadline, "the rogue pod never got a session"
    assert any(seen.get("authorization") == f"Bearer {KEY}" and "path" not in seen for seen in rogue.seen)
