"""`gpuAccess: cdi` against the real docker CLI and daemon (issue 21 defect 6).

The machine's docker CLI is 28.x and its dockerd 20.10 (API 1.41), which has no CDI: the CLI still sends the
request and the daemon stores it, so `docker inspect` shows exactly what `--device amd.com/gpu=N` sends, and
what the Docker provider reads back; starting it is what fails without CDI, which HOST.sh checks first.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

import pytest

from conftest import cdi_stack
from e2e.harness import Docker, on_test_host
from tools.synth import docker_create_args, docker_scripts, synthesize

CONTAINER = "docker:index/container:Container"


@pytest.fixture(scope="module")
def plan(docker: Docker, tmp_path_factory: pytest.TempPathFactory):
    plan = on_test_host(synthesize("dev", cdi_stack()), docker.host, tmp_path_factory.mktemp("cdi-dev"))
    # An image of one file under each of the plan's references: `docker create` needs one, nothing runs it.
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("empty"), io.BytesIO())
    docker.run("import", "-", "rocm-stack-e2e-cdi:empty", input=archive.getvalue())
    for image in plan.of_type("docker:index/remoteImage:RemoteImage"):
        docker.run("tag", "rocm-stack-e2e-cdi:empty", image["inputs"]["name"])
    yield plan
    docker.remove_all_containers()


def _server_version(docker: Docker) -> str:
    return docker.out("version", "--format", "{{.Server.Version}}").strip()


def _without_cdi(docker: Docker) -> bool:
    """A daemon before 25.0 has no CDI (moby v25.0.0 daemon/cdi.go added the "cdi" device driver)."""
    return int(_server_version(docker).split(".")[0]) < 25


def test_the_clis_cdi_device_is_the_request_the_provider_declares_and_reads_back(docker: Docker, plan):
    """HOST.sh's `docker create ... --device=amd.com/gpu=0` of partition `train`, on the real CLI and daemon: the
    daemon stores one DeviceRequest {Driver: "cdi", Count: 0, DeviceIDs: ["amd.com/gpu=0"]} (docker/cli
    cli/command/container/opts.go L594-598 at v25.0.0), exactly the provider's request for the declared
    device_requests (terraform-provider-docker v4.5.0 deviceRequestsSetToDockerRequests: driver, count 0 by
    default, device_ids), and flattenDeviceRequests reads it back as declared (no capabilities, no options)."""
    (train,) = [c["inputs"] for c in plan.of_type(CONTAINER) if c["inputs"]["name"] == "train"]
    images = {
        plan.mock_outputs[r["urn"]]["imageId"]: r["inputs"]["name"]
        for r in plan.of_type("docker:index/remoteImage:RemoteImage")
    }
    argv = docker_create_args(train, images)
    assert "--device=amd.com/gpu=0" in argv
    docker.run(*argv[1:])
    stored = docker.inspect("train")["HostConfig"]["DeviceRequests"]
    assert stored == [
        {"Driver": "cdi", "Count": 0, "DeviceIDs": ["amd.com/gpu=0"], "Capabilities": None, "Options": None}
    ]
    (declared,) = train["deviceRequests"]
    assert {"driver": stored[0]["Driver"], "device_ids": stored[0]["DeviceIDs"], "count": stored[0]["Count"]} == {
        "driver": declared["driver"],
        "device_ids": declared["deviceIds"],
        "count": 0,  # the schema's default (resource_docker_container.go L789-794), not declared
    }
    if not _without_cdi(docker):
        return
    # What HOST.sh checks for: this daemon has no "cdi" driver registered, so the container cannot start.
    started = docker.run("start", "train", check=False)
    assert started.returncode != 0
    assert 'could not select device driver "cdi"' in started.stderr.decode()
    docker.run("rm", "train")


def test_the_host_script_stops_before_any_change_on_a_daemon_without_cdi(docker: Docker, plan, tmp_path: Path):
    """dockerd 20.10 (API 1.41) predates CDI: HOST.sh says which docker it found and what it needs, and exits 1
    before pulling or creating anything, where `pulumi up` would fail at the first container's start."""
    if not _without_cdi(docker):
        pytest.skip(f"dockerd {_server_version(docker)} is new enough; this test needs one without CDI")
    script = tmp_path / "workstation.sh"
    script.write_text(docker_scripts(plan)["workstation"])
    result = subprocess.run(["sh", str(script)], env=docker.env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "the CDI devices amd.com/gpu=N (gpuAccess cdi) need docker >= 25.0 (client and daemon)" in result.stderr
    assert _server_version(docker) in result.stderr
    assert docker.out("ps", "-aq") == ""
