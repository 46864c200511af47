"""The Docker proxy in front of vLLM on the real daemon: a private network, Docker's DNS, the key as an upload.

The dev stack is synthesized with `rocm-stack:vllmApiKey` set; its vLLM proxy container is created with the exact
`docker create` argv that its docker/HOST.sh renders (tools.synth.docker_create_args), with only the image (a stand-in)
and the published address (127.0.0.1, a free port, not the machine's 0.0.0.0:8000) changed, on the plan's network,
created as HOST.sh creates it. Not through HOST.sh itself: the proxy's uploads hold the key, a secret, which HOST.sh
does not render; they are copied in here as HOST.sh copies uploads (a root-owned tar, mode 0400, before the start),
rendered by proxy.nginx_config and proxy.key_map with the component's arguments. nginx is this machine's (Debian's
nginx-light, which `.ci/run` installs) with its shared libraries in a `docker import`ed image, since the pinned
nginx:alpine cannot be pulled here; vLLM is a Python server under the plan's container name that records what reaches
it.

This is the one e2e test that creates a bridge network: it adds a `br-*` interface on the machine for its run and
removes it (harness.py: the other tests never do). Measured on dockerd 20.10 with `--bridge=none --iptables=false`:
the network is created, its containers resolve each other by name through 127.0.0.11, and the userland proxy
forwards a published port.
"""

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

import pytest

from components.workloads import proxy
from conftest import stack_file
from e2e.deployment import CONTAINER
from e2e.harness import Docker, _add_bytes, _add_entry, _shared_libraries
from tools.synth import docker_create_args, synthesize

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
FILLER = "e2e-proxy-filler"
KEY = "sk-e2e.k3y+proxy"
BEARER = {"Authorization": f"Bearer {KEY}"}
NGINX_IMAGE = "rocm-stack-e2e/nginx:standin"
# nginx re-resolves every 10 s (`resolver ... valid=10s`); a request finds a new address within that and a margin.
RERESOLVE_S = 15

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


def recorder(port: int) -> str:
    return f"PORT = {port}\n{RECORDER}"


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


