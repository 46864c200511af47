"""The monitoring host's Prometheus and a host's node-exporter on the real daemon, from the prod plan's own inputs.

Each container is created with the exact `docker create` argv that its docker/HOST.sh renders
(tools.synth.docker_create_args), its uploads copied in as HOST.sh copies them (one root-owned tar, before the
start), its named volume created as HOST.sh creates it. Changed: the image, a `docker import`ed stand-in holding this
machine's binaries (Debian's prometheus 2.42 and prometheus-node-exporter 1.5.0, which `.ci/run` installs) at the
paths the pinned images run them from (their entrypoints /bin/prometheus and /bin/node_exporter), since nothing can be
pulled here; Prometheus's `--network=host` (the harness never shares the machine's ports: its loopback-only network
namespace holds :9090 instead); node-exporter's data directory's host side (a temporary directory, not
/var/lib/rocm-stack on this machine). Servers are reached with `docker exec` (the harness forwards no port).

What this shows: node-exporter in its own mount namespace reports the bind-mounted checkpoint directory, by its
container path, with its filesystem's size, and nothing of the container's own files; it runs with a read-only root,
every capability dropped. Prometheus loads the uploaded configuration and the stack's rule file, keeps its data in the
named volume, takes the retention flags, and has the generated scrape targets with their labels. With a vLLM API key,
each host's scrape token reaches Prometheus through its own volume, derived there by the one-shot token container
(busybox, as in prom/prometheus), every host's real nginx proxy is scraped with its own token and refuses another
host's, and a rotated key reaches the running Prometheus (same process) at its next scrape. Grafana's start (the plan's
entrypoint, against stand-ins of the image's /run.sh and `grafana` CLI) resets the stored admin password whenever its
volume holds a database.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CONTAINER
from components.monitoring import PROMETHEUS_SECRETS, docker_host, vllm_metrics_token_file
from components.workloads import proxy
from e2e.harness import Docker, _add_bytes, _add_entry, _shared_libraries, standin_rootfs
import prometheus_versions
from tools.synth import SECRET, Plan, docker_create_args, synthesize, upload_text

NODE_EXPORTER = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
CHECKPOINTS = "/var/lib/rocm-stack/checkpoints"
# Docker refuses a tag with a digest: the stand-ins get tags of their own (the argv's image is swapped for them).
NODE_EXPORTER_IMAGE = "rocm-stack-e2e/node-exporter:standin"
PROMETHEUS_IMAGE = "rocm-stack-e2e/prometheus:standin"


BUSYBOX = shutil.which("busybox") or "/usr/bin/busybox"
# The busybox applets the one-shot containers' programs run (prom/prometheus is built on busybox: its Dockerfile
# @ v3.5.0 L3), as the image has them: links to /bin/busybox, /bin/sh among them.
APPLETS = ("sh", "cat", "sha256sum", "cut", "chmod", "mv", "rm", "kill", "test")


def with_binary(binary: str, at: str) -> bytes:
    """The stand-in root filesystem (Python for `docker exec` probes) with `binary` at `at` (both Debian builds link
    only libc, which the stand-in has), prom/prometheus's data directory and Debian's busybox for its shell and tools.
    It runs as root, the pinned images as nobody (65534), which owns /prometheus there."""
    buffer = io.BytesIO(standin_rootfs())
    out = io.BytesIO()
    busybox = Path(BUSYBOX)
    with tarfile.open(fileobj=buffer) as source, tarfile.open(fileobj=out, mode="w") as tar:
        names = set()
        for member in source.getmembers():
            if member.name.lstrip("/") == "bin/sh":
                continue
            names.add(member.name.lstrip("/"))
            tar.addfile(member, source.extractfile(member) if member.isfile() else None)
        _add_entry(tar, "/prometheus", tarfile.DIRTYPE, 0o777)
        _add_bytes(tar, at, Path(binary).read_bytes(), 0o755)
        for library in sorted(_shared_libraries([busybox])):
            if str(library).lstrip("/") not in names:
                _add_bytes(tar, str(library), library.read_bytes(), 0o755)
        _add_bytes(tar, "/bin/busybox", busybox.read_bytes(), 0o755)
        for applet in APPLETS:
            _add_entry(tar, f"/bin/{applet}", tarfile.SYMTYPE, target="busybox")
    return out.getvalue()


def import_image(docker: Docker, reference: str, binary: str, at: str) -> None:
    for needed in (binary, BUSYBOX):
        if not Path(needed).exists():
            if os.environ.get("CI"):
                pytest.fail(f"{needed} is missing (Debian: prometheus, prometheus-node-exporter, busybox)")
            pytest.skip(f"{needed} is not installed")
    image = docker.out(
        "import",
        "--change",
        "ENV PATH=/usr/local/bin:/usr/bin:/bin",
        "--change",
        f'ENTRYPOINT ["{at}"]',
        "-",
        input=with_binary(binary, at),
        timeout=300,
    ).strip()
    docker.run("tag", image, reference)


def uploads_tar(uploads: list[dict[str, Any]]) -> bytes:
    """The uploads as HOST.sh copies them: one tar, root-owned, each file with its declared mode."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for upload in uploads:
            directory = os.path.dirname(upload["file"])
            for depth in range(2, directory.count("/") + 2):
                _add_entry(tar, "/".join(directory.split("/")[:depth]), tarfile.DIRTYPE)
            text = upload_text(upload)  # its content, or the file its `source` names (by reference)
            assert text is not None
            _add_bytes(tar, upload["file"], text.encode(), int(upload["permissions"], 8))
    return buffer.getvalue()


