"""tools/verify.py on the real Docker daemon of the e2e harness (tests/e2e/harness.py): the dev stack's checks run
through the `docker` SDK (7.2.0) over the daemon's unix:// socket, on stand-in GPU nodes and the stand-in image.

The stand-in image has Python's standard library but no torch, so programs/preflight.py really runs (against this
machine's /proc and /sys, bind-mounted read-only) and programs/gpucheck.py fails at `import torch`: what these tests
prove is the path (same containers as `pulumi up`, device mapping, exit codes, output, table), not GPU health.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import stack_file
from e2e.harness import Docker, make_gpu_nodes, on_test_host
from tools.synth import synthesize
from tools.verify import docker_client, table, verify


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
