"""What a network neighbour of a Docker host and the host's own containers reach: the vLLM servers behind their key
proxy and the monitoring host's servers, on a real dockerd with its firewall on (issue 34).

Two network namespaces stand for two machines: `host`, where a private dockerd runs with iptables, ip-forward and
masquerading on (its defaults, as on a real host; harness.private_daemon `netns`), with `net.ipv4.ip_forward=1` set
before it starts, as GPU hosts often have it; and `neighbour`, a machine on the host's LAN (a veth pair), which routes
Docker's default address pools (172.16.0.0/12) through the host. With ip_forward already on, dockerd before 28 leaves
the FORWARD policy ACCEPT and drops nothing addressed to a container's unpublished port (moby#14041, moby#45610;
Docker 28 drops such packets in the raw table), so the neighbour reaches any address of any container on a bridge
network: the control cases below show it does here (dockerd 20.10, Debian's docker.io). Everything the daemon sets up
(rules, sysctls, bridges) lives in the `host` namespace and goes with it; the machine's own network is untouched.

vLLM: the dev stack with `rocm-stack:vllmApiKey`, its proxy created from the plan's own `docker create` argv (HOST.sh's,
tools.synth.docker_create_args) on the plan's network, nginx the machine's (test_e2e_vllm_proxy's image), and vLLM a
recorder in the plan's network mode listening where the plan's `--host`/`--port` say. Monitoring: the prod plan's
Prometheus and Alertmanager, the real binaries (Debian's prometheus, prometheus-alertmanager) in stand-in images, on
the host's network as the plan declares; a container on a bridge network tries them through its gateway, the
neighbour through the host's address.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import prometheus_versions
import pytest

from components.monitoring import docker_host
from conftest import CONTAINER
from e2e.harness import Docker, Unavailable, _add_bytes, _add_entry, import_standin_image, private_daemon
from e2e.test_e2e_monitoring_host import import_image, uploads_tar
from e2e.test_e2e_vllm_proxy import KEY, KeyedServer, recorder
from schema.monitoring import ALERTMANAGER_PORT, PROMETHEUS_PORT
from tools.synth import docker_create_args, mock_id, synthesize

HOST_ADDRESS, NEIGHBOUR_ADDRESS = "10.199.0.1", "10.199.0.2"
DOCKER_POOLS = "172.16.0.0/12"  # dockerd's default address pools for bridge networks
STANDIN = "rocm-stack-e2e/standin:neighbours"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
ALERTMANAGER_IMAGE = "rocm-stack-e2e/alertmanager:standin"
DEBIAN_TEMPLATES = "/usr/share/prometheus/alertmanager"
PROMETHEUS_IMAGE = "rocm-stack-e2e/prometheus:standin"

# The status of one request (0: nothing answered), printed by a Python run in a namespace or a container: a POST
# with a body (vLLM's API), a GET without.
REQUEST = """
import sys, urllib.request, urllib.error
url, key, method = sys.argv[1:4]
headers = {"Authorization": "Bearer " + key} if key else {}
data = b"{}" if method == "POST" else None
try:
    with urllib.request.urlopen(urllib.request.Request(url, data, headers, method=method), timeout=3):
        print(200)
except urllib.error.HTTPError as error:
    print(error.code)
except OSError:
    print(0)
"""


def debian_alertmanager_templates() -> bytes:
    """Debian's alertmanager reads its default notification templates from its package's directory (upstream's
    binary embeds them): a tar of them for the stand-in."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("/usr", "/usr/share", "/usr/share/prometheus", DEBIAN_TEMPLATES):
            _add_entry(tar, directory, tarfile.DIRTYPE)
        for template in Path(DEBIAN_TEMPLATES).glob("*.tmpl"):
            _add_bytes(tar, str(template), template.read_bytes())
    return buffer.getvalue()


