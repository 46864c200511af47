"""tools/verify.py on the real Docker daemon of the e2e harness (tests/e2e/harness.py): the dev stack's checks run
through the `docker` SDK (7.2.0) over the daemon's unix:// socket, on stand-in GPU nodes and the stand-in image.

The stand-in image has Python's standard library but no torch, so programs/preflight.py really runs (against this
machine's /proc and /sys, bind-mounted read-only) and programs/gpucheck.py fails at `import torch`: what these tests
prove is the path (same containers as `pulumi up`, device mapping, exit codes, output, table), not GPU health.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import stack_file
from e2e.harness import Docker, import_standin_image, make_gpu_nodes, on_cpu, on_test_host, private_daemon
from domain.gpus import gpu_ranges
from tools.docker_endpoint import connect
from tools.synth import Plan, synthesize
from tools.verify import checks_by_host, deployed, docker_connect, verify
from tools.verify_common import table


@pytest.fixture(scope="module")
def plan_and_nodes(docker: Docker, standin_image: str, tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("verify")
    config = stack_file("dev")
    nodes = make_gpu_nodes(tmp / "dev", gpus=config["rocm-stack:hosts"][0]["gpus"])
    plan = on_test_host(synthesize("dev", config), docker.host, nodes.root)
    return plan, nodes


def test_verify_runs_each_check_on_the_host_and_reports_per_partition(docker: Docker, plan_and_nodes):
    plan, _ = plan_and_nodes
    progress: list[str] = []
    rows = verify(plan, docker_connect(), progress.append)
    assert progress[0] == f"[1/1] workstation ({docker.host}): 3 check(s) ..."
    assert progress[1].startswith("[1/1] workstation: done in ")
    # No `log-opts` row: this daemon's daemon.json has no `log-opts`, so each container keeps the declared options.
    assert [(r.host, r.check) for r in rows] == [
        ("workstation", "preflight"),
        ("workstation", "workstation/serve"),
        ("workstation", "workstation/train"),
    ]
    preflight, *checks = rows
    # This machine has no amdgpu: the preflight's findings, a warning in dev. The value it read is this machine's.
    assert preflight.verdict == "warn", preflight.details
    numa = Path("/proc/sys/kernel/numa_balancing")
    if numa.exists() and numa.read_text().strip() != "0":
        assert f"kernel.numa_balancing = {numa.read_text().strip()}" in preflight.details
    assert "gpu_count: no KFD topology" in preflight.details
    for check in checks:
        assert check.verdict == "fail" and "No module named 'torch'" in check.details, check.details
    text = table(rows)
    assert text.splitlines()[0].split() == ["HOST", "CHECK", "VERDICT", "DETAILS"]
    assert "workstation  workstation/serve  FAIL" in text
    # Each run's container is removed afterwards.
    assert not [n for n in docker.out("ps", "-a", "--format", "{{.Names}}").split() if n.endswith("-verify")]


def test_verify_fails_a_host_whose_daemon_adds_log_options(plan_and_nodes):
    """A daemon whose default driver is json-file (dockerd's default) with daemon.json `log-opts`: dockerd adds each
    key the container does not declare to its HostConfig.LogConfig (moby v20.10.24 daemon/logs.go L186-192
    mergeAndVerifyLogConfig, from daemon/create.go L170; docker-v29.7.2 daemon/logs.go L179-185, create.go L207);
    a key it declares keeps its own value. terraform-provider-docker v4.5.0 reads that map back
    (resource_docker_container_funcs.go L952, L983-989) and log_opts is ForceNew (resource_docker_container.go
    L894-899): a replacement of every container on every deploy, which verify reports once for the host."""
    plan, nodes = plan_and_nodes
    images = {c["image"] for host in checks_by_host(plan).values() for c in host.checks}
    daemon_config = {"log-opts": {"compress": "true", "max-size": "10m"}}
    with (
        tempfile.TemporaryDirectory(prefix="rocm-stack-e2e-") as root,
        private_daemon(Path(root), daemon_config) as daemon,
    ):
        import_standin_image(daemon, images)
        rows = verify(on_test_host(plan, daemon.host, nodes.root), docker_connect(), lambda _: None)
    assert [(r.host, r.check, r.verdict) for r in rows][-1] == ("workstation", "log-opts", "fail"), table(rows)
    assert len(rows) == 4, table(rows)  # preflight, two partitions, one log-opts row
    first, fix = rows[-1].details.splitlines()
    assert "log options other than declared: compress=true (/etc/docker/daemon.json `log-opts`)" in first, first
    assert "max-size" not in first  # declared by the container: the daemon's 10m does not replace it
    assert fix.startswith("fix: remove these keys from `log-opts` in /etc/docker/daemon.json and restart dockerd")


# --- Reaching the hosts: ssh through a real sshd, hosts that never answer, a daemon that stops answering -----------

CONNECT_S, CALL_S = 2.0, 2.0


def with_endpoint(plan: Plan, endpoint: str, ssh_opts: list[str] | None = None) -> Plan:
    """The plan with every Docker provider's `host` (and `sshOpts`) replaced."""
    for provider in plan.of_type("pulumi:providers:docker"):
        provider["inputs"]["host"] = endpoint
        if ssh_opts is not None:
            provider["inputs"]["sshOpts"] = ssh_opts
    return plan


@contextlib.contextmanager
def silent_listener(family: socket.AddressFamily, address: Any) -> Iterator[Any]:
    """A real listener that accepts every connection, holds it open and never sends a byte."""
    held: list[socket.socket] = []
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.bind(address)
        listener.listen()
        listener.settimeout(0.2)
        stop = False

        def accept() -> None:
            while not stop:
                with contextlib.suppress(TimeoutError, OSError):
                    held.append(listener.accept()[0])

        thread = threading.Thread(target=accept, daemon=True)
        thread.start()
        try:
            yield listener.getsockname()
        finally:
            stop = True
            thread.join()
            for connection in held:
                connection.close()
    assert held, "no connection was made"


@pytest.mark.parametrize("scheme", ["ssh", "tcp", "unix"])
def test_a_host_that_accepts_and_never_answers_is_one_line_within_the_time_limit(
    scheme, plan_and_nodes, tmp_path, monkeypatch, capsys
):
    """Before: the docker SDK's ssh client mode reads ssh's pipe with no time limit and passes ssh no
    ConnectTimeout (docker 7.2.0 transport/sshconn.py L35-43, L80-84), so this listener held verify for ever."""
    import tools.verify

    unix = scheme == "unix"
    family, address = (socket.AF_UNIX, str(tmp_path / "d.sock")) if unix else (socket.AF_INET, ("127.0.0.1", 0))
    with silent_listener(family, address) as bound:
        endpoint = f"unix://{bound}" if scheme == "unix" else f"{scheme}://127.0.0.1:{bound[1]}"
        plan = with_endpoint(copy.deepcopy(plan_and_nodes[0]), endpoint)
        monkeypatch.setattr(tools.verify, "synthesize", lambda stack: plan)
        began = time.monotonic()
        code = tools.verify.main(["--stack", "dev", "--connect-timeout", f"{CONNECT_S}", "--call-timeout", f"{CALL_S}"])
        took = time.monotonic() - began
    out = capsys.readouterr()
    assert code == 2, out
    # ssh's own ConnectTimeout (which also bounds the banner exchange: ssh_config(5)) ends it and says why; the
    # SDK's first call waits SSH_GRACE_S longer. unix:// and tcp:// end at the SDK's own read time-out.
    assert took < CONNECT_S + 5 + 3, took
    checks = out.out.split("\nFleet\n")[0]
    (line, *more) = [line for line in checks.splitlines()[1:] if line.strip()]
    assert not more, out.out
    assert line.split(None, 3)[:3] == ["workstation", "-", "ERROR"], out.out
    # The fleet table: the host is one row, its state why (rich folds a long cell onto the lines below it).
    row = fleet_rows(out.out)[0]
    assert row[:4] == ["workstation", "-", "-", "-"] and row[4].startswith("unreachable: cannot reach"), out.out
    assert row[5:] == ["ERROR", "-", "-"], out.out
    assert f"cannot reach {endpoint}: " in line
    if scheme == "ssh":
        assert "Connection timed out during banner exchange" in line, line
    else:
        assert line.endswith(f"no answer within {CONNECT_S:g} s"), line
    assert "Traceback" not in out.err and "workstation: unreachable in " in out.err


@contextlib.contextmanager
def ssh_server(root: Path) -> Iterator[tuple[str, list[str]]]:
    """Debian's sshd on a loopback port with a host key and a client key of its own; yields the ssh:// user@host:port
    and the `sshOpts` that reach it with strict host-key checking."""
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        if os.environ.get("CI"):
            pytest.fail("CI=1 needs sshd (apt-get install openssh-server, as .ci/run does)", pytrace=False)
        pytest.skip("sshd is not installed (apt-get install openssh-server)")
    root.mkdir()
    for key in ("host_key", "id"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(root / key)], check=True)
    (root / "authorized_keys").write_text((root / "id.pub").read_text())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (root / "sshd_config").write_text(
        f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {root}/host_key\nAuthorizedKeysFile {root}/authorized_keys\n"
        f"PidFile {root}/sshd.pid\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
    )
    (root / "known_hosts").write_text(f"[127.0.0.1]:{port} {(root / 'host_key.pub').read_text()}")
    Path("/run/sshd").mkdir(exist_ok=True)  # its privilege separation directory
    log = (root / "sshd.log").open("wb")
    process = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(root / "sshd_config")], stderr=log, stdin=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while subprocess.run(["ssh-keyscan", "-p", str(port), "127.0.0.1"], capture_output=True).returncode != 0:
            assert process.poll() is None and time.monotonic() < deadline, (root / "sshd.log").read_text()
            time.sleep(0.1)
        options = [f"UserKnownHostsFile={root}/known_hosts", "StrictHostKeyChecking=yes", f"IdentityFile={root}/id"]
        yield (
            f"ssh://root@127.0.0.1:{port}",
            [arg for option in [*options, "IdentitiesOnly=yes"] for arg in ("-o", option)],
        )
    finally:
        process.terminate()
        process.wait()
        log.close()


