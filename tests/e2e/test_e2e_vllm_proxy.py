"""The Docker proxy in front of vLLM on the real daemon: a private network, vLLM in the proxy's network namespace, the
key as an upload.

The dev stack is synthesized with `rocm-stack:vllmApiKey` set; its vLLM proxy container is created with the exact
`docker create` argv that its docker/HOST.sh renders (tools.synth.docker_create_args), with only the image (a stand-in)
and the published address (127.0.0.1, a free port, not the machine's 0.0.0.0:8000) changed, on the plan's network,
created as HOST.sh creates it. Not through HOST.sh itself: the proxy's uploads hold the key, a secret, which HOST.sh
does not render; they are copied in here as HOST.sh copies uploads (a root-owned tar, mode 0400, before the start),
rendered by proxy.nginx_config and proxy.key_map with the component's arguments. nginx is this machine's (Debian's
nginx-light, which `.ci/run` installs) with its shared libraries in a `docker import`ed image, since the pinned
nginx:alpine cannot be pulled here; vLLM is a Python server under the plan's container name, in the proxy's network
namespace and listening where the plan's `--host` and `--port` say, that records what reaches it.

This is the one e2e test that creates a bridge network: it adds a `br-*` interface on the machine for its run and
removes it (harness.py: the other tests never do). Measured on dockerd 20.10 with `--bridge=none --iptables=false`:
the network is created and the userland proxy forwards a published port. What a neighbour routing to the host
reaches, with the daemon's firewall on: tests/e2e/test_e2e_neighbours.py.
"""

from __future__ import annotations

import copy
import io
import json
import shutil
import socket
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from components.workloads import proxy
from conftest import stack_file
from e2e.deployment import CONTAINER
from e2e.harness import Docker, _add_bytes, _add_entry, _shared_libraries
from tools.synth import docker_create_args, mock_id, synthesize

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
KEY = "sk-e2e.k3y+proxy"
BEARER = {"Authorization": f"Bearer {KEY}"}
NGINX_IMAGE = "rocm-stack-e2e/nginx:standin"

# Records each request's method, path and Authorization on stdout (docker logs) and answers 200.
RECORDER = """
import http.server, json, signal, sys
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        print(json.dumps([self.command, self.path, self.headers.get("Authorization")]), flush=True)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")
    do_GET = do_POST = answer
    def log_message(self, *a):
        pass
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
http.server.ThreadingHTTPServer(("0.0.0.0", PORT), H).serve_forever()
"""


def recorder(port: int, host: str = "0.0.0.0") -> str:
    return f"PORT = {port}\n{RECORDER}".replace('("0.0.0.0", PORT)', f'("{host}", PORT)')


def nginx_rootfs() -> bytes:
    """nginx, its libraries, /tmp (its prefix, proxy.RUNTIME_DIR) and the users it may drop its worker to: the
    configuration names none, so the compiled-in default (nobody; the pinned alpine image's build says nginx)."""
    buffer = io.BytesIO()
    binary = Path(NGINX).resolve()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("/tmp", "/etc", "/dev", "/proc", "/sys", "/usr/sbin"):
            _add_entry(tar, directory, tarfile.DIRTYPE, 0o1777 if directory == "/tmp" else 0o755)
        copied = {binary, *_shared_libraries([binary])}
        links = {p: Path(p).resolve() for p in copied if Path(p).resolve() != p}
        for path in sorted((copied - links.keys()) | set(links.values())):
            tar.add(str(path), arcname=str(path).lstrip("/"), recursive=False)
        for link, target in sorted(links.items()):
            _add_entry(tar, str(link), tarfile.SYMTYPE, target=str(target))
        _add_bytes(
            tar,
            "/etc/passwd",
            b"root:x:0:0::/:/bin/false\nnobody:x:65534:65534::/:/bin/false\nnginx:x:101:101::/:/bin/false\n",
        )
        _add_bytes(tar, "/etc/group", b"root:x:0:\nnogroup:x:65534:\nnobody:x:65534:\nnginx:x:101:\n")
    return buffer.getvalue()


