"""The proxy in front of vLLM, run for real: the nginx binary (Debian's `nginx`, which `.ci/run` installs) with the
exact configuration the stack deploys (components/workloads/proxy.py), in front of a stand-in upstream that records
what reaches it. vLLM 0.11.2's own key guards only /v1 (api_server.py build_app, `url_path.startswith("/v1")`):
/invocations (vllm-project/vllm#58144), /tokenize and /pooling answer without it, and a Host-header trick passes
its middleware (GHSA-94f4-hr76-p5j6, fixed in vLLM 0.22); the proxy must refuse all of them without the key."""

from __future__ import annotations

import contextlib
import http.client
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from components.workloads import proxy
import rules

NGINX = shutil.which("nginx") or next(
    (p for p in ("/usr/sbin/nginx", "/usr/local/sbin/nginx") if Path(p).exists()), None
)
pytestmark = pytest.mark.skipif(NGINX is None, reason="nginx is not installed (apt-get install nginx-light)")

KEY = "k3y-0f_the.stack~+/=="
BEARER = {"Authorization": f"Bearer {KEY}"}


class Upstream(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        super().__init__(("127.0.0.1", 0), _Recorder)


class _Recorder(BaseHTTPRequestHandler):
    server: Upstream

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.server.seen.append((self.command, self.path, dict(self.headers)))
        self.send_response(200)
        self.send_header("Content-Length", "8")
        self.end_headers()
        self.wfile.write(b"upstream")

    do_GET = do_POST = do_HEAD = _answer

    def log_message(self, *args: object) -> None:
        pass


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _running(tmp_path: Path, config: str) -> Iterator[int]:
    conf_dir, runtime = tmp_path / "conf", tmp_path / "run"
    conf_dir.mkdir()
    runtime.mkdir()
    (conf_dir / proxy.CONFIG_FILE).write_text(config)
    (conf_dir / proxy.API_KEY_MAP).write_text(proxy.key_map(KEY))
    (conf_dir / proxy.API_KEY_MAP).chmod(0o400)
    assert NGINX is not None
    command = [NGINX, *proxy.proxy_command(str(conf_dir), f"{runtime}/")[1:]]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = int(config.split("listen ", 1)[1].split(";", 1)[0])
    try:
        deadline = time.monotonic() + 5
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    pytest.fail(f"nginx did not start: {process.communicate()[1]}")
                time.sleep(0.02)
        yield port
    finally:
        process.terminate()
        process.wait(5)


@pytest.fixture(scope="module")
def server() -> Iterator[Upstream]:
    server = Upstream()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def upstream(server: Upstream) -> Upstream:
    server.seen.clear()
    return server


@pytest.fixture(scope="module")
def pod_proxy(tmp_path_factory: pytest.TempPathFactory, server: Upstream) -> Iterator[int]:
    """The Kubernetes sidecar's configuration (VllmServer): vLLM on the pod's loopback, /health and /metrics open."""
    config = proxy.nginx_config(_free_port(), f"127.0.0.1:{server.server_port}", proxy.POD_OPEN_PATHS)
    with _running(tmp_path_factory.mktemp("pod"), config) as port:
        yield port


def _raw(port: int, request: bytes) -> int:
    """Status of one request sent byte for byte (http.client would normalise what these tests abuse)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(request)
        return int(s.recv(64).split(b" ", 2)[1])


def _request(port: int, method: str, path: str, headers: dict[str, str] | None = None) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    body = b"{}" if method == "POST" else None
    connection.request(method, path, body=body, headers=headers or {})
    status = connection.getresponse().status
    connection.close()
    return status


INFERENCE = [
    ("POST", "/v1/chat/completions"),
    ("GET", "/v1/models"),
    ("POST", "/invocations"),
    ("POST", "/tokenize"),
    ("POST", "/pooling"),
    ("POST", "/v1/completions"),
]
# Spellings of the paths above that a path-prefix check might misread; nginx normalises them before matching.
TRICKS = [
    "//v1/chat/completions",
    "/v1/../invocations",
    "/health/../invocations",
    "/%69nvocations",
    "/health%2F..%2Finvocations",
    "/./tokenize",
    "/health/",
    "/health/x",
    "/healthz",
    "/metrics/../pooling",
]


@pytest.mark.parametrize(("method", "path"), INFERENCE + [("POST", p) for p in TRICKS])
def test_without_the_key_nothing_but_health_reaches_vllm(
    pod_proxy: int, upstream: Upstream, method: str, path: str
) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": KEY},
        {"Authorization": f"Bearer {KEY.upper()}"},  # nginx's map compares plain strings ignoring case
        {"Authorization": f"Bearer {KEY.replace('.', 'x')}"},  # the key's `.` is no wildcard
        {"Authorization": f"Bearer {KEY}x"},
        {"Authorization": f"Bearer {KEY}\t"},
        {"Authorization": f"bearer {KEY}"},  # vLLM too compares "Bearer " + key exactly
        {"Authorization": f"Basic {KEY}"},
    ):
        assert _request(pod_proxy, method, path, headers) == 401, (path, headers)
    assert upstream.seen == []


def test_host_header_tricks_are_refused(pod_proxy: int, upstream: Upstream) -> None:
    # GHSA-94f4-hr76-p5j6 passes vLLM's middleware with a crafted Host; nginx ignores Host for the decision.
    for host in ("localhost/v1", "localhost:8000/health#", "x/health?", "localhost:8000/#@evil", ""):
        request = f"POST /invocations HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        assert _raw(pod_proxy, request.encode()) in (400, 401), host
    # An absolute-form target names the host and path in the request line: still the path decides.
    for target in ("http://localhost/health/../invocations", "http://x/invocations"):
        request = f"POST {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        assert _raw(pod_proxy, request.encode()) == 401, target
    assert upstream.seen == []


def test_with_the_key_everything_is_forwarded(pod_proxy: int, upstream: Upstream) -> None:
    for method, path in INFERENCE:
        assert _request(pod_proxy, method, path, BEARER) == 200, path
    assert [(m, p) for m, p, _ in upstream.seen] == INFERENCE
    # vLLM sees the key too (its own check stays a second line) and its own Host, never the client's.
    assert all(h["Authorization"] == f"Bearer {KEY}" for _, _, h in upstream.seen)
    assert {h["Host"] for _, _, h in upstream.seen} == {f"127.0.0.1:{upstream.server_port}"}


def test_health_and_metrics_pass_without_the_key_as_exactly_that_path(pod_proxy: int, upstream: Upstream) -> None:
    for path in ("/health", "//health", "/%68ealth", "/v1/../health", "/metrics"):
        assert _request(pod_proxy, "GET", path) == 200, path
    assert [p for _, p, _ in upstream.seen] == ["/health"] * 4 + ["/metrics"]


def test_docker_configuration_opens_health_only(tmp_path: Path, upstream: Upstream) -> None:
    """DockerVllm's configuration (vLLM on the loopback of the proxy's network namespace); `nginx -t` accepts it as
    rendered. /metrics passes with the key or the scrape token Prometheus holds (components/monitoring
    VLLM_METRICS_TOKEN_FILE); the token opens nothing else."""
    rendered = proxy.nginx_config(
        _free_port(), "127.0.0.1:8000", proxy.DOCKER_OPEN_PATHS, scraped_paths=proxy.DOCKER_SCRAPED_PATHS
    )
    conf = tmp_path / "t"
    conf.mkdir()
    (conf / proxy.CONFIG_FILE).write_text(rendered)
    (conf / proxy.API_KEY_MAP).write_text(proxy.key_map(KEY))
    assert NGINX is not None
    check = subprocess.run(
        [NGINX, "-t", "-p", f"{tmp_path}/", "-e", "stderr", "-c", str(conf / proxy.CONFIG_FILE)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    config = rendered.replace("127.0.0.1:8000", f"127.0.0.1:{upstream.server_port}")
    (tmp_path / "run").mkdir()
    with _running(tmp_path / "run", config) as port:
        token = {"Authorization": f"Bearer {proxy.metrics_token(KEY)}"}
        assert _request(port, "GET", "/health") == 200
        assert _request(port, "GET", "/metrics") == 401
        assert _request(port, "GET", "/metrics", {"Authorization": f"Bearer {proxy.metrics_token(KEY + 'x')}"}) == 401
        assert _request(port, "GET", "/metrics", token) == 200
        assert _request(port, "GET", "/metrics", BEARER) == 200
        for method, path in INFERENCE:
            assert _request(port, method, path, token) == 401, path
        for path in TRICKS:
            assert _request(port, "POST", path, token) in (400, 401), path
        assert _request(port, "POST", "/invocations") == 401
        assert _request(port, "POST", "/invocations", BEARER) == 200
    assert [p for _, p, _ in upstream.seen] == ["/health", "/metrics", "/metrics", "/invocations"]


def test_the_scrape_token_is_not_the_key_and_follows_it() -> None:
    assert proxy.metrics_token(KEY) == proxy.metrics_token(KEY) != proxy.metrics_token(KEY + "x")
    assert KEY not in proxy.metrics_token(KEY) and len(proxy.metrics_token(KEY)) == 64


@pytest.mark.parametrize("key", ["", "  ", 'a" 1; "b', "a b", "key$x", "k;", "é"])
def test_keys_that_are_no_bearer_token_are_refused(key: str) -> None:
    assert rules.api_key_problem(key) is not None


def test_a_bearer_token_is_accepted() -> None:
    assert rules.api_key_problem(KEY) is None