@pytest.fixture(scope="module")
def ssh_daemon(plan_and_nodes) -> Iterator[tuple[Docker, str, list[str]]]:
    """A private dockerd (its pid to stop it) behind a real sshd: the endpoint names the daemon's socket path, which
    docker/cli's helper turns into `docker --host=unix://PATH system dial-stdio` on the far side."""
    plan, _ = plan_and_nodes
    images = {c["image"] for host in checks_by_host(plan).values() for c in host.checks}
    with (
        tempfile.TemporaryDirectory(prefix="rocm-stack-e2e-") as root,
        private_daemon(Path(root)) as daemon,
        ssh_server(Path(root) / "ssh") as (address, ssh_opts),
    ):
        import_standin_image(daemon, images)
        yield daemon, f"{address}{daemon.host.removeprefix('unix://')}", ssh_opts


def test_verify_over_ssh_runs_the_checks_through_the_system_ssh_client(ssh_daemon, plan_and_nodes):
    daemon, endpoint, ssh_opts = ssh_daemon
    plan = with_endpoint(copy.deepcopy(plan_and_nodes[0]), endpoint, ssh_opts)
    rows = verify(plan, docker_connect(CONNECT_S, 30), lambda _: None)
    assert [(r.check, r.verdict) for r in rows] == [
        ("preflight", "warn"),
        ("workstation/serve", "fail"),
        ("workstation/train", "fail"),
    ], table(rows)
    assert all("No module named 'torch'" in r.details for r in rows[1:]), table(rows)
    assert not [n for n in daemon.out("ps", "-a", "--format", "{{.Names}}").split() if n.endswith("-verify")]