def uploads_tar(listen: int, port: int) -> bytes:
    """The proxy's two uploads as DockerVllm._proxy declares them (nginx on `listen`, vLLM on the loopback's `port`),
    root-owned, mode 0400."""
    files = {
        proxy.CONFIG_FILE: proxy.nginx_config(
            listen, f"{proxy.LOOPBACK}:{port}", proxy.DOCKER_OPEN_PATHS, scraped_paths=proxy.DOCKER_SCRAPED_PATHS
        ),
        proxy.API_KEY_MAP: proxy.key_map(KEY),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _add_entry(tar, proxy.CONFIG_DIR, tarfile.DIRTYPE)
        for name, content in files.items():
            _add_bytes(tar, f"{proxy.CONFIG_DIR}/{name}", content.encode(), 0o400)
    return buffer.getvalue()


@dataclass
class Stack:
    docker: Docker
    url: str
    vllm: str  # the plan's vLLM container name
    proxy: str

    def received(self) -> list[list[str]]:
        return [json.loads(line) for line in self.docker.out("logs", self.vllm).splitlines() if line[:1] == "["]

    def received_after(self, count: int) -> list[str]:
        """The last request vLLM recorded once it has more than `count`: dockerd's log copier writes a line shortly
        after the process prints it, so a request just answered may not be in `docker logs` yet."""
        deadline = time.monotonic() + 5
        while len(seen := self.received()) <= count and time.monotonic() < deadline:
            time.sleep(0.1)
        return seen[-1]

    def await_forwarded(self, limit_s: float = 10) -> float:
        """Seconds until a keyed request reaches vLLM through the proxy."""
        started = time.monotonic()
        while request(self.url, "/v1/models", BEARER, method="GET", timeout=2) != 200:
            assert time.monotonic() - started < limit_s, self.docker.run("logs", self.proxy).stderr.decode()
            time.sleep(0.2)
        return time.monotonic() - started


def request(
    url: str, path: str, headers: dict[str, str] | None = None, method: str = "POST", timeout: float = 5
) -> int:
    data = b"{}" if method == "POST" else None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url + path, data, headers or {}, method=method), timeout=timeout
        ):
            return 200
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:  # refused, reset, timed out (URLError is one)
        return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class KeyedServer:
    """The dev stack's one vLLM server with `rocm-stack:vllmApiKey`, as its plan declares it."""

    network: str
    proxy: dict[str, Any]  # the proxy container's resource
    vllm: dict[str, Any]  # vLLM's container inputs
    listen: str  # vLLM's --host
    port: int  # vLLM's --port

    @staticmethod
    def of_dev_plan() -> KeyedServer:
        config = stack_file("dev")
        config["rocm-stack:checks"] = {"enable": False}
        plan = synthesize("dev", config, secrets={"rocm-stack:vllmApiKey": KEY})
        (network,) = (r["inputs"]["name"] for r in plan.of_type("docker:index/network:Network"))
        (proxy_,) = (c for c in plan.of_type(CONTAINER) if c["inputs"].get("entrypoints") == proxy.proxy_command())
        joins_proxy = f"container:{mock_id(proxy_['name'])}"  # not its health check, which joins vLLM
        (vllm,) = (c["inputs"] for c in plan.of_type(CONTAINER) if c["inputs"].get("networkMode") == joins_proxy)
        command = vllm["command"]
        return KeyedServer(
            network, proxy_, vllm, command[command.index("--host") + 1], int(command[command.index("--port") + 1])
        )

    def start(self, docker: Docker, image: str, proxy_inputs: dict[str, Any] | None = None) -> None:
        """The network, the proxy from its plan's `docker create` argv (its image nginx's, `proxy_inputs` where the
        test changes them), its uploads copied in as HOST.sh copies them, then vLLM (the recorder in `image`) in the
        proxy's network namespace (by ID in the plan: test_e2e_neighbours.py; by name here) on its `--host`.
        The caller removes them (`stop`)."""
        inputs = proxy_inputs or self.proxy["inputs"]
        (api,) = inputs["ports"]
        docker.run("import", "--change", "ENV PATH=/usr/sbin", "-", NGINX_IMAGE, input=nginx_rootfs())
        docker.run("network", "create", "--driver=bridge", self.network)
        docker.run(*docker_create_args(inputs, {inputs["image"]: NGINX_IMAGE})[1:])
        docker.run("cp", "-", f"{inputs['name']}:/", input=uploads_tar(api["internal"], self.port))
        docker.run("start", inputs["name"])
        joined = [self.vllm["name"], f"--network=container:{inputs['name']}", image]
        recording = recorder(self.port, self.listen)
        docker.run("run", "-d", "--restart=unless-stopped", "--name", *joined, "python3", "-c", recording)

    def stop(self, docker: Docker) -> None:
        docker.run("rm", "--force", self.proxy["inputs"]["name"], self.vllm["name"], check=False)
        docker.run("network", "rm", self.network, check=False)


@pytest.fixture(scope="module")
def stack(docker: Docker, standin_image: str) -> Iterator[Stack]:
    server = KeyedServer.of_dev_plan()
    inputs = copy.deepcopy(server.proxy["inputs"])
    (api,) = inputs["ports"]
    inputs["ports"] = [{**api, "ip": "127.0.0.1", "external": _free_port()}]
    try:
        server.start(docker, standin_image, inputs)
        url = f"http://127.0.0.1:{inputs['ports'][0]['external']}"
        started = time.monotonic()
        while request(url, proxy.HEALTH_PATH, method="GET") != 200:
            if time.monotonic() - started > 10:
                pytest.fail(
                    f"no /health through the proxy; its log:\n{docker.run('logs', inputs['name']).stderr.decode()}"
                )
            time.sleep(0.2)
        print(f"\ne2e: the proxy answered /health on its published port after {time.monotonic() - started:.2f}s")
        yield Stack(docker, url, server.vllm["name"], inputs["name"])
    finally:
        server.stop(docker)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/invocations", "/tokenize", "/pooling"])
