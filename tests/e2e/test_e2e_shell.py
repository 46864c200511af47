"""A shell partition (no workload, no `command`) stays up on a real daemon (issue 24 item 1).

The pinned rocm/pytorch images' default command is a shell (ROCm/pytorch .ci/docker/ubuntu-rocm/Dockerfile, last
line `CMD ["bash"]`; ROCm/ROCm-docker framework/PyTorch/Dockerfile `CMD ["/bin/bash"]`). The stand-in image here is
that: this machine's bash and GNU coreutils' sleep, with `CMD ["bash"]`. The partition's container is created with
the plan's own `docker create` argv (tools.synth.docker_create_args, what docker/HOST.sh runs), only its image and
device paths swapped for the stand-ins.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from pathlib import Path

import pytest

from e2e.harness import Docker, _add_entry, _shared_libraries, make_gpu_nodes, on_test_host
from schema.docker import SHELL_COMMAND
from tools.synth import docker_create_args, synthesize

P = "rocm-stack:"
IMAGE = "rocm-stack-e2e/bash-cmd:1"
# README.md's minimal stack: a GPU host with two shells (on the test daemon, 2 GPUs).
README_STACK = {
    P + "hosts": [
        {
            "name": "gpu-node-1",
            "gpus": 2,
            "containers": [{"name": "train-a", "gpus": [0]}, {"name": "train-b", "gpus": [1]}],
        }
    ]
}


@pytest.fixture(scope="module")
def bash_image(docker: Docker) -> str:
    binaries = [Path(os.path.realpath(p)) for p in ("/bin/bash", "/usr/bin/sleep")]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for directory in ("/tmp", "/dev", "/proc", "/sys", "/etc", "/bin", "/usr/bin"):
            _add_entry(tar, directory, tarfile.DIRTYPE)
        copied = {*binaries, *_shared_libraries(binaries)}
        links = {p: Path(os.path.realpath(p)) for p in copied if os.path.realpath(p) != str(p)}
        for path in sorted((copied - links.keys()) | set(links.values())):
            tar.add(str(path), arcname=str(path).lstrip("/"), recursive=False)
        for link, target in sorted(links.items()):
            _add_entry(tar, str(link), tarfile.SYMTYPE, target=str(target))
        for binary in binaries:
            if binary.parent != Path("/usr/bin"):
                _add_entry(tar, f"/usr/bin/{binary.name}", tarfile.SYMTYPE, target=str(binary))
    image = docker.out(
        "import", "--change", "ENV PATH=/usr/bin:/bin", "--change", 'CMD ["bash"]', "-", input=buffer.getvalue()
    ).strip()
    docker.run("tag", image, IMAGE)
    return IMAGE


def readme_shell(docker: Docker, tmp_path: Path) -> dict:
    """The inputs of README_STACK's shell `train-a` as the plan declares them, on the test daemon's stand-in nodes."""
    nodes = make_gpu_nodes(tmp_path, gpus=2)
    plan = on_test_host(synthesize("dev", README_STACK), docker.host, nodes.root)
    return next(
        r["inputs"]
        for r in plan.of_type("docker:index/container:Container")
        if r["inputs"]["name"] == "train-a" and not r["inputs"].get("attach")
    )


def _state_after(docker: Docker, argv: list[str], seconds: float = 3.0) -> dict:
    docker.run(*argv[1:])
    name = next(a.split("=", 1)[1] for a in argv if a.startswith("--name="))
    try:
        docker.run("start", name)
        time.sleep(seconds)
        return docker.inspect(name)
    finally:
        docker.run("rm", "--force", name)


def test_a_shell_partition_stays_up_and_the_images_own_command_does_not(
    docker: Docker, bash_image: str, tmp_path: Path
):
    shell = readme_shell(docker, tmp_path)
    # mustRun false: a shell a person stopped stays stopped (tests/test_impact_limits.py); Docker restarts it otherwise.
    assert shell["command"] == list(SHELL_COMMAND) and not shell["mustRun"] and shell["restart"] == "unless-stopped"
    argv = docker_create_args(shell, {shell["image"]: bash_image})

    up = _state_after(docker, argv)
    assert up["State"]["Running"] and up["RestartCount"] == 0, up["State"]

    # What the plan declared before: no command, so the image's `bash` with no terminal and a closed stdin, which
    # exits 0 at once; `unless-stopped` restarts it in a loop.
    image_default = argv[: -len(SHELL_COMMAND)]
    assert image_default[-1] == bash_image
    looping = _state_after(docker, image_default)
    assert looping["Config"]["Cmd"] == ["bash"]
    assert looping["RestartCount"] >= 1 or looping["State"]["Restarting"], looping["State"]
    assert looping["State"]["ExitCode"] == 0


def _stop_seconds(docker: Docker, argv: list[str], *stop: str) -> tuple[float, dict]:
    """Creates and starts `argv`'s container, then times `docker stop` of it; its state after the stop."""
    docker.run(*argv[1:])
    name = next(a.split("=", 1)[1] for a in argv if a.startswith("--name="))
    try:
        docker.run("start", name)
        time.sleep(1)
        assert docker.inspect(name)["State"]["Running"]
        started = time.monotonic()
        docker.run("stop", *stop, name)
        return time.monotonic() - started, docker.inspect(name)
    finally:
        docker.run("rm", "--force", name)


def test_a_shell_stops_at_once_on_sigterm_under_the_init_and_sleep_as_pid_1_waits_for_sigkill(
    docker: Docker, bash_image: str, tmp_path: Path
):
    """`docker stop` as `pulumi up`'s replace does it (the plan's --stop-timeout, its destroyGraceSeconds, 30 s):
    under docker-init the shell ends on SIGTERM within a second, exit 143 (128 + 15: tini exits with the signal its
    child died of). Before (no --init), `sleep infinity` is PID 1 without a SIGTERM handler: the kernel drops the
    signal and the daemon kills it at the end of the timeout (exit 137), here a timeout of 3 s to keep the test short.
    """
    shell = readme_shell(docker, tmp_path)
    assert shell["init"] is True and shell["stopTimeout"] == shell["destroyGraceSeconds"] == 30
    argv = docker_create_args(shell, {shell["image"]: bash_image})
    assert "--init" in argv

    seconds, stopped = _stop_seconds(docker, argv)
    assert stopped["HostConfig"]["Init"] is True and stopped["Config"]["StopTimeout"] == 30
    assert stopped["State"]["ExitCode"] == 143 and seconds < 5, (seconds, stopped["State"])

    without_init = [a for a in argv if a != "--init"]
    seconds, stopped = _stop_seconds(docker, without_init, "-t", "3")
    assert stopped["State"]["ExitCode"] == 137 and 3 <= seconds < 10, (seconds, stopped["State"])