def test_a_daemon_that_stops_answering_fails_each_call_within_the_call_time_limit(ssh_daemon, plan_and_nodes):
    """Connected over ssh, then dockerd stops (SIGSTOP): each check's first call gets no answer; each is an ERROR
    row after --call-timeout instead of a hang (ssh is alive: only the socket's read time-out can end it)."""
    daemon, endpoint, ssh_opts = ssh_daemon
    pid = int((Path(daemon.host.removeprefix("unix://")).parent / "dockerd.pid").read_text())
    plan = with_endpoint(copy.deepcopy(plan_and_nodes[0]), endpoint, ssh_opts)

    @contextlib.contextmanager
    def connect_then_stop(endpoint: str, ssh_opts: Any) -> Iterator[Any]:
        with connect(endpoint, ssh_opts, CONNECT_S, CALL_S) as connected:
            os.kill(pid, signal.SIGSTOP)
            yield connected

    began = time.monotonic()
    try:
        rows = verify(plan, connect_then_stop, lambda _: None)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert time.monotonic() - began < CONNECT_S + 3 * (CALL_S + 1) + 5
    assert [(r.check, r.verdict, r.details) for r in rows] == [
        (check, "error", f"no answer within {CALL_S:g} s")
        for check in ("preflight", "workstation/serve", "workstation/train")
    ], table(rows)
    # Nor are the partitions' containers inspected after that (each would wait --call-timeout again).
    assert {f.state for f in rows.fleet} == {f"not inspected: no answer within {CALL_S:g} s"}