@dataclass
class Neighbourhood:
    docker: Docker
    host: Path  # the host's network namespace (a file of /run/netns)
    neighbour: Path

    def status(self, where: Path, url: str, key: str = "", method: str = "POST") -> int:
        """A request from namespace `where`: its status, 0 where nothing answered."""
        out = subprocess.run(
            ["nsenter", f"--net={where}", sys.executable, "-c", REQUEST, url, key, method],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
        return int(out.strip() or 0)

    def from_container(self, network: str, url: str) -> int:
        """A GET from a container on `network` (a bridge on the host)."""
        run = ["run", "--rm", f"--network={network}", STANDIN, "python3", "-c", REQUEST, url, "", "GET"]
        out = self.docker.out(*run)
        return int(out.strip() or 0)

    def address(self, container: str, network: str) -> str:
        return self.docker.inspect(container)["NetworkSettings"]["Networks"][network]["IPAddress"]

    def gateway(self, network: str) -> str:
        return json.loads(self.docker.out("network", "inspect", network))[0]["IPAM"]["Config"][0]["Gateway"]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def hood() -> Iterator[Neighbourhood]:
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("ip") or not shutil.which("iptables"):
        reason = "needs root, dockerd, iproute2 and iptables (apt-get install docker.io, as .ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    suffix = str(os.getpid())
    host, neighbour = f"rs-host-{suffix}", f"rs-nb-{suffix}"
    with tempfile.TemporaryDirectory(prefix="rs-nb-") as tmp, contextlib.ExitStack() as cleanup:
        for name in (host, neighbour):
            _ip("netns", "add", name)
            cleanup.callback(subprocess.run, ["ip", "netns", "del", name], capture_output=True)
        _ip("link", "add", f"rsh{suffix}"[:15], "type", "veth", "peer", "name", f"rsn{suffix}"[:15])
        for link, name, address in (
            (f"rsh{suffix}"[:15], host, HOST_ADDRESS),
            (f"rsn{suffix}"[:15], neighbour, NEIGHBOUR_ADDRESS),
        ):
            _ip("link", "set", link, "netns", name)
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", link)
            _ip("-n", name, "link", "set", link, "up")
            _ip("-n", name, "link", "set", "lo", "up")
        _ip("-n", neighbour, "route", "add", DOCKER_POOLS, "via", HOST_ADDRESS)
        # /proc/sys/net is the reading process's network namespace's.
        forward = ["nsenter", f"--net=/run/netns/{host}", "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]
        subprocess.run(forward, check=True, capture_output=True)
        try:
            docker = cleanup.enter_context(private_daemon(Path(tmp), netns=Path("/run/netns", host)))
        except Unavailable as reason:
            pytest.fail(str(reason)) if os.environ.get("CI") else pytest.skip(str(reason))
        import_standin_image(docker, [STANDIN])
        yield Neighbourhood(docker, Path("/run/netns", host), Path("/run/netns", neighbour))


def await_status(
    check: Callable[[], int], expected: int, timeout: float = 30, log: Callable[[], str] = lambda: ""
) -> None:
    deadline = time.monotonic() + timeout
    while (got := check()) != expected:
        assert time.monotonic() < deadline, f"got {got}, waited for {expected}; {log()}"
        time.sleep(0.5)


def test_vllm_is_reached_only_through_its_key_proxy(hood: Neighbourhood):
    """The neighbour reaches the proxy's container address (the FORWARD policy is ACCEPT here: the control shows a
    server on the same network is reached), but vLLM listens on the proxy namespace's loopback alone: on no address
    the neighbour can route to does anything answer without the key."""
    docker = hood.docker
    server = KeyedServer.of_dev_plan()
    vllm, proxy_inputs, port, network = server.vllm, server.proxy["inputs"], server.port, server.network
    (api,) = proxy_inputs["ports"]
    # In the plan vLLM names the proxy's container ID (the mock's), as dockerd stores it.
    assert vllm["networkMode"] == f"container:{mock_id(server.proxy['name'])}"
    try:
        server.start(docker, STANDIN)
        # The control: a server on the same network listening on its every address, as vLLM did before issue 34.
        docker.run("run", "-d", "--name", "exposed", f"--network={network}", STANDIN, "python3", "-c", recorder(port))

        published = f"http://{HOST_ADDRESS}:{api['external']}/invocations"
        await_status(lambda: hood.status(hood.neighbour, published, KEY), 200)
        proxy_address = hood.address(proxy_inputs["name"], network)
        exposed = hood.address("exposed", network)
        # Routed around any proxy (once the recorder listens).
        await_status(lambda: hood.status(hood.neighbour, f"http://{exposed}:{port}/invocations"), 200)
        # The proxy, at its published port and its own address: the key or 401.
        assert hood.status(hood.neighbour, published) == 401
        assert hood.status(hood.neighbour, f"http://{proxy_address}:{api['internal']}/invocations") == 401
        assert hood.status(hood.neighbour, f"http://{proxy_address}:{api['internal']}/invocations", KEY) == 200
        # vLLM's own port, on every address of its namespace the neighbour routes to: nothing listens there.
        assert hood.status(hood.neighbour, f"http://{proxy_address}:{port}/invocations") == 0
        assert hood.status(hood.host, f"http://{proxy_address}:{port}/invocations") == 0
        seen = [json.loads(line) for line in docker.out("logs", vllm["name"]).splitlines() if line[:1] == "["]
        assert seen and all(authorization == f"Bearer {KEY}" for _, _, authorization in seen), seen
        print(f"\ne2e: neighbour -> {exposed}:{port} answered; {proxy_address}:{port} refused; {len(seen)} keyed")
    finally:
        docker.run("rm", "--force", "exposed", check=False)
        server.stop(docker)


def test_the_monitoring_servers_answer_the_hosts_loopback_alone(hood: Neighbourhood):
    """Prometheus and Alertmanager, the real binaries, with the prod plan's arguments on the host's network: the
    host's own loopback reaches them; a container on the host (through its bridge gateway) and the neighbour
    (through the host's address) do not. The control: a server on the host's every address is reached by both."""
    docker = hood.docker
    for binary in (PROMETHEUS, ALERTMANAGER):
        if not Path(binary).exists():
            pytest.fail(f"{binary} is missing (Debian: prometheus, prometheus-alertmanager)")
    import_image(docker, PROMETHEUS_IMAGE, PROMETHEUS, "/bin/prometheus")
    import_image(docker, ALERTMANAGER_IMAGE, ALERTMANAGER, "/bin/alertmanager")
    prod = synthesize("prod")
    servers = {
        "gpu-node-1-prometheus": (PROMETHEUS_IMAGE, PROMETHEUS_PORT, "/-/ready"),
        "gpu-node-1-alertmanager": (ALERTMANAGER_IMAGE, ALERTMANAGER_PORT, "/-/ready"),
    }
    names = []
    docker.run("network", "create", "--driver=bridge", "rs-tenant")
    control = subprocess.Popen(
        ["nsenter", f"--net={hood.host}", sys.executable, "-m", "http.server", "--bind", "0.0.0.0", "9999"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for resource, (image, port, ready) in servers.items():
            inputs = json.loads(json.dumps(prod.get(CONTAINER, resource)["inputs"]))
            assert inputs["networkMode"] == "host"
            inputs["image"] = image
            if image == PROMETHEUS_IMAGE:  # prod's prometheus.yml names scrape_config_files (Prometheus 2.43+)
                prometheus_versions.readable_by(PROMETHEUS, inputs["uploads"], docker_host.PROMETHEUS_CONFIG)
            names.append(inputs["name"])
            docker.run(*docker_create_args(inputs, {})[1:])
            docker.run("cp", "-", f"{inputs['name']}:/", input=uploads_tar(inputs["uploads"]))
            if image == ALERTMANAGER_IMAGE:
                docker.run("cp", "-", f"{inputs['name']}:/", input=debian_alertmanager_templates())
            docker.run("start", inputs["name"])
            # Answers on the host's loopback.
            local = f"http://127.0.0.1:{port}{ready}"
            answered = lambda: hood.status(hood.host, local, method="GET")  # noqa: B023, E731 (awaited here)
            name = inputs["name"]
            await_status(answered, 200, log=lambda: docker.run("logs", name, check=False).stderr.decode()[-1500:])  # noqa: B023
        gateway = hood.gateway("rs-tenant")
        await_status(lambda: hood.from_container("rs-tenant", f"http://{gateway}:9999/"), 200)
        assert hood.status(hood.neighbour, f"http://{HOST_ADDRESS}:9999/", method="GET") == 200
        for _, port, ready in servers.values():
            assert hood.from_container("rs-tenant", f"http://{gateway}:{port}{ready}") == 0
            assert hood.status(hood.neighbour, f"http://{HOST_ADDRESS}:{port}{ready}", method="GET") == 0
        assert (
            f"--web.listen-address={docker_host.LOOPBACK}:{ALERTMANAGER_PORT}"
            in prod.get(CONTAINER, "gpu-node-1-alertmanager")["inputs"]["command"]
        )
    finally:
        control.terminate()
        control.wait()
        docker.run("rm", "--force", *names, check=False)
        docker.run("network", "rm", "rs-tenant", check=False)
