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
  `pulumi up` the next step is `docker logs <name>` (docs/operations.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import stack_file
from e2e.deployment import Deployment, deploy
from e2e.harness import Docker, make_gpu_nodes, on_cpu, on_test_host, with_health_interval
from tools.synth import synthesize

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
    assert last.startswith("failed:") and set(last.removeprefix("failed:").split()) == {"good", check, "lost"}


def test_a_server_never_healthy_fails_with_its_last_log_lines(docker: Docker, deployed: Deployment):
    stderr = deployed.script.stderr
    header = f"good: not healthy after {WAIT_TIMEOUT_S}s; its last 20 log lines:"
    assert header in stderr
    assert "loading model weights ..." in stderr[stderr.index(header) :]
    assert docker.inspect("good")["State"]["Health"]["Status"] != "healthy"