def test_a_partition_with_a_secret_environment_runs_with_its_deployed_environment(docker: Docker, plan_and_nodes):
    """Synth shows a secret environment as "[secret]" (the SDK then failed: TypeError "can only concatenate list (not
    "str") to list"): verify reads it from the check container `pulumi up` left on the host."""
    _, nodes = plan_and_nodes
    config = stack_file("dev")
    config["rocm-stack:hosts"][0]["containers"][0]["env"] = {"WANDB_API_KEY": {"secure": "v1:placeholder"}}
    plan = on_test_host(synthesize("dev", config), docker.host, nodes.root)
    secret = [c for host in checks_by_host(plan).values() for c in host.checks if c.get("envs") == "[secret]"]
    assert len(secret) == 2  # both partitions' checks: the host's environment is secret as a whole
    rows = verify(plan, docker_connect(), lambda _: None)
    for row in rows[1:]:
        assert row.verdict == "error" and "holds a Pulumi secret, which synth does not see" in row.details, row
        assert "run `pulumi up` first" in row.details
    try:
        for check in secret:  # what `pulumi up` leaves: the check container, exited, with the decrypted values
            docker.run(
                "create",
                "--name",
                check["name"],
                "-e",
                "WANDB_API_KEY=s3cret",
                "-e",
                "PYTHONPATH=/opt/rocm-stack",
                check["image"],
            )
        rows = verify(plan, docker_connect(), lambda _: None)
    finally:
        docker.run("rm", "--force", *(c["name"] for c in secret))
    assert [(r.check, r.verdict) for r in rows[1:]] == [("workstation/serve", "fail"), ("workstation/train", "fail")]
    assert all("No module named 'torch'" in r.details for r in rows[1:]), table(rows)


# --- The fleet table (issue 39): a row per host and partition, from the real daemon ----------------------------------

SLEEPS = ["python3", "-c", "import time; time.sleep(600)"]


def fleet_rows(text: str) -> list[list[str]]:
    """The fleet table's rows (after its header rule), cells split on runs of 2+ spaces."""
    lines = text.split("\nFleet\n", 1)[1].splitlines()
    rule = next(i for i, line in enumerate(lines) if line.strip() and set(line.strip()) == {"─"})
    return [[c.strip() for c in line.strip().split("  ") if c.strip()] for line in lines[rule + 1 :] if line.strip()]


