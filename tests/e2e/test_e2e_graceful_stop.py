"""A training stopped the way `pulumi up` stops it before a replace, on the real daemon: `docker stop -t <grace>`,
the ContainerStop call the provider's delete makes with `destroyGraceSeconds` (kreuzwerker/terraform-provider-docker
v4.5.0 internal/provider/resource_docker_container_funcs.go L1085-1093; moby/moby v28.5.2 daemon/stop.go: the stop
signal, the wait, then SIGKILL).

The stack: host `node` with 4 stand-in GPUs and two partitions, `stopped` (GPUs 0-1) and `reference` (GPUs 2-3),
both running the same training `tiny` (each partition its own run, 2 gloo processes on the CPU: harness.on_cpu),
deployed by its own docker/HOST.sh with the checks and the exporter off. `reference` runs to the end untouched;
`stopped` is stopped mid-run, then started again.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import stack_file
from e2e.deployment import Deployment, check_created_as_declared, deploy
from e2e.harness import Docker, make_gpu_nodes, on_cpu, on_test_host
from tools.synth import synthesize

STEPS, CHECKPOINT_EVERY = 150, 50
GRACE_S = 60
RUN_TIMEOUT_S = 300


def _config(tmp: Path, dev_root: Path) -> dict[str, Any]:
    config = stack_file("dev")
    for key in ("kubernetes", "inference"):
        config.pop(f"rocm-stack:{key}")
    config["rocm-stack:checks"] = {"enable": False}
    config["rocm-stack:monitoring"] = {"enabled": False}
    config["rocm-stack:hosts"] = [
        {
            "name": "node",
            "gpus": 4,
            "devicePaths": {"kfd": str(dev_root / "kfd"), "dri": str(dev_root / "dri")},
            "containers": [{"name": "stopped", "gpus": [0, 1]}, {"name": "reference", "gpus": [2, 3]}],
        }
    ]
    config["rocm-stack:training"] = [
        {
            "name": "tiny",
            "steps": STEPS,
            "checkpointEvery": CHECKPOINT_EVERY,
            "precision": "fp32",
            "env": {"TRAIN_LOG_EVERY": "1"},
            "docker": {
                "partitions": ["node/stopped", "node/reference"],
                "checkpointDir": str(tmp / "checkpoints"),
                "stopGraceSeconds": GRACE_S,
            },
        }
    ]
    return config


@pytest.fixture(scope="module")
def deployed(docker: Docker, standin_image: str, tmp_path_factory: pytest.TempPathFactory):
    tmp: Path = tmp_path_factory.mktemp("graceful-stop")
    nodes = make_gpu_nodes(tmp / "dev", gpus=4)
    plan = on_cpu(on_test_host(synthesize("dev", _config(tmp, nodes.root)), docker.host, nodes.root))
    yield deploy(docker, standin_image, plan, "node", nodes.root, tmp)
    docker.remove_all_containers()


def _runs(docker: Docker, name: str) -> list[list[dict[str, Any]]]:
    """programs/train.py's JSON lines in the container's log, one list per run (each begins with `start`)."""
    runs: list[list[dict[str, Any]]] = []
    for line in docker.out("logs", name).splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event["event"] == "start":
                runs.append([])
            runs[-1].append(event)
    return runs


def _of(run: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [e for e in run if e["event"] == kind]


def _wait_for(condition: Any, what: str, timeout: float = RUN_TIMEOUT_S) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return result


def _exited(docker: Docker, name: str) -> dict[str, Any]:
    return _wait_for(lambda: (s := docker.inspect(name))["State"]["Status"] == "exited" and s, f"{name} to exit")


def test_docker_stop_with_the_grace_checkpoints_the_current_step_and_a_restart_loses_none(
    docker: Docker, deployed: Deployment
):
    assert deployed.script.returncode == 0, deployed.script.stderr
    check_created_as_declared(docker, deployed)  # --stop-signal/--stop-timeout included: Read stores them as declared
    inputs = deployed.containers["stopped"]
    assert (inputs["destroyGraceSeconds"], inputs["stopSignal"], inputs["stopTimeout"]) == (GRACE_S, "SIGTERM", GRACE_S)
    _wait_for(lambda: (runs := _runs(docker, "stopped")) and _of(runs[0], "step"), "the first step")

    started = time.monotonic()
    docker.run("stop", "-t", str(inputs["destroyGraceSeconds"]), "stopped", timeout=GRACE_S + 30)
    seconds = time.monotonic() - started
    state = docker.inspect("stopped")
    (first,) = _runs(docker, "stopped")
    (stop,) = _of(first, "stop")
    print(
        f"\ne2e: docker stop -t {GRACE_S} of a 2-rank training returned after {seconds:.2f}s; rank 0 stopped "
        f"{stop['seconds_since_signal']}s after its SIGTERM, at step {stop['step']}"
    )
    step = stop["step"]
    assert step < STEPS, "the run ended before the stop: raise STEPS"
    assert seconds < GRACE_S, "Docker's SIGKILL came first"
    # Every step up to the stop ran once, the stop step was checkpointed, and no SIGKILL was needed: torchrun, the
    # main process (PID 1), forwarded SIGTERM and its workers exited 0 in time (torch multiprocessing/api.py
    # `_close` logs "Unable to shutdown process ... forcefully exiting via SIGKILL" otherwise), then it re-raised
    # the signal (launcher/api.py L391-397): exit 1, not Docker's SIGKILL 137.
    assert [e["step"] for e in _of(first, "step")] == list(range(1, step + 1))
    assert _of(first, "checkpoint")[-1]["step"] == step
    logs = docker.run("logs", "stopped").stderr.decode()
    assert "SignalException: Process 1 got signal: 15" in logs, logs[-3000:]
    assert "forcefully exiting" not in logs
    assert (state["State"]["ExitCode"], state["State"]["OOMKilled"], state["RestartCount"]) == (1, False, 0)
    directory = deployed.workdir / "checkpoints" / "tiny" / "stopped"
    assert re.fullmatch(rf"ckpt-{step:09d}-[0-9a-f]{{64}}\.pt", max(p.name for p in directory.glob("ckpt-*.pt")))

    docker.run("start", "stopped")
    assert _exited(docker, "stopped")["State"]["ExitCode"] == 0
    _, second = _runs(docker, "stopped")
    assert [e["step"] for e in _of(second, "resume")] == [step]
    assert [e["step"] for e in _of(second, "step")] == list(range(step + 1, STEPS + 1))
    assert _of(second, "done")[0]["resumed_from"] == step

    assert _exited(docker, "reference")["State"]["ExitCode"] == 0
    (reference,) = _runs(docker, "reference")
    # The same losses as the uninterrupted run of the same program in the other partition, step for step.
    losses = [e["loss"] for e in _of(first, "step") + _of(second, "step")]
    assert losses == [e["loss"] for e in _of(reference, "step")]
