"""tools/verify.py on the real Docker daemon of the e2e harness (tests/e2e/harness.py): the dev stack's checks run
through the `docker` SDK (7.2.0) over the daemon's unix:// socket, on stand-in GPU nodes and the stand-in image.

The stand-in image has Python's standard library but no torch, so programs/preflight.py really runs (against this
machine's /proc and /sys, bind-mounted read-only) and programs/gpucheck.py fails at `import torch`: what these tests
prove is the path (same containers as `pulumi up`, device mapping, exit codes, output, table), not GPU health.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from conftest import stack_file
from e2e.harness import Docker, import_standin_image, make_gpu_nodes, on_test_host, private_daemon
from tools.synth import synthesize
from tools.verify import checks_by_host, docker_client, table, verify


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
    rows = verify(plan, docker_client, progress.append)
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
    images = {c["image"] for _, checks in checks_by_host(plan).values() for c in checks}
    daemon_config = {"log-opts": {"compress": "true", "max-size": "10m"}}
    with (
        tempfile.TemporaryDirectory(prefix="rocm-stack-e2e-") as root,
        private_daemon(Path(root), daemon_config) as daemon,
    ):
        import_standin_image(daemon, images)
        rows = verify(on_test_host(plan, daemon.host, nodes.root), docker_client, lambda _: None)
    assert [(r.host, r.check, r.verdict) for r in rows][-1] == ("workstation", "log-opts", "fail"), table(rows)
    assert len(rows) == 4, table(rows)  # preflight, two partitions, one log-opts row
    first, fix = rows[-1].details.splitlines()
    assert "log options other than declared: compress=true (/etc/docker/daemon.json `log-opts`)" in first, first
    assert "max-size" not in first  # declared by the container: the daemon's 10m does not replace it
    assert fix.startswith("fix: remove these keys from `log-opts` in /etc/docker/daemon.json and restart dockerd")
