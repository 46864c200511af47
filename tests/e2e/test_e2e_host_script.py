"""The dev stack's docker/HOST.sh, run on the real daemon, creates what the plan declares (docker inspect).

The plan is synthesized from the committed dev stack with two config values moved into the test's temporary
directory (the training checkpoint and model cache host directories, which `docker create -v` would
otherwise create under /var/lib); the script is rendered from it with nothing changed but the daemon address
and the device host paths (the stand-in nodes), and health checks probe every second (harness.with_health_interval:
dockerd 20.10 runs the first probe one interval after start). The stack's checks are off in the config: they need
real GPUs (test_e2e_render_nodes.py runs them on the CPU). Assertions read the plan's inputs, what the program
declared, so they hold whatever the Docker layer declares next.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import stack_file
from e2e.deployment import (
    Deployment,
    check_created_as_declared,
    check_gpu_nodes,
    check_health_checks,
    check_read_back_as_declared,
    check_running_or_exited_0,
    check_uploads,
    deploy,
)
from e2e.harness import Docker, make_gpu_nodes, on_test_host, with_health_interval
from tools.synth import synthesize


@pytest.fixture(scope="module")
def deployed(docker: Docker, standin_image: str, tmp_path_factory: pytest.TempPathFactory):
    tmp: Path = tmp_path_factory.mktemp("workstation")
    config = stack_file("dev")
    for workload, key, folder in (
        ("training", "checkpointDir", "checkpoints"),
        ("inference", "modelCacheDir", "huggingface"),
    ):
        for entry in config[f"rocm-stack:{workload}"]:
            entry["docker"][key] = str(tmp / folder)
    # The preflight and GPU checks need real GPUs and ROCm (programs/preflight.py, gpucheck.py): off here.
    config["rocm-stack:checks"] = {"enable": False}
    (host,) = config["rocm-stack:hosts"]
    nodes = make_gpu_nodes(tmp / "dev", gpus=host["gpus"])
    plan = with_health_interval(on_test_host(synthesize("dev", config), docker.host, nodes.root))
    yield deploy(docker, standin_image, plan, host["name"], nodes.root, tmp)
    docker.remove_all_containers()


def test_each_container_is_created_as_the_plan_declares(docker: Docker, deployed: Deployment):
    check_created_as_declared(docker, deployed)


def test_ipc_memory_and_logs_read_back_as_declared(docker: Docker, deployed: Deployment):
    assert check_read_back_as_declared(docker, deployed) == len(deployed.containers)


def test_health_checks_are_the_plans_commands(docker: Docker, deployed: Deployment):
    assert check_health_checks(docker, deployed), "the dev stack declares a container with a health check (vLLM)"


def test_uploaded_files_are_in_the_containers(docker: Docker, deployed: Deployment):
    assert check_uploads(docker, deployed), "the dev stack's training container gets its program as uploads"


def test_every_container_starts_and_runs_or_exits_0(docker: Docker, deployed: Deployment):
    check_running_or_exited_0(docker, deployed)


def test_running_containers_see_exactly_the_gpu_nodes_the_plan_maps(docker: Docker, deployed: Deployment):
    assert check_gpu_nodes(docker, deployed), "at least one container of the dev stack runs"
