"""The proxy in front of vLLM, run for real: the nginx binary (Debian's `nginx`, which `.ci/run` installs) with the
exact configuration the stack deploys (components/workloads/proxy.py), in front of a stand-in upstream that records
what reaches it. vLLM 0.11.2's own key guards only /v1 (api_server.py build_app, `url_path.startswith("/v1")`):
/invocations (vllm-project/vllm#58144), /tokenize and /pooling answer without it, and a Host-header trick passes
its middleware (GHSA-94f4-hr76-p5j6, fixed in vLLM 0.22); the proxy must refuse all of them without the key."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import http.client
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
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
# Two Docker hosts' names, each proxy rendered for its own.
HOST, OTHER_HOST = "gpu-node-3", "gpu-node-4"
# The one scrape token of before issue 34 item 9, equal on every host: an HMAC of this label under the key.
FLEET_TOKEN = hmac.new(KEY.encode(), b"rocm-stack vllm metrics scrape", hashlib.sha256).hexdigest()


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
def _running(
    tmp_path: Path, config: str, files: dict[str, bytes] | None = None, host: str | None = None
) -> Iterator[int]:
    """nginx on `config`, with the key map (a Docker host's where `host` names one) and `files` (mode 0400) beside
    it in tmp_path/conf."""
    conf_dir, runtime = tmp_path / "conf", tmp_path / "run"
    conf_dir.mkdir()
    runtime.mkdir()
    for name, content in (files or {}).items():
        (conf_dir / name).write_bytes(content)
        (conf_dir / name).chmod(0o400)
    (conf_dir / proxy.CONFIG_FILE).write_text(config)
    (conf_dir / proxy.API_KEY_MAP).write_text(proxy.key_map(KEY, host))
    (conf_dir / proxy.API_KEY_MAP).chmod(0o400)
    assert NGINX is not None
    command = [NGINX, *proxy.proxy_command(str(conf_dir), f"{runtime}/")[1:]]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    port = int(config.split("listen ", 1)[1].split(";", 1)[0].split()[0])
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
    rendered. /metrics passes with the key or the host's scrape token Prometheus holds (components/monitoring
    vllm_metrics_token_file); the token opens nothing else, and another host's token, or the one token of before,
    not even /metrics."""
    rendered = proxy.nginx_config(
        _free_port(), "127.0.0.1:8000", proxy.DOCKER_OPEN_PATHS, scraped_paths=proxy.DOCKER_SCRAPED_PATHS
    )
    conf = tmp_path / "t"
    conf.mkdir()
    (conf / proxy.CONFIG_FILE).write_text(rendered)
    (conf / proxy.API_KEY_MAP).write_text(proxy.key_map(KEY, HOST))
    assert NGINX is not None
    check = subprocess.run(
        [NGINX, "-t", "-p", f"{tmp_path}/", "-e", "stderr", "-c", str(conf / proxy.CONFIG_FILE)],
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stderr
    config = rendered.replace("127.0.0.1:8000", f"127.0.0.1:{upstream.server_port}")
    (tmp_path / "run").mkdir()
    with _running(tmp_path / "run", config, host=HOST) as port:
        token = {"Authorization": f"Bearer {proxy.metrics_token(KEY, HOST)}"}
        assert _request(port, "GET", "/health") == 200
        assert _request(port, "GET", "/metrics") == 401
        for wrong in (proxy.metrics_token(KEY + "x", HOST), proxy.metrics_token(KEY, OTHER_HOST), FLEET_TOKEN):
            assert _request(port, "GET", "/metrics", {"Authorization": f"Bearer {wrong}"}) == 401
        assert _request(port, "GET", "/metrics", token) == 200
        assert _request(port, "GET", "/metrics", BEARER) == 200
        for method, path in INFERENCE:
            assert _request(port, method, path, token) == 401, path
        for path in TRICKS:
            assert _request(port, "POST", path, token) in (400, 401), path
        assert _request(port, "POST", "/invocations") == 401
        assert _request(port, "POST", "/invocations", BEARER) == 200
    assert [p for _, p, _ in upstream.seen] == ["/health", "/metrics", "/metrics", "/invocations"]


def _self_signed(tmp_path: Path, name: str = "localhost") -> tuple[Path, Path]:
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}"]
        + ["-addext", f"subjectAltName=DNS:{name}", "-keyout", str(key), "-out", str(cert)],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_docker_tls_serves_https_only_with_the_key(tmp_path: Path, upstream: Upstream) -> None:
    """Issue 34 item 9: the proxy on HTTPS (`vllmTlsCertificate`, `vllmTlsKey`), run by the real nginx with a
    certificate from openssl: a client verifying it gets the same answers as over HTTP before (401 without the key),
    plain HTTP on that port gets nginx's 400 and no forward."""
    import ssl

    cert, key = _self_signed(tmp_path)
    port = _free_port()
    rendered = proxy.nginx_config(
        port, "127.0.0.1:8000", proxy.DOCKER_OPEN_PATHS, scraped_paths=proxy.DOCKER_SCRAPED_PATHS, tls=True
    )
    assert f"listen {port} ssl;" in rendered and f"ssl_protocols {proxy.TLS_PROTOCOLS};" in rendered
    run = tmp_path / "nginx"
    run.mkdir()
    config = rendered.replace("127.0.0.1:8000", f"127.0.0.1:{upstream.server_port}")
    files = {proxy.TLS_CERTIFICATE: cert.read_bytes(), proxy.TLS_KEY: key.read_bytes()}
    with _running(run, config.replace(proxy.CONFIG_DIR, str(run / "conf")), files, HOST):
        context = ssl.create_default_context(cafile=str(cert))

        def https(path: str, headers: dict[str, str] | None = None) -> int:
            request = urllib.request.Request(f"https://localhost:{port}{path}", b"{}", headers or {}, method="POST")
            try:
                with urllib.request.urlopen(request, context=context, timeout=5):
                    return 200
            except urllib.error.HTTPError as error:
                return error.code

        assert https("/invocations") == 401
        assert https("/invocations", BEARER) == 200
        assert https("/metrics", {"Authorization": f"Bearer {proxy.metrics_token(KEY, HOST)}"}) == 200
        assert _request(port, "POST", "/invocations", BEARER) == 400  # plain HTTP to an HTTPS port
    assert [p for _, p, _ in upstream.seen] == ["/invocations", "/metrics"]


def test_a_hosts_scrape_token_scrapes_no_other_host(tmp_path: Path, upstream: Upstream) -> None:
    """Issue 34 item 9: two hosts' proxies, each with its own key map, run by the real nginx: each host's token opens
    its own /metrics and is refused (401, nothing forwarded) by the other's, and a host's key map holds its own token
    alone, so a token read on one host (its map, or the wire) scrapes no other."""
    rendered = proxy.nginx_config(
        _free_port(), f"127.0.0.1:{upstream.server_port}", proxy.DOCKER_OPEN_PATHS, proxy.DOCKER_SCRAPED_PATHS
    )
    other = rendered.replace(rendered.split("listen ", 1)[1].split(";", 1)[0], str(_free_port()), 1)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with _running(tmp_path / "a", rendered, host=HOST) as port, _running(tmp_path / "b", other, host=OTHER_HOST) as b:
        for own, foreign, at in ((HOST, OTHER_HOST, port), (OTHER_HOST, HOST, b)):
            assert (
                _request(at, "GET", "/metrics", {"Authorization": f"Bearer {proxy.metrics_token(KEY, foreign)}"}) == 401
            )
            assert _request(at, "GET", "/metrics", {"Authorization": f"Bearer {proxy.metrics_token(KEY, own)}"}) == 200
    assert [p for _, p, _ in upstream.seen] == ["/metrics", "/metrics"]
    assert proxy.metrics_token(KEY, OTHER_HOST) not in proxy.key_map(KEY, HOST)
    assert proxy.metrics_token(KEY, HOST) in proxy.key_map(KEY, HOST)


def test_the_scrape_tokens_are_not_the_key_follow_it_and_differ_per_host() -> None:
    tokens = {proxy.metrics_token(KEY, h) for h in (HOST, OTHER_HOST)} | {proxy.metrics_token(KEY + "x", HOST)}
    assert len(tokens) == 3 and all(len(t) == 64 and KEY not in t for t in tokens)
    assert proxy.metrics_token(KEY, HOST) == proxy.metrics_token(KEY, HOST)
    # The secret they derive from is no token of before and not the key; Kubernetes proxies (metrics open) hold the
    # key alone.
    assert proxy.scrape_secret(KEY) not in (FLEET_TOKEN, KEY)
    assert proxy.key_map(KEY).count("Bearer") == 1


@pytest.mark.parametrize("key", ["", "  ", 'a" 1; "b', "a b", "key$x", "k;", "é"])
def test_keys_that_are_no_bearer_token_are_refused(key: str) -> None:
    assert rules.api_key_problem(key) is not None


def test_a_bearer_token_is_accepted() -> None:
    assert rules.api_key_problem(KEY) is None


# --- TLS through the program -----------------------------------------------------------------------------------

P = "rocm-stack:"


def test_tls_config_is_refused_by_key_unless_whole(tmp_path: Path) -> None:
    from conftest import refused, synth_with

    cert, key = (f.read_text() for f in _self_signed(tmp_path))
    only_cert = refused(lambda: synth_with("dev", secrets={P + "vllmApiKey": KEY, P + "vllmTlsCertificate": cert}))
    assert "rocm-stack:vllmTlsKey: is missing while `vllmTlsCertificate` is set" in only_cert
    swapped = refused(
        lambda: synth_with(
            "dev", secrets={P + "vllmApiKey": KEY, P + "vllmTlsCertificate": key, P + "vllmTlsKey": cert}
        )
    )
    assert "rocm-stack:vllmTlsCertificate: holds no PEM block `-----BEGIN CERTIFICATE-----`" in swapped
    assert "rocm-stack:vllmTlsKey: holds no PEM block `-----BEGIN PRIVATE KEY-----`" in swapped
    keyless = refused(lambda: synth_with("dev", secrets={P + "vllmTlsCertificate": cert, P + "vllmTlsKey": key}))
    assert "rocm-stack:vllmTlsCertificate: is served by the vLLM proxies, which run only with an API key" in keyless
    plain = refused(lambda: synth_with("dev", secrets={P + "vllmApiKey": KEY}, vllmTlsKey=key))
    assert "rocm-stack:vllmTlsKey: " in plain and "must be a Pulumi secret" in plain


def test_prod_with_tls_scrapes_https_and_rolls_every_server_once(tmp_path: Path) -> None:
    """With the certificate set, Prometheus scrapes the proxies over https and verifies them against it (promtool
    accepts the job: tests/test_monitoring_host.py checks the uploaded prometheus.yml); the first `pulumi up` replaces
    each proxy (its uploads) and so its vLLM (the namespace it joins), server after server, the files container (the
    per-host vLLM jobs it writes) and the token container (the certificate beside the tokens); Prometheus keeps
    running (its prometheus.yml holds no vLLM job of a keyed stack)."""
    import yaml

    from conftest import CONTAINER, synth_with
    from tools.impact import predict
    from tools.impact_rules import Action
    from tools.synth import upload_text
    from tools.synth_diff import SynthPlan

    cert, key = (f.read_text() for f in _self_signed(tmp_path, "gpu-node-3.example.internal"))
    base = synth_with("prod")
    head = synth_with("prod", secrets={P + "vllmTlsCertificate": cert, P + "vllmTlsKey": key})
    vllm_jobs = [
        j for j in yaml.safe_load(head.outputs["prometheusScrapeConfig"])["scrape_configs"] if "authorization" in j
    ]
    assert [j["job_name"] for j in vllm_jobs] == ["vllm-gpu-node-3", "vllm-gpu-node-4"]
    for vllm_job in vllm_jobs:
        assert vllm_job["scheme"] == "https"
        assert vllm_job["tls_config"] == {"ca_file": "/etc/prometheus/secrets/vllm-ca.pem"}
    files = head.get(CONTAINER, "gpu-node-1-prometheus-files")["inputs"]["uploads"]
    assert "scheme: https" in "".join(upload_text(u) or "" for u in files)
    report = predict(*(SynthPlan.model_validate(p.to_json()) for p in (base, head)))
    replaced = {i.name for i in report.impacts if i.action is Action.DELETE_REPLACE}
    servers = {"gpu-node-3-serve-b", "gpu-node-4-serve-b"}
    assert replaced >= servers | {f"{s}-proxy" for s in servers} | {"gpu-node-1-prometheus-files"}
    assert "gpu-node-1-prometheus" not in replaced
    (roll,) = [r for r in report.rolls if not r.if_rotated]
    assert roll.steps == [["gpu-node-3/serve-b"], ["gpu-node-4/serve-b"]]