def test_without_the_key_401_and_vllm_sees_nothing(stack: Stack, path: str):
    before = stack.received()
    assert request(stack.url, path) == 401
    assert request(stack.url, path, {"Authorization": "Bearer wrong"}) == 401
    assert stack.received() == before


def test_with_the_key_forwarded_and_health_open(stack: Stack):
    count = len(stack.received())
    assert request(stack.url, "/v1/chat/completions", BEARER) == 200
    assert stack.received_after(count) == ["POST", "/v1/chat/completions", f"Bearer {KEY}"]
    assert request(stack.url, proxy.HEALTH_PATH, method="GET") == 200
    assert stack.received_after(count + 1) == ["GET", proxy.HEALTH_PATH, None]


def test_dockerd_stores_the_joined_namespace_by_the_proxys_id(stack: Stack):
    """What the provider reads back as network_mode (funcs.go L954: HostConfig.NetworkMode): `container:<ID>` even
    for a name, so the plan sends the ID (a name would drift on every refresh), as for pid_mode."""
    mode = stack.docker.inspect(stack.vllm)["HostConfig"]["NetworkMode"]
    assert mode == f"container:{stack.docker.inspect(stack.proxy)['Id']}"


def test_the_health_check_joins_vllm_and_reaches_it_on_the_proxys_loopback(stack: Stack, standin_image: str):
    """The server's health check (issue 35 item 4) joins vLLM's network namespace by vLLM's ID, which is the proxy's:
    dockerd resolves the chain, and the check reaches vLLM where it listens (127.0.0.1, `--host`)."""
    plan = synthesize(
        "dev", {**stack_file("dev"), "rocm-stack:checks": {"enable": False}}, secrets={"rocm-stack:vllmApiKey": KEY}
    )
    (check,) = (c for c in plan.of_type(CONTAINER) if c["inputs"]["name"] == f"{stack.vllm}-health")
    (server,) = (c for c in plan.of_type(CONTAINER) if c["inputs"]["name"] == stack.vllm)
    inputs = {**check["inputs"], "command": [*check["inputs"]["command"][:-1], "10"]}
    assert inputs["networkMode"] == f"container:{mock_id(server['name'])}"
    docker = stack.docker
    docker.run(*docker_create_args(inputs, {inputs["image"]: standin_image, mock_id(server["name"]): stack.vllm})[1:])
    try:
        run = docker.run("start", "--attach", inputs["name"], check=False, timeout=60)
        assert docker.inspect(inputs["name"])["State"]["ExitCode"] == 0, run
        assert run.stdout.decode().strip().endswith("healthy")
        assert (
            docker.inspect(inputs["name"])["HostConfig"]["NetworkMode"]
            == f"container:{docker.inspect(stack.vllm)['Id']}"
        )
    finally:
        docker.run("rm", "--force", inputs["name"], check=False)


def test_the_master_drops_its_worker_to_an_unprivileged_user(stack: Stack):
    """With ALL capabilities dropped but SETUID/SETGID, as the plan declares (the master alone reads the 0400 key)."""
    # ps shows "nginx: master process ..." and "nginx: worker process".
    processes = stack.docker.out("top", stack.proxy, "-o", "pid,uid,args").splitlines()[1:]
    users = {args.split()[1]: uid for _, uid, args in (line.split(None, 2) for line in processes)}
    assert users == {"master": "0", "worker": "65534"}, processes


def test_a_restarted_vllm_is_forwarded_to_again_and_a_restarted_proxy_cuts_it_off(stack: Stack):
    """vLLM (the joiner) restarted joins the proxy's current namespace: forwarded again at once. The proxy (the
    namespace's owner) restarted alone gets a new namespace while vLLM keeps the old one (dockerd 20.10): 502 until
    vLLM restarts too, which is why the proxy, not vLLM, owns it (vLLM restarts far more often) and why
    docs/operations.md says to restart both. A daemon restart starts the owner first."""
    docker = stack.docker
    docker.run("restart", "--time=1", stack.vllm)
    print(f"\ne2e: vLLM restarted, forwarded again after {stack.await_forwarded():.1f}s")
    docker.run("restart", "--time=1", stack.proxy)
    started = time.monotonic()
    while request(stack.url, proxy.HEALTH_PATH, method="GET") == 0:  # nginx up again
        assert time.monotonic() - started < 10
        time.sleep(0.2)
    assert request(stack.url, "/v1/models", BEARER, method="GET") == 502
    count = len(stack.received())
    docker.run("restart", "--time=1", stack.vllm)
    stack.await_forwarded()
    assert stack.received_after(count) == ["GET", "/v1/models", f"Bearer {KEY}"]
