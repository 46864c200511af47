"""Deadlines and read-back forms on the real daemon.

- A GPU check that hangs: the provider's create of an attached container waits for its exit under nothing but the
  create timeout (terraform-provider-docker v4.5.0 resource_docker_container_funcs.go L628-671), which the program
  now derives (components/docker/deadlines.py: checks.timeoutSeconds + 300 s, tested offline in test_deadlines.py).
  HOST.sh cuts `docker start --attach` at the plan's recorded deadline, shortened here to DEADLINE_S (the only change
  to the plan besides the daemon address, the device paths and the hanging command): the script fails the check
  and never creates its partition, as `pulumi up` stops there. `docker start --attach` forwards SIGTERM to the
  container and goes on waiting, so the script kills the CLI: the container keeps running, as the provider leaves it.
- Durations: dockerd stores a health check's durations in nanoseconds and Go formats them with
  time.Duration.String(), which is what the provider's Read stores (funcs.go L960-970); the docker CLI's
  `--format` runs the same Go formatter, so readback.go_duration is checked against Go itself here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from components.docker.readback import go_duration, parse_go_duration
from conftest import CONTAINER, stack_file
from e2e.deployment import Deployment, deploy
from e2e.harness import Docker, make_gpu_nodes, on_test_host
from tools.synth import synthesize

DEADLINE_S = 8
HANGS = ["python3", "-c", "print('all-reduce started', flush=True); import time; time.sleep(3600)"]


def _config() -> dict[str, Any]:
    config = stack_file("dev")
    for key in ("kubernetes", "training", "inference"):
        config.pop(f"rocm-stack:{key}")
    config["rocm-stack:monitoring"] = {"enabled": False}
    config["rocm-stack:hosts"] = [{"name": "node-h", "gpus": 1, "containers": [{"name": "part"}]}]
    return config


@pytest.fixture(scope="module")
def deployed(docker: Docker, standin_image: str, tmp_path_factory: pytest.TempPathFactory):
    tmp: Path = tmp_path_factory.mktemp("hung-check")
    nodes = make_gpu_nodes(tmp / "dev", gpus=1)
    plan = on_test_host(synthesize("dev", _config()), docker.host, nodes.root)
    (check,) = [c for c in plan.of_type(CONTAINER) if c["inputs"]["name"].startswith("gpucheck-part-")]
    assert parse_go_duration(check["custom_timeouts"]["create"]) > 900 * 10**9  # 900 s --timeout + margin
    check["inputs"]["command"] = HANGS
    check["custom_timeouts"]["create"] = f"{DEADLINE_S}s"
    yield deploy(docker, standin_image, plan, "node-h", nodes.root, tmp), check["inputs"]["name"]
    docker.remove_all_containers()


def test_a_hung_check_fails_the_script_at_its_deadline(docker: Docker, deployed: tuple[Deployment, str]):
    deployment, check = deployed
    stderr = deployment.script.stderr
    assert deployment.script.returncode == 1
    assert f"{check}: cut at its deadline of {DEADLINE_S} s" in stderr
    assert f"part: not created: {check}, which it waits for, failed" in stderr
    assert "all-reduce started" in deployment.script.stdout  # attached: its output streamed until the cut
    assert DEADLINE_S - 1 <= deployment.seconds < DEADLINE_S + 60  # the deadline is an epoch second (date +%s)
    assert docker.inspect(check)["State"]["Running"]  # the CLI was killed, not the check
    assert docker.run("container", "inspect", "part", check=False).returncode != 0


# Whole seconds, as the program declares them, and a fraction and sub-second value for the formatter's branches.
DURATIONS_S = ["1800s", "1840s", "3600s", "5430s", "90s", "30s", "10s", "0.5s", "1.25s"]


def test_go_formats_health_check_durations_as_the_table_says(docker: Docker, standin_image: str):
    name = "durations"
    for value in DURATIONS_S:
        docker.run("rm", "--force", name, check=False)
        docker.run(
            "create", f"--name={name}", "--health-cmd=true", f"--health-start-period={value}",
            f"--health-interval={value}", standin_image,
        )  # fmt: skip
        printed = docker.out(
            "inspect", "-f", "{{.Config.Healthcheck.StartPeriod}} {{.Config.Healthcheck.Interval}}", name
        )
        assert printed.split() == [go_duration(parse_go_duration(value))] * 2, value
    docker.run("rm", "--force", name)