def probe(docker: Docker, container: str, url: str, attempts: int = 60) -> str:
    """`url` fetched inside the container (its loopback), retried while the server starts."""
    script = f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=5).read().decode())"
    for _ in range(attempts):
        result = docker.run("exec", container, "python3", "-c", script, check=False)
        if result.returncode == 0:
            return result.stdout.decode()
        time.sleep(1)
    raise AssertionError(f"{url} never answered in {container}: {docker.out('logs', container, check=False)}")


@pytest.fixture(scope="module")
def prod() -> Plan:
    return synthesize("prod")


def test_node_exporter_reports_the_checkpoint_filesystem_alone(docker: Docker, prod: Plan, tmp_path):
    import_image(docker, NODE_EXPORTER_IMAGE, NODE_EXPORTER, "/bin/node_exporter")
    inputs = json.loads(json.dumps(prod.get(CONTAINER, "gpu-node-1-node-exporter")["inputs"]))
    assert [v["containerPath"] for v in inputs["volumes"]] == [CHECKPOINTS]
    inputs["volumes"][0]["hostPath"] = str(tmp_path)
    inputs["image"] = NODE_EXPORTER_IMAGE
    name = inputs["name"]
    try:
        docker.run(*docker_create_args(inputs, {})[1:])
        docker.run("start", name)
        metrics = probe(docker, name, "http://127.0.0.1:9100/metrics")
        sizes = {
            line.split('mountpoint="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("node_filesystem_size_bytes{")
        }
        # Only the data directory: the container's overlay root is excluded by its type, /etc/hosts & co. by the
        # mount-point pattern; its size is the host filesystem's (statvfs through the bind mount).
        stat = os.statvfs(tmp_path)
        assert sizes == {CHECKPOINTS: float(stat.f_blocks * stat.f_frsize)}, sizes
        # Mounted read-only, as node-exporter reads it.
        readonly = [line for line in metrics.splitlines() if line.startswith("node_filesystem_readonly{")]
        assert len(readonly) == 1 and readonly[0].endswith(" 1"), readonly
        state = docker.inspect(name)
        assert state["State"]["Running"] and state["HostConfig"]["ReadonlyRootfs"]
        assert state["HostConfig"]["CapDrop"] == ["ALL"]
    finally:
        docker.run("rm", "--force", name, check=False)


def active_targets(docker: Docker, name: str) -> list[dict[str, Any]]:
    return list(json.loads(probe(docker, name, "http://127.0.0.1:9090/api/v1/targets"))["data"]["activeTargets"])


def await_targets(docker: Docker, name: str, done, timeout: float = 30) -> list[dict[str, Any]]:
    """The active targets once `done(targets)`: discovery hands them to the scrape manager throttled (every 5 s)."""
    deadline = time.monotonic() + timeout
    while not done(targets := active_targets(docker, name)):
        assert time.monotonic() < deadline, (targets, docker.out("logs", name, check=False))
        time.sleep(1)
    return targets


def rule_groups(docker: Docker, name: str) -> dict[str, str]:
    groups = json.loads(probe(docker, name, "http://127.0.0.1:9090/api/v1/rules"))["data"]["groups"]
    return {g["name"]: g["file"] for g in groups}


def test_prometheus_takes_rules_and_targets_from_the_files_container_and_reloads_them_without_a_restart(
    docker: Docker, prod: Plan
):
    """Issue 38: Prometheus starts on its uploaded prometheus.yml with no rule file and no targets file yet (both are
    globs that match nothing), then the one-shot files container, joined to its PID namespace, writes them into
    their volume and sends SIGHUP: the rules load, the targets come from file_sd. A rules and targets change (what
    `pulumi up` does: the files container replaced) is picked up by the same Prometheus process, a new target up."""
    import_image(docker, PROMETHEUS_IMAGE, PROMETHEUS, "/bin/prometheus")
    inputs = json.loads(json.dumps(prod.get(CONTAINER, "gpu-node-1-prometheus")["inputs"]))
    writer = json.loads(json.dumps(prod.get(CONTAINER, "gpu-node-1-prometheus-files")["inputs"]))
    assert inputs.pop("networkMode") == "host"
    inputs["image"] = writer["image"] = PROMETHEUS_IMAGE
    name, volume = inputs["name"], inputs["volumes"][0]["volumeName"]
    (files,) = writer["volumes"]
    # pid_mode is the Prometheus container's ID (the mock's id of its resource here): the one created below.
    assert writer["pidMode"] == "container:gpu-node-1-prometheus-id" and writer["networkMode"] == "none"

    assert {**files, "readOnly": True} in inputs["volumes"]
    volumes = [volume, files["volumeName"], "rocm-stack-prometheus-token"]

    def write_files(uploads: list[dict[str, Any]]) -> None:
        """What `pulumi up` does with the files container: (re)creates it, copies its uploads in, starts it."""
        docker.run("rm", "--force", writer["name"], check=False)
        docker.run(*docker_create_args({**writer, "pidMode": f"container:{docker.inspect(name)['Id']}"}, {})[1:])
        docker.run("cp", "-", f"{writer['name']}:/", input=uploads_tar(uploads))
        docker.run("start", "--attach", writer["name"])
        written = docker.inspect(writer["name"])
        assert written["State"]["ExitCode"] == 0
        # What the provider reads back as pid_mode (funcs.go L955-956): the ID as sent, so no drift (a name would
        # come back as the ID).
        assert written["HostConfig"]["PidMode"] == f"container:{docker.inspect(name)['Id']}"

    # prod is keyed: prometheus.yml names the per-host vLLM jobs' file (scrape_config_files), which a Prometheus
    # before 2.43 refuses (tests/prometheus_versions.py). Before the files container's first write that glob matches
    # nothing, so the configuration 2.43 starts on is prometheus.yml without it; the per-host jobs: the test below.
    prometheus_versions.readable_by(PROMETHEUS, inputs["uploads"], docker_host.PROMETHEUS_CONFIG)

    try:
        for v in volumes:
            docker.run("volume", "create", v)
        docker.run(*docker_create_args(inputs, {})[1:])
        docker.run("cp", "-", f"{name}:/", input=uploads_tar(inputs["uploads"]))
        docker.run("start", name)
        assert rule_groups(docker, name) == {} and active_targets(docker, name) == []
        started = docker.inspect(name)["State"]

        write_files(writer["uploads"])
        groups = rule_groups(docker, name)
        assert groups and set(groups.values()) == {docker_host.PROMETHEUS_RULES}
        targets = await_targets(docker, name, lambda t: {x["labels"].get("host") for x in t} >= HOSTS)
        config = yaml.safe_load(upload_text(inputs["uploads"][0]) or "")
        jobs = [job["job_name"] for job in config["scrape_configs"]]
        assert {t["discoveredLabels"]["__meta_filepath"] for t in targets} == {
            docker_host.targets_file(j) for j in jobs
        }

        # A day-2 change: a new rule group, and the node-exporter targets now Prometheus itself (reachable here).
        changed = []
        for upload in writer["uploads"]:
            text = upload_text(upload)
            if upload["file"] == docker_host.PROMETHEUS_RULES:
                rules = yaml.safe_load(text)
                rules["groups"].append({"name": "e2e-reload", "rules": [{"record": "e2e:up", "expr": "up"}]})
                text = yaml.safe_dump(rules)
            elif upload["file"] == docker_host.targets_file("node-exporter"):
                text = yaml.safe_dump([{"targets": ["127.0.0.1:9090"], "labels": {"host": "e2e"}}])
            changed.append({"file": upload["file"], "content": text, "permissions": upload["permissions"]})
        write_files(changed)
        assert "e2e-reload" in rule_groups(docker, name)
        # "up" after discovery's throttle (5 s) and the first scrape, due anywhere within the scrape interval (prod's
        # 30 s): 30 s alone was short by a second under load.
        up = await_targets(
            docker,
            name,
            lambda t: any(x["labels"].get("host") == "e2e" and x["health"] == "up" for x in t),
            timeout=5 + 30 + 15,
        )
        assert not [t for t in up if t["labels"]["job"] == "node-exporter" and t["labels"].get("host") != "e2e"]
        state = docker.inspect(name)["State"]
        assert (state["Pid"], state["StartedAt"], state["Running"]) == (started["Pid"], started["StartedAt"], True)

        flags = json.loads(probe(docker, name, "http://127.0.0.1:9090/api/v1/status/flags"))["data"]
        # prod's retention {time: 30d, size: 200GiB}, passed as 204800MB and read back as 200GiB: "MB" is MiB.
        assert "--storage.tsdb.retention.size=204800MB" in inputs["command"]
        assert (flags["storage.tsdb.retention.time"], flags["storage.tsdb.retention.size"]) == ("30d", "200GiB")
        # The TSDB is in the named volume: it outlives the container; the files and the scrape token (the test
        # below) are read-only volumes of their own.
        mounts = docker.inspect(name)["Mounts"]
        assert sorted((m["Type"], m["Name"], m["Destination"], m["RW"]) for m in mounts) == [
            ("volume", volume, "/prometheus", True),
            ("volume", files["volumeName"], docker_host.PROMETHEUS_STACK_FILES, False),
            ("volume", "rocm-stack-prometheus-token", PROMETHEUS_SECRETS, False),
        ]
        listing = "import os; print(os.listdir('/v'))"
        assert "wal" in docker.out(
            "run", "--rm", "-v", f"{volume}:/v", "--entrypoint", "python3", PROMETHEUS_IMAGE, "-c", listing
        )
    finally:
        docker.run("rm", "--force", name, writer["name"], check=False)
        docker.run("volume", "rm", *volumes, check=False)


HOSTS = {"gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4"}


# A stand-in for vLLM's /metrics behind the proxies (the real nginx, proxy.py's configuration, below): it runs in
# Prometheus's container, whose loopback is the only network the private daemon gives it.
VLLM_STANDIN = """
import http.server
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'vllm:num_requests_waiting{model_name="m"} 0\\n'
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), Metrics).serve_forever()
"""
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
KEY, ROTATED = "first-key-0123456789abcdef0123456", "second-key-0123456789abcdef012345"


class Proxies:
    """Each keyed host's proxy: the real nginx on proxy.py's Docker configuration and that host's key map, in the
    Prometheus container's network namespace (nsenter, as root: the harness gives the container no other network),
    one port per host, in front of VLLM_STANDIN. `serve(key)` is what a rotation's proxy replacement does."""

    def __init__(self, root: Path, pid: int, ports: dict[str, int]) -> None:
        self.root, self.pid, self.ports = root, pid, ports
        self.processes: list[subprocess.Popen[bytes]] = []

    def serve(self, key: str) -> None:
        self.stop()
        for host, port in self.ports.items():
            conf, run = self.root / host / "conf", self.root / host / "run"
            shutil.rmtree(self.root / host, ignore_errors=True)
            conf.mkdir(parents=True)
            run.mkdir()
            (conf / proxy.CONFIG_FILE).write_text(
                proxy.nginx_config(port, "127.0.0.1:8000", proxy.DOCKER_OPEN_PATHS, proxy.DOCKER_SCRAPED_PATHS)
            )
            (conf / proxy.API_KEY_MAP).write_text(proxy.key_map(key, host))
            command = [NGINX, *proxy.proxy_command(str(conf), f"{run}/")[1:]]
            self.processes.append(
                subprocess.Popen(["nsenter", f"--net=/proc/{self.pid}/ns/net", *command], stderr=subprocess.PIPE)
            )

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
            process.wait(10)
        self.processes = []


def vllm_targets(docker: Docker, name: str) -> dict[str, dict[str, Any]]:
    """The `vllm` targets by host (none until discovery hands them to the scrape manager, every 5 s)."""
    targets = json.loads(probe(docker, name, "http://127.0.0.1:9090/api/v1/targets"))["data"]["activeTargets"]
    return {t["labels"]["host"]: dict(t) for t in targets if t["labels"]["job"] == "vllm"}


def await_health(
    docker: Docker, name: str, hosts: set[str], health: str, error: str = "", timeout: float = 30
) -> dict[str, Any]:
    """The `vllm` targets once every one of `hosts` has `health` and `error` in its last error."""
    deadline = time.monotonic() + timeout
    while True:
        targets = vllm_targets(docker, name)
        if {h: (t["health"], error in t["lastError"]) for h, t in targets.items()} == dict.fromkeys(
            hosts, (health, True)
        ):
            return targets
        assert time.monotonic() < deadline, (health, targets, docker.out("logs", name, check=False))
        time.sleep(0.5)


def test_each_hosts_token_reaches_prometheus_every_host_is_scraped_and_a_rotation_needs_no_restart(
    docker: Docker, prod: Plan, tmp_path: Path
):
    """Issue 34 item 9 on the real daemon, Prometheus and nginx: the token container (the plan's argv and program,
    busybox's sh and sha256sum as in prom/prometheus) derives each keyed host's token from the scrape secret into
    its volume, where Prometheus reads each host's job's credentials file; every host's proxy (its own key map) is
    scraped; a token read there opens no other host's proxy; the one token file of before goes. A rotated key
    (proxies replaced: 401) is taken up once the token container is replaced, by the same Prometheus process.

    prometheus.yml names the per-host jobs in `scrape_config_files`, which Debian's 2.42 refuses: a binary before
    2.43 gets the jobs inlined, as 2.43 builds them (tests/prometheus_versions.py)."""
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed (Debian: nginx-light)")
    import_image(docker, PROMETHEUS_IMAGE, PROMETHEUS, "/bin/prometheus")
    writer = json.loads(json.dumps(prod.get(CONTAINER, "gpu-node-1-prometheus-token")["inputs"]))
    server = json.loads(json.dumps(prod.get(CONTAINER, "gpu-node-1-prometheus")["inputs"]))
    files = prod.get(CONTAINER, "gpu-node-1-prometheus-files")["inputs"]["uploads"]
    # The secret is the writer's upload, hidden from the plan; Prometheus's files stay visible.
    assert writer["uploads"] == SECRET and server["uploads"] != SECRET
    (token_volume,) = writer["volumes"]
    assert token_volume["containerPath"] == PROMETHEUS_SECRETS
    assert {**token_volume, "readOnly": True} in server["volumes"]
    assert server.pop("networkMode") == "host"
    writer["image"] = server["image"] = PROMETHEUS_IMAGE
    # The per-host jobs as the files container writes them, each pointed at its host's proxy here, every second.
    per_host = {u["file"]: upload_text(u) or "" for u in files if u["file"] == docker_host.VLLM_SCRAPE_FILE}
    config_upload = next(u for u in server["uploads"] if u["file"] == docker_host.PROMETHEUS_CONFIG)
    config = yaml.safe_load(config_upload["content"])
    assert config["scrape_config_files"] == [docker_host.VLLM_SCRAPE_FILE]
    if not prometheus_versions.reads_scrape_config_files(PROMETHEUS):
        config = prometheus_versions.inlined(config, per_host)
    jobs = [j for j in config["scrape_configs"] if j["job_name"] not in docker_host.SHARED_JOBS]
    hosts = {j["job_name"].removeprefix("vllm-") for j in jobs}
    assert hosts == {"gpu-node-3", "gpu-node-4"}
    ports = {host: 8003 + n for n, host in enumerate(sorted(hosts))}
    for job in jobs:
        host = job["job_name"].removeprefix("vllm-")
        assert job["authorization"] == {"type": "Bearer", "credentials_file": vllm_metrics_token_file(host)}
        job["scrape_interval"] = "1s"
        for static in job["static_configs"]:
            static["targets"] = [f"127.0.0.1:{ports[host]}"]
    config["scrape_configs"] = jobs
    config_upload["content"] = yaml.safe_dump(config)
    volumes = [v["volumeName"] for v in server["volumes"]]
    stale = vllm_metrics_token_file("gpu-node-9")  # a removed host's token: the writer deletes it
    read_file = "import sys; print(open(sys.argv[1]).read().strip())"

    def write_tokens(key: str) -> None:
        """What `pulumi up` does with the writer (created again on a rotation): its uploads in the shape docker_host
        declares them (the secret, the hosts by reference), then its start; it must exit 0."""
        docker.run("rm", "--force", writer["name"], check=False)
        docker.run(*docker_create_args(writer, {})[1:])
        uploads = [
            {"file": docker_host.SCRAPE_SECRET, "content": proxy.scrape_secret(key), "permissions": "0444"},
            {
                "file": docker_host.SCRAPE_HOSTS,
                "content": "".join(f"{h}\n" for h in sorted(hosts)),
                "permissions": "0444",
            },
        ]
        docker.run("cp", "-", f"{writer['name']}:/", input=uploads_tar(uploads))
        docker.run("start", "--attach", writer["name"])
        assert docker.inspect(writer["name"])["State"]["ExitCode"] == 0, docker.out("logs", writer["name"])

    proxies: Proxies | None = None
    try:
        for volume in volumes:
            docker.run("volume", "create", volume)
        # A stack of before: the one fleet-wide token file, and a removed host's.
        before = [
            {"file": f"{PROMETHEUS_SECRETS}/vllm-metrics-token", "content": "old", "permissions": "0444"},
            {"file": stale, "content": "old", "permissions": "0444"},
        ]
        docker.run(
            "create",
            "--name",
            "e2e-before",
            "-v",
            f"{token_volume['volumeName']}:{PROMETHEUS_SECRETS}",
            PROMETHEUS_IMAGE,
        )
        docker.run("cp", "-", "e2e-before:/", input=uploads_tar(before))
        docker.run("rm", "e2e-before")
        write_tokens(KEY)
        docker.run(*docker_create_args(server, {})[1:])
        docker.run("cp", "-", f"{server['name']}:/", input=uploads_tar(server["uploads"]))
        docker.run("start", server["name"])
        docker.run("exec", "--detach", server["name"], "python3", "-c", VLLM_STANDIN)
        proxies = Proxies(tmp_path, docker.inspect(server["name"])["State"]["Pid"], ports)
        proxies.serve(KEY)
        targets = await_health(docker, server["name"], hosts, "up")
        assert {t["labels"]["job"] for t in targets.values()} == {"vllm"}
        listing = docker.out(
            "exec", server["name"], "python3", "-c", f"import os; print(sorted(os.listdir({PROMETHEUS_SECRETS!r})))"
        )
        assert listing.strip() == str(sorted(os.path.basename(vllm_metrics_token_file(h)) for h in hosts))
        for host in hosts:
            token = docker.out("exec", server["name"], "python3", "-c", read_file, vllm_metrics_token_file(host))
            assert token.strip() == proxy.metrics_token(KEY, host)
            mode = f"import os; print(oct(os.stat({vllm_metrics_token_file(host)!r}).st_mode & 0o777))"
            assert docker.out("exec", server["name"], "python3", "-c", mode).strip() == "0o444"
            # A token read on one host opens no other host's proxy.
            for other, port in ports.items():
                fetch = (
                    "import urllib.request, urllib.error; r = urllib.request.Request("
                    f"'http://127.0.0.1:{port}/metrics', headers={{'Authorization': 'Bearer {token.strip()}'}})\n"
                    "try: print(urllib.request.urlopen(r, timeout=5).status)\n"
                    "except urllib.error.HTTPError as e: print(e.code)"
                )
                status = docker.out("exec", server["name"], "python3", "-c", fetch).strip()
                assert status == ("200" if other == host else "401"), (host, other, status)
        mounted = {m["Destination"]: m for m in docker.inspect(server["name"])["Mounts"]}
        assert mounted[PROMETHEUS_SECRETS]["RW"] is False
        started = docker.inspect(server["name"])["State"]

        # The key is rotated: the proxies take their new tokens at once (replaced), every target down with a 401 (not
        # only refused while the proxies restart) ...
        proxies.serve(ROTATED)
        await_health(docker, server["name"], hosts, "down", "401")
        # ... until the writer's replacement puts the new tokens into the volume: up again, same Prometheus process.
        write_tokens(ROTATED)
        await_health(docker, server["name"], hosts, "up")
        state = docker.inspect(server["name"])["State"]
        assert (state["Pid"], state["StartedAt"], state["Running"]) == (started["Pid"], started["StartedAt"], True)
    finally:
        if proxies is not None:
            proxies.stop()
        docker.run("rm", "--force", server["name"], writer["name"], "e2e-before", check=False)
        docker.run("volume", "rm", *volumes, check=False)


GRAFANA_IMAGE = "rocm-stack-e2e/grafana:standin"
# Stand-ins for the grafana/grafana image's parts GRAFANA_START uses: its entrypoint /run.sh (here: creates the
# database with the admin password it is given, as Grafana's first start does, counts its starts, and serves
# nothing) and the `grafana` CLI (records its arguments and stdin; fails when told to, as on a too-short password).
GRAFANA_RUN = """#!/bin/sh
[ -e "$GF_PATHS_DATA/grafana.db" ] || printf %s "$GF_SECURITY_ADMIN_PASSWORD" > "$GF_PATHS_DATA/grafana.db"
echo started >> "$GF_PATHS_DATA/starts"
exec python3 -c 'import time; time.sleep(3600)'
"""
GRAFANA_CLI = """#!/bin/sh
echo "$@" > "$GF_PATHS_DATA/cli-args"
python3 -c 'import sys; sys.stdout.write(sys.stdin.read())' > "$GF_PATHS_DATA/cli-stdin"
[ ! -e "$GF_PATHS_DATA/cli-fails" ]
"""


def test_grafana_resets_the_stored_admin_password_on_every_start_with_a_database(docker: Docker, prod: Plan):
    """The plan's Grafana entrypoint (GRAFANA_START) in a container on the real daemon, on its named volume: the
    first start leaves the admin password to the server; a start after a rotation (a new container, the volume
    kept) feeds the new password to the CLI's stdin, exactly; a failed reset stops the start."""
    buffer, out = io.BytesIO(standin_rootfs()), io.BytesIO()
    with tarfile.open(fileobj=buffer) as source, tarfile.open(fileobj=out, mode="w") as tar:
        for member in source.getmembers():
            tar.addfile(member, source.extractfile(member) if member.isfile() else None)
        _add_entry(tar, "/var/lib/grafana", tarfile.DIRTYPE, 0o777)
        _add_bytes(tar, "/run.sh", GRAFANA_RUN.encode(), 0o755)
        _add_bytes(tar, "/usr/local/bin/grafana", GRAFANA_CLI.encode(), 0o755)
    paths = ["GF_PATHS_DATA=/var/lib/grafana", "GF_PATHS_HOME=/usr/share/grafana"]
    changes = [arg for env in ["PATH=/usr/local/bin:/usr/bin:/bin", *paths] for arg in ("--change", f"ENV {env}")]
    image = docker.out("import", *changes, "-", input=out.getvalue(), timeout=300).strip()
    docker.run("tag", image, GRAFANA_IMAGE)

    inputs = json.loads(json.dumps(prod.get(CONTAINER, "gpu-node-1-grafana")["inputs"]))
    assert inputs["envs"] == SECRET and inputs["entrypoints"] == ["/bin/sh", "-c", docker_host.GRAFANA_START]
    assert inputs.pop("networkMode") == "host"
    inputs.pop("uploads")  # provisioning files: tests/test_monitoring_host.py
    inputs["image"] = GRAFANA_IMAGE
    name, volume = inputs["name"], inputs["volumes"][0]["volumeName"]

    def start(password: str, starts: int) -> dict[str, Any]:
        """A new container (envs are ForceNew: a rotation replaces it) on the kept volume; its state once the server
        has started `starts` times in all, or once it has exited."""
        docker.run("rm", "--force", name, check=False)
        inputs["envs"] = ["GF_SERVER_HTTP_PORT=3000", f"GF_SECURITY_ADMIN_PASSWORD={password}"]
        docker.run(*docker_create_args(inputs, {})[1:])
        docker.run("start", name)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = docker.inspect(name)["State"]
            # An exit under `restart: unless-stopped` shows as Restarting (Running stays true).
            if state["Restarting"] or not state["Running"] or (read("starts") or "").count("started") == starts:
                return dict(state)
            time.sleep(0.5)
        raise AssertionError(f"{name}: neither started nor exited: {docker.out('logs', name, check=False)}")

    def read(path: str) -> str | None:
        script = f"import os; p = '/v/{path}'; print(open(p).read() if os.path.exists(p) else '<absent>', end='')"
        text = docker.out("run", "--rm", "-v", f"{volume}:/v", "--entrypoint", "python3", GRAFANA_IMAGE, "-c", script)
        return None if text == "<absent>" else text

    try:
        docker.run("volume", "create", volume)
        # First start: no database, no reset; the server creates the admin with the environment's password.
        assert not start("first-password", 1)["Restarting"]
        assert (read("cli-args"), read("grafana.db"), read("starts")) == (None, "first-password", "started\n")
        # The password rotated: the new container resets the stored one through the CLI, then the server starts.
        assert not start("rotated-password", 2)["Restarting"]
        assert (
            read("cli-args") == "cli --homepath /usr/share/grafana admin reset-admin-password --password-from-stdin\n"
        )
        assert read("cli-stdin") == "rotated-password"  # one line, no newline: what the CLI's scanner reads
        assert read("starts") == "started\n" * 2
        # A reset that fails stops the start: the old password never stays valid silently.
        docker.run(
            "run",
            "--rm",
            "-v",
            f"{volume}:/v",
            "--entrypoint",
            "python3",
            GRAFANA_IMAGE,
            "-c",
            "open('/v/cli-fails', 'w')",
        )
        state = start("x", 3)
        assert state["Restarting"] and state["ExitCode"] == 1, state
        assert "was not reset to grafanaAdminPassword" in docker.run("logs", name).stderr.decode()
        assert read("starts") == "started\n" * 2
    finally:
        docker.run("rm", "--force", name, check=False)
        docker.run("volume", "rm", volume, check=False)
