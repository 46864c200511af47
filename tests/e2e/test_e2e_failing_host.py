"""A host where `pulumi up` must stop, deployed by its docker/HOST.sh on the real daemon (issue 12).

Host `node-b` (`gpuAccess: renderNodes`, 2 stand-in GPUs: renderD128 and renderD129) whose saved render-node map
names renderD130 for GPU 1, a node the host does not have (a stale map: the GPU was lost or re-partitioned).

- Partition `lost` (GPU 1): its GPU check gets the partition's exact device access, and dockerd refuses to start
  it: "error gathering device information while adding custom device ...: no such file or directory" (measured on
  dockerd 20.10; `docker create` still succeeds). So the partition's own container is never created and the script
  exits 1 naming it. Under `pulumi up` the same start error fails the check's create (terraform-provider-docker
  v4.5.0 internal/provider/resource_docker_container_funcs.go L586-587: `diag.Errorf("Unable to start container:
  %s", err)`), and the partition's container, which depends on the check, is not created.
- Partition `good` (GPU 0): its check passes (gpucheck's CPU mode, harness.on_cpu) and it serves a vLLM model whose
  server never gets healthy (the command replaced by one that prints a line and never listens; `waitTimeout`
  4 s instead of startupTimeoutSeconds + 40 s). The script gives up after waitTimeout and prints the server's
  last log lines. The provider's `wait` fails the update with only "container failed to be in healthy state"
  (same file, L590-622: errContainerFailedToBeInHealthyState, no logs; Pulumi names the resource), so after
  `pulumi up` the next step is `docker logs <name>` (docs/operations.md). Its health check container, which waits
  for it, is not created either.
- The rerun (issue 35 item 4): the next `pulumi up` passes the server's empty update (the engine's retry of an
  initialization error; the provider's update never waits) and creates the health check, which joins the server's
  network namespace, finds no /health within its limit (4 s here too) and exits 1: the stack fails, and keeps
  failing on that stored exit code (tests/test_vllm_health.py), until a healthy server replaces the container and
  its new check passes.
- A server that stops later (issue 35, with `must_run: false`): the healthy server crashes after its GPU's render
  node is gone; Docker's restart cannot start it ("error gathering device information") and leaves it exited with
  the crash's exit code, for good (moby daemon/monitor.go). The provider's refresh reads that exit code
  (terraform-provider-docker v4.5.0 funcs.go L815-816), and the stack fails every `pulumi up` on it, naming the
  server and `pulumi up --replace` (tests/test_vllm_health.py).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import stack_file
from e2e.deployment import Deployment, deploy
from e2e.harness import Docker, make_gpu_nodes, on_cpu, on_test_host, with_health_interval
from tools.synth import ProgramRefused, docker_create_args, mock_id, synthesize

WAIT_TIMEOUT_S = 4
NEVER_HEALTHY = ["python3", "-c", "print('loading model weights ...', flush=True); import time; time.sleep(3600)"]


def _config(tmp: Path, dev_root: Path) -> dict[str, Any]:
    # The KFD topology format (hosts/README.md): CPU node 0, then GPU 0 -> renderD128, GPU 1 -> renderD130.
    (tmp / "node-b.render-nodes.txt").write_text(
        "".join(
            f"/sys/class/kfd/kfd/topology/nodes/{node}/properties:drm_render_minor {minor}\n"
            for node, minor in enumerate((0, 128, 130))
        )
    )
    config = stack_file("dev")
    for key in ("kubernetes", "training"):
        config.pop(f"rocm-stack:{key}")
    config["rocm-stack:monitoring"] = {"enabled": False}
    config["rocm-stack:hosts"] = [
        {
            "name": "node-b",
            "gpus": 2,
            "gpuAccess": "renderNodes",
            "renderNodes": str(tmp / "node-b.render-nodes.txt"),
            "devicePaths": {"kfd": str(dev_root / "kfd"), "dri": str(dev_root / "dri")},
            "containers": [{"name": "good", "gpus": [0]}, {"name": "lost", "gpus": [1]}],
        }
    ]
    config["rocm-stack:inference"] = [
        {
            "name": "stuck",
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "docker": {
                "partitions": ["node-b/good"],
                "modelCacheDir": str(tmp / "huggingface"),
                "publishedPort": 18001,
            },
        }
    ]
    return config


@pytest.fixture(scope="module")
def deployed(docker: Docker, standin_image: str, tmp_path_factory: pytest.TempPathFactory):
    tmp: Path = tmp_path_factory.mktemp("failing-host")
    nodes = make_gpu_nodes(tmp / "dev", gpus=2)
    plan = on_cpu(
        with_health_interval(on_test_host(synthesize("dev", _config(tmp, nodes.root)), docker.host, nodes.root))
    )
    (server,) = [c["inputs"] for c in plan.of_type("docker:index/container:Container") if c["inputs"]["name"] == "good"]
    assert server["wait"] and server["command"][:2] == ["vllm", "serve"]
    server.update(command=NEVER_HEALTHY, waitTimeout=WAIT_TIMEOUT_S)
    (check,) = [
        c["inputs"] for c in plan.of_type("docker:index/container:Container") if c["inputs"]["name"] == "good-health"
    ]
    check["command"][-1] = str(WAIT_TIMEOUT_S)
    yield deploy(docker, standin_image, plan, "node-b", nodes.root, tmp)
    docker.remove_all_containers()


def _check_of(deployed: Deployment, partition: str) -> str:
    (name,) = [n for n in deployed.containers if n.startswith(f"gpucheck-{partition}-")]
    return name


def test_a_missing_render_node_fails_the_partitions_check_and_its_container_is_not_created(
    docker: Docker, deployed: Deployment
):
    check = _check_of(deployed, "lost")
    stderr = deployed.script.stderr
    assert deployed.script.returncode == 1
    assert f"lost: not created: {check}, which it waits for, failed" in stderr
    assert "error gathering device information while adding custom device" in stderr
    assert f"{deployed.dev_root}/dri/renderD130" in stderr
    inspected = docker.inspect(check)
    assert inspected["State"]["Status"] == "created"  # never started
    assert "/dev/dri/renderD130" in [d["PathInContainer"] for d in inspected["HostConfig"]["Devices"]]
    missing = docker.run("container", "inspect", "lost", check=False)
    assert missing.returncode != 0 and "No such container" in missing.stderr.decode()
    # The other partition passed its check and was created.
    assert docker.inspect(_check_of(deployed, "good"))["State"]["ExitCode"] == 0
    assert docker.inspect("good")["State"]["Running"]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("failed:") and set(last.removeprefix("failed:").split()) == {
        "good",
        "good-health",
        check,
        "lost",
    }
    assert "good-health: not created: good, which it waits for, failed" in stderr


def test_a_server_never_healthy_fails_with_its_last_log_lines(docker: Docker, deployed: Deployment):
    stderr = deployed.script.stderr
    header = f"good: not healthy after {WAIT_TIMEOUT_S}s; its last 20 log lines:"
    assert header in stderr
    assert "loading model weights ..." in stderr[stderr.index(header) :]
    assert docker.inspect("good")["State"]["Health"]["Status"] != "healthy"


def _run_check(docker: Docker, deployed: Deployment) -> tuple[int, str]:
    """The server's health check as the next `pulumi up` creates it: created, started, awaited (attach)."""
    inputs = deployed.containers["good-health"]
    server_id = mock_id("node-b-good")
    assert inputs["networkMode"] == f"container:{server_id}"
    docker.run("rm", "--force", "good-health", check=False)
    docker.run(*docker_create_args(inputs, {**deployed.images, server_id: "good"})[1:])
    run = docker.run("start", "--attach", "good-health", check=False, timeout=60)
    return docker.inspect("good-health")["State"]["ExitCode"], (run.stdout + run.stderr).decode()