def test_verify_ends_with_one_fleet_table_of_what_runs_on_the_host(docker: Docker, plan_and_nodes, monkeypatch, capsys):
    """Each partition's deployed container as dockerd reports it (state, RestartCount, image) and its GPU check just
    run, on the CPU (on_cpu: CPU torch, gloo), measured against a floor no CPU reaches (serve) and one any CPU
    passes (train): gpucheck's own comparison, so the floor column is what decided the verdict."""
    import tools.verify

    plan = on_cpu(copy.deepcopy(plan_and_nodes[0]))
    floors = {"gpucheck-serve": "1000000", "gpucheck-train": "0.000001"}
    for host in checks_by_host(plan).values():
        for check in host.checks:
            for prefix, floor in floors.items():
                if check["name"].startswith(prefix):
                    check["command"] += ["--min-tflops", floor]
    for resource in plan.of_type("docker:index/container:Container"):
        for prefix, floor in floors.items():
            if resource["inputs"]["name"].startswith(prefix):
                resource["inputs"]["command"] += ["--min-tflops", floor]
    partitions = checks_by_host(plan)["workstation"].partitions
    (serve, serve_image), (train, train_image) = partitions["workstation/serve"], partitions["workstation/train"]
    # serve runs; train's process exits 1 and its on-failure:2 policy restarts it twice, then it stays exited.
    docker.run("run", "-d", "--name", serve, serve_image, *SLEEPS)
    docker.run("run", "-d", "--name", train, "--restart", "on-failure:2", train_image, "python3", "-c", "exit(1)")
    try:
        deadline = time.monotonic() + 60
        while docker.out("inspect", "-f", "{{.State.Status}} {{.RestartCount}}", train).split() != ["exited", "2"]:
            assert time.monotonic() < deadline, docker.out("inspect", train)
            time.sleep(0.2)
        monkeypatch.setattr(tools.verify, "synthesize", lambda stack: plan)
        # One run on the daemon; the table and --json print its results.
        ran: list[Any] = []
        real = tools.verify.verify
        monkeypatch.setattr(
            tools.verify, "verify", lambda *a, **k: ran[0] if ran else ran.append(real(*a, **k)) or ran[0]
        )
        code = tools.verify.main(["--stack", "dev"])
        out = capsys.readouterr().out
        ids = {name: docker.out("inspect", "-f", "{{.Image}}", name).strip() for name in (serve, train)}
        payload_code = tools.verify.main(["--stack", "dev", "--json"])
        payload = json.loads(capsys.readouterr().out)
    finally:
        docker.run("rm", "--force", serve, train)
    assert code == payload_code == 1, out  # serve's check fails its floor
    assert out.rstrip().splitlines()[-1].split()[:2] == ["workstation", "train"], out  # the table ends the output
    rows = fleet_rows(out)
    assert [row[:2] for row in rows] == [["workstation", "serve"], ["workstation", "train"]], out
    by = {row[1]: row for row in rows}
    # GPUs as the dev stack file gives them, image ids as dockerd reports them (an imported image has no repository
    # digest), the states and RestartCount dockerd keeps.
    declared = {c["name"]: c["gpus"] for c in stack_file("dev")["rocm-stack:hosts"][0]["containers"]}
    assert by["serve"][2:5] == [gpu_ranges(declared["serve"]), ids[serve][:19], "running"], out
    assert by["train"][2:5] == [gpu_ranges(declared["train"]), ids[train][:19], "exited (1)"], out
    fleet = {f["partition"]: f for f in payload["fleet"]}
    # gpucheck's own measurement (CPU torch) against the floor it was given, as the table prints it.
    assert by["serve"][5] == "FAIL" and by["serve"][6] == f"{fleet['serve']['tflops']:.4g} < 1e+06", out
    assert by["train"][5] == "PASS" and by["train"][6] == f"{fleet['train']['tflops']:.4g} >= 1e-06", out
    assert by["serve"][7] == "0" and by["train"][7] == "2", out
    assert fleet["train"]["restarts"] == 2 and fleet["train"]["state"] == "exited (1)"
    assert fleet["serve"]["tflops"] < fleet["serve"]["floor"] == 1e6 and fleet["train"]["tflops"] >= 1e-6
    assert fleet["serve"]["image"] == ids[serve] and fleet["train"]["check"] == "pass"
    assert [(c["check"], c["verdict"]) for c in payload["checks"]][1:] == [
        ("workstation/serve", "fail"),
        ("workstation/train", "pass"),
    ]
    assert "TFLOP/s bf16 < --min-tflops 1e+06" in payload["checks"][1]["details"]
    # A partition whose container is not on the host.
    with connect(docker.host) as endpoint:
        assert deployed(endpoint.client, "no-such-partition", serve_image) == ("-", "absent", None)