def uploads_tar(vllm: str, port: int) -> bytes:
    """The proxy's two uploads as DockerVllm._proxy declares them, root-owned, mode 0400."""
    files = {
        proxy.CONFIG_FILE: proxy.nginx_config(port, f"{vllm}:{port}", proxy.DOCKER_OPEN_PATHS, proxy.DOCKER_DNS),
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
    vllm: str  # the plan's vLLM container name, which the proxy resolves
    network: str
    image: str  # the stand-in image (Python)

    def ip(self) -> str:
        return self.docker.inspect(self.vllm)["NetworkSettings"]["Networks"][self.network]["IPAddress"]

    def received(self) -> list[list[str]]:
        return [json.loads(line) for line in self.docker.out("logs", self.vllm).splitlines() if line[:1] == "["]


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


@pytest.fixture(scope="module")
def stack(docker: Docker, standin_image: str) -> Iterator[Stack]:
    config = stack_file("dev")
    config["rocm-stack:checks"] = {"enable": False}
    plan = synthesize("dev", config, secrets={"rocm-stack:vllmApiKey": KEY})
    (network,) = (r["inputs"] for r in plan.of_type("docker:index/network:Network"))
    (inputs,) = (
        c["inputs"] for c in plan.of_type(CONTAINER) if c["inputs"].get("entrypoints") == proxy.proxy_command()
    )
    (vllm,) = (
        c["inputs"]["name"]
        for c in plan.of_type(CONTAINER)
        if c["inputs"].get("networksAdvanced") == [{"name": network["name"]}] and c["inputs"] is not inputs
    )
    (api,) = inputs["ports"]
    inputs["ports"] = [{**api, "ip": "127.0.0.1", "external": _free_port()}]
    docker.run("import", "--change", "ENV PATH=/usr/sbin", "-", NGINX_IMAGE, input=nginx_rootfs())
    docker.run("network", "create", f"--driver={network['driver']}", network["name"])
    try:
        run = [vllm, f"--network={network['name']}", standin_image, "python3", "-c", recorder(api["internal"])]
        docker.run("run", "-d", "--name", *run)
        docker.run(*docker_create_args(inputs, {inputs["image"]: NGINX_IMAGE})[1:])
        docker.run("cp", "-", f"{inputs['name']}:/", input=uploads_tar(vllm, api["internal"]))
        docker.run("start", inputs["name"])
        url = f"http://127.0.0.1:{inputs['ports'][0]['external']}"
        started = time.monotonic()
        while request(url, proxy.HEALTH_PATH, method="GET") != 200:
            if time.monotonic() - started > 10:
                pytest.fail(
                    f"no /health through the proxy; its log:\n{docker.run('logs', inputs['name']).stderr.decode()}"
                )
            time.sleep(0.2)
        print(f"\ne2e: the proxy answered /health on its published port after {time.monotonic() - started:.2f}s")
        yield Stack(docker, url, vllm, network["name"], standin_image)
    finally:
        docker.run("rm", "--force", inputs["name"], vllm, FILLER, check=False)
        docker.run("network", "rm", network["name"], check=False)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/invocations", "/tokenize", "/pooling"])
def test_without_the_key_401_and_vllm_sees_nothing(stack: Stack, path: str):
    before = stack.received()
    assert request(stack.url, path) == 401
    assert request(stack.url, path, {"Authorization": "Bearer wrong"}) == 401
    assert stack.received() == before


def test_with_the_key_forwarded_and_health_open(stack: Stack):
    assert request(stack.url, "/v1/chat/completions", BEARER) == 200
    assert stack.received()[-1] == ["POST", "/v1/chat/completions", f"Bearer {KEY}"]
    assert request(stack.url, proxy.HEALTH_PATH, method="GET") == 200
    assert stack.received()[-1] == ["GET", proxy.HEALTH_PATH, None]


def test_the_master_drops_its_worker_to_an_unprivileged_user(stack: Stack):
    """With ALL capabilities dropped but SETUID/SETGID, as the plan declares (the master alone reads the 0400 key)."""
    # ps shows "nginx: master process ..." and "nginx: worker process".
    processes = stack.docker.out("top", f"{stack.vllm}-proxy", "-o", "pid,uid,args").splitlines()[1:]
    users = {args.split()[1]: uid for _, uid, args in (line.split(None, 2) for line in processes)}
    assert users == {"master": "0", "worker": "65534"}, processes


def test_a_restarted_vllm_at_a_new_address_is_found_again(stack: Stack):
    docker = stack.docker
    old = stack.ip()
    # A plain restart gets the same address back here (measured); a container that joins the network while vLLM is
    # stopped makes it come back at another one, as a vLLM replaced or restarted beside other containers may.
    docker.run("stop", "--time=1", stack.vllm)
    # vLLM stopped: once nginx's cached address has expired (valid=10s), its name is unknown to Docker's DNS, which
    # asks the host's resolvers (none reachable from this test daemon): a 502 after resolver_timeout (5 s), not
    # after nginx's default 30 s (measured 30.0-38.7 s without it).
    time.sleep(11)
    asked = time.monotonic()
    assert request(stack.url, "/v1/models", BEARER, method="GET", timeout=20) == 502
    assert time.monotonic() - asked < 10
    docker.run(
        "run",
        "-d",
        "--name",
        FILLER,
        f"--network={stack.network}",
        stack.image,
        "python3",
        "-c",
        "import time; time.sleep(300)",
    )
    docker.run("start", stack.vllm)
    assert stack.ip() != old
    started = time.monotonic()
    # Until nginx re-resolves, it connects to the old address, where nothing answers: each try waits out its 2 s.
    while request(stack.url, "/v1/models", BEARER, method="GET", timeout=2) != 200:
        assert time.monotonic() - started < RERESOLVE_S, stack.docker.run("logs", f"{stack.vllm}-proxy").stderr.decode()
        time.sleep(0.5)
    print(f"\ne2e: vLLM moved {old} -> {stack.ip()}; forwarded again after {time.monotonic() - started:.1f}s")
    assert stack.received()[-1] == ["GET", "/v1/models", f"Bearer {KEY}"]