def test_the_rerun_runs_the_health_check_which_fails_until_a_healthy_server_replaces_it(
    docker: Docker, deployed: Deployment, tmp_path: Path
):
    code, logs = _run_check(docker, deployed)
    assert code == 1 and f"not healthy after {WAIT_TIMEOUT_S} s" in logs and "Connection refused" in logs
    inspected = docker.inspect("good-health")
    assert inspected["HostConfig"]["NetworkMode"] == f"container:{docker.inspect('good')['Id']}"
    # The stack judges the stored result on this and every later `pulumi up`.
    nodes = make_gpu_nodes(tmp_path / "dev", gpus=2)
    for _ in ("rerun", "again"):
        with pytest.raises(ProgramRefused, match="vLLM server node-b/good: its health check failed \\(exit code 1\\)"):
            synthesize("dev", _config(tmp_path, nodes.root), run_results={"node-b-good-health": (code, logs)})

    # Fixed: the server is replaced by one that answers (the plan's own vLLM stand-in command): its new check passes.
    server = deployed.containers["good"]
    fixed = {**server, "command": [c for c in server["command"]]}
    fixed["command"] = ["vllm", "serve", "Qwen/Qwen2.5-0.5B-Instruct", "--host", "0.0.0.0", "--port", "8000"]
    docker.run("rm", "--force", "good")
    docker.run(*docker_create_args(fixed, deployed.images)[1:])
    docker.run("start", "good")
    code, logs = _run_check(docker, deployed)
    assert code == 0 and logs.strip().endswith("healthy"), logs


def test_a_server_whose_restart_fails_stays_exited_and_fails_every_up(
    docker: Docker, deployed: Deployment, tmp_path: Path
):
    server = deployed.containers["good"]
    assert server["restart"] == "unless-stopped" and not server["mustRun"]
    crashing = {**server, "command": ["python3", "-c", "import time; time.sleep(3); raise SystemExit(3)"]}
    docker.run("rm", "--force", "good")
    docker.run(*docker_create_args(crashing, deployed.images)[1:])
    node = deployed.dev_root / "dri" / "renderD128"
    assert f"{node}:/dev/dri/renderD128" in [f"{d['hostPath']}:{d['containerPath']}" for d in server["devices"]]
    device = node.stat()
    docker.run("start", "good")
    node.unlink()  # the GPU is gone: the crash's restart cannot start the container
    try:
        deadline = time.monotonic() + 30
        while (state := docker.inspect("good")["State"])["Running"] and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(3)  # Docker gave up: nothing restarts it later
        state = docker.inspect("good")["State"]
        assert (state["Status"], state["Running"], state["Restarting"], state["ExitCode"]) == (
            "exited",
            False,
            False,
            3,
        )
        assert "error gathering device information while adding custom device" in state["Error"]
        assert docker.inspect("good")["RestartCount"] == 1
    finally:
        os.mknod(node, device.st_mode, device.st_rdev)
        os.chown(node, device.st_uid, device.st_gid)
        os.chmod(node, device.st_mode & 0o777)
    # What the refresh then stores (funcs.go L815-816: a container that is not running), judged by the program.
    nodes = make_gpu_nodes(tmp_path / "dev", gpus=2)
    for _ in ("up", "again"):
        with pytest.raises(ProgramRefused) as refused:
            synthesize("dev", _config(tmp_path, nodes.root), read_back={"node-b-good": {"exitCode": state["ExitCode"]}})
        assert "vLLM server node-b/good: its container good is not running (exit code 3" in str(refused.value)
        assert "`pulumi up --replace 'urn:pulumi:dev::rocm-stack::" in str(refused.value)
