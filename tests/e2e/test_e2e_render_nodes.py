"""A test stack with two partitions and `gpuAccess: renderNodes`, deployed on the real daemon by its own
docker/HOST.sh with the checks on, and its training run for real on the CPU.

The stack (`_config`): host `node` with 4 stand-in GPUs whose render minors are an MI300X host's (128, 136, 144, 152:
MI300-class GPUs reserve 8 minors each, so not 128 + index), saved in the KFD topology format that hosts/README.md
documents (`grep -H drm_render_minor /sys/class/kfd/kfd/topology/nodes/*/properties`, CPU node 0 included), and
`devicePaths` pointing at the mknod stand-ins (harness.make_gpu_nodes). Partition `trainer` (GPUs 0 and 2) runs the
training `tiny` (programs/train.py), partition `server` (GPU 1) the vLLM server (the stand-in `vllm`); GPU 3 is
nobody's.

The CPU stands in for the GPUs (harness.on_cpu): the project's .venv (CPU torch 2.13, requirements-dev.txt) has its
site-packages bind-mounted read-only at the site-packages of the stand-in image's Python (the same interpreter, so
torch imports as it would in a ROCm image), the image carries the system libraries torch's libraries load
(libstdc++, ...), and its `torchrun` is then torch's own (`python -m torch.distributed.run`). The training program's
backend is gloo instead of nccl, and each partition's GPU check runs gpucheck's CPU mode (gloo, one process). Nothing
else differs from what the program declared; the one HOST.sh renders it (tests/test_host_script.py: script and plan
agree flag by flag).

What the kernel enforces is real here: the device cgroup lets a container open only the nodes mapped into it
(test_e2e_engine.py), so "sees exactly its own render nodes" is isolation, not a convention.
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from components.docker.checks import PROGRAM_MOUNT
from conftest import PARTITION_LABEL, stack_file
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
from e2e.harness import Docker, make_gpu_nodes, on_cpu, on_test_host, with_health_interval
from schema.docker import VISIBILITY_VARIABLES
from tools.synth import synthesize

MINORS = (128, 136, 144, 152)
PARTITIONS = {"trainer": [0, 2], "server": [1]}
# What each partition must see: /dev/kfd and the render nodes of its GPUs' minors; no card*, nothing of GPU 3.
EXPECTED_NODES = {p: {"/dev/kfd", *(f"/dev/dri/renderD{MINORS[g]}" for g in gpus)} for p, gpus in PARTITIONS.items()}
# Enough steps that the test sees a checkpoint (polling every 20 ms) well before the run ends: after the first,
# 19 more checkpoints are written and synced to disk.
STEPS, CHECKPOINT_EVERY = 200, 10
RESTART_TIMEOUT_S = 120
# Each partition's /dev/shm (its workload's shmSize) and memory limit: two partitions beside each other get private
# IPC namespaces (schema.docker.with_ipc_decided).
SHM_MIB = {"trainer": 256, "server": 128}
MEMORY = {"trainer": "4GiB", "server": "2GiB"}


def kfd_topology(minors: tuple[int, ...]) -> str:
    """`grep -H drm_render_minor .../nodes/*/properties` of a host: CPU node 0 (minor 0), then one node per GPU."""
    return "".join(
        f"/sys/class/kfd/kfd/topology/nodes/{node}/properties:drm_render_minor {minor}\n"
        for node, minor in enumerate((0, *minors))
    )


def _config(tmp: Path, dev_root: Path) -> dict[str, Any]:
    (tmp / "node.render-nodes.txt").write_text(kfd_topology(MINORS))
    cpus = sorted(os.sched_getaffinity(0))
    config = stack_file("dev")
    config.pop("rocm-stack:kubernetes")
    config["rocm-stack:hosts"] = [
        {
            "name": "node",
            "gpus": len(MINORS),
            "gpuAccess": "renderNodes",
            "renderNodes": str(tmp / "node.render-nodes.txt"),
            "devicePaths": {"kfd": str(dev_root / "kfd"), "dri": str(dev_root / "dri")},
            "containers": [
                {
                    "name": "trainer",
                    "gpus": PARTITIONS["trainer"],
                    "cpuset": ",".join(map(str, cpus)),
                    "memory": MEMORY["trainer"],
                },
                {"name": "server", "gpus": PARTITIONS["server"], "cpuset": str(cpus[-1]), "memory": MEMORY["server"]},
            ],
            "logs": {"maxSize": "10MiB", "maxFile": 2},
        }
    ]
    config["rocm-stack:training"] = [
        {
            "name": "tiny",
            "steps": STEPS,
            "checkpointEvery": CHECKPOINT_EVERY,
            "precision": "fp32",
            "shmSize": f"{SHM_MIB['trainer']}MiB",
            "env": {"TRAIN_LOG_EVERY": str(CHECKPOINT_EVERY)},
            "docker": {"partitions": ["node/trainer"], "checkpointDir": str(tmp / "checkpoints"), "maxRetries": 3},
        }
    ]
    config["rocm-stack:inference"] = [
        {
            "name": "qwen-small",
            "model": "Qwen/Qwen2.5-0.5B-Instruct",
            "shmSize": f"{SHM_MIB['server']}MiB",
            "docker": {
                "partitions": ["node/server"],
                "modelCacheDir": str(tmp / "huggingface"),
                "publishedPort": 18000,
                "ip": "127.0.0.1",
            },
        }
    ]
    return config


@pytest.fixture(scope="module")
def deployed(docker: Docker, standin_image: str, tmp_path_factory: pytest.TempPathFactory):
    tmp: Path = tmp_path_factory.mktemp("render-nodes")
    nodes = make_gpu_nodes(tmp / "dev", gpus=len(MINORS), minors=MINORS)
    plan = on_cpu(
        with_health_interval(on_test_host(synthesize("dev", _config(tmp, nodes.root)), docker.host, nodes.root))
    )
    yield deploy(docker, standin_image, plan, "node", nodes.root, tmp)
    docker.remove_all_containers()


def _partition(inputs: dict[str, Any]) -> str | None:
    return next((label["value"] for label in inputs.get("labels", []) if label["label"] == PARTITION_LABEL), None)


def _seen(docker: Docker, name: str) -> set[str]:
    """The GPU device nodes in a container: listed inside a running one, from docker inspect for an exited one."""
    if docker.inspect(name)["State"]["Running"]:
        return set(
            docker.out(
                "exec",
                name,
                "python3",
                "-c",
                "import os; print('\\n'.join(os.path.join(d, f) "
                "for d, _, fs in os.walk('/dev') for f in fs if d.startswith('/dev/dri') "
                "or f == 'kfd'))",
            ).split()
        )
    return {d["PathInContainer"] for d in docker.inspect(name)["HostConfig"]["Devices"] or []}


def _events(docker: Docker, name: str) -> list[dict[str, Any]]:
    """programs/train.py's JSON lines (rank 0's stdout) in the container's log, over every run of it."""
    events = []
    for line in docker.out("logs", name).splitlines():
        if line.startswith("{"):
            events.append(json.loads(line))
    return events


def _steps_on_disk(directory: Path) -> list[int]:
    return sorted(int(m[1]) for p in directory.glob("ckpt-*.pt") if (m := re.match(r"ckpt-(\d+)-", p.name)))


def _wait_for(condition: Any, what: str, timeout: float = RESTART_TIMEOUT_S, poll: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(poll)
    return result


def _shm(docker: Docker, name: str, code: str) -> str:
    return docker.out("exec", name, "python3", "-c", f"import os; d = '/dev/shm'; {code}").strip()


def test_two_partitions_of_a_host_share_no_shm_and_each_has_its_size(docker: Docker, deployed: Deployment):
    """With private IPC each partition has its own /dev/shm of its shmSize: a file one writes there is absent in the
    other (and on the host). Under --ipc=host both would see the host's /dev/shm and its size (moby v20.10.24
    daemon/container_operations_unix.go L117-121; measured on dockerd 20.10: a file written in one was read in the
    other). First: it needs the trainer still running (the training test after it runs 2 gloo ranks under it)."""
    assert {p: docker.inspect(p)["HostConfig"]["IpcMode"] for p in PARTITIONS} == dict.fromkeys(PARTITIONS, "private")
    marker = f"rocm-stack-e2e-{os.getpid()}"
    for writer, reader in (("trainer", "server"), ("server", "trainer")):
        path = f"os.path.join(d, '{marker}-{writer}')"
        _shm(docker, writer, f"open({path}, 'w').write('{writer}')")
        assert _shm(docker, writer, f"print(os.path.exists({path}))") == "True"
        assert _shm(docker, reader, f"print(os.path.exists({path}))") == "False"
        assert not Path("/dev/shm", f"{marker}-{writer}").exists()
    for partition in PARTITIONS:
        size = _shm(docker, partition, "s = os.statvfs(d); print(s.f_blocks * s.f_frsize)")
        assert int(size) == SHM_MIB[partition] * 1024 * 1024 == deployed.containers[partition]["shmSize"] * 1024 * 1024


def test_training_checkpoints_into_its_volume_and_resumes_after_a_crash(docker: Docker, deployed: Deployment):
    """The training runs in its container (2 gloo processes, one per partition GPU), checkpoints into the host
    directory <checkpointDir>/<training>/<partition>; its main process killed (SIGKILL from the host, as the OOM
    killer or a crash ends it), the restart policy (on-failure) starts it again and train.py resumes from the
    newest checkpoint and runs to the end. Not `docker kill`: the Docker CLI manual (moby/moby man/docker-kill.1.md
    @ 8d1403e6): "If a restart policy is set on the container, the restart policy is disabled until the next time
    the container is started"; measured on dockerd 20.10: after `docker kill` an on-failure container stays exited
    (137, RestartCount 0), after a SIGKILL of its main process from the host it is restarted.
    Right after the /dev/shm test: the run uses both CPUs until it ends."""
    directory = deployed.workdir / "checkpoints" / "tiny" / "trainer"
    pid = docker.inspect("trainer")["State"]["Pid"]
    # Inside, while it runs: exactly its own render nodes (the isolation test below reads the rest).
    assert _seen(docker, "trainer") == EXPECTED_NODES["trainer"]
    _wait_for(lambda: _steps_on_disk(directory), "a checkpoint", poll=0.02)
    os.kill(pid, signal.SIGKILL)
    _wait_for(lambda: docker.inspect("trainer")["State"]["Pid"] != pid, "the kill")
    newest = _steps_on_disk(directory)[-1]  # the killed run writes no more; the new one has not started yet
    assert newest < STEPS, "the run ended before the test saw a checkpoint: raise STEPS"
    _wait_for(lambda: any(e["event"] == "resume" for e in _events(docker, "trainer")), "the resume")
    assert docker.inspect("trainer")["RestartCount"] == 1
    events = _events(docker, "trainer")
    (resume,) = [e for e in events if e["event"] == "resume"]
    assert resume["step"] == newest
    assert re.fullmatch(rf"/checkpoints/ckpt-{newest:09d}-[0-9a-f]{{64}}\.pt", resume["checkpoint"]), resume
    after = _wait_for(
        lambda: [e for e in _events(docker, "trainer")[events.index(resume) :] if e["event"] == "step"],
        "a step after the resume",
    )
    assert after[0]["step"] == newest + CHECKPOINT_EVERY  # logged every CHECKPOINT_EVERY steps: continued, not anew
    done = _wait_for(lambda: [e for e in _events(docker, "trainer") if e["event"] == "done"], "the end of the run")
    assert (done[0]["resumed_from"], done[0]["steps_run"]) == (newest, STEPS - newest)
    state = _wait_for(lambda: (s := docker.inspect("trainer"))["State"]["Status"] == "exited" and s, "the exit")
    assert (state["State"]["ExitCode"], state["RestartCount"]) == (0, 1)  # done: on-failure leaves it exited
    starts = [e for e in _events(docker, "trainer") if e["event"] == "start"]
    assert [(s["world_size"], s["backend"]) for s in starts] == [(2, "gloo"), (2, "gloo")]
    assert _steps_on_disk(directory)[-1] == STEPS


def test_every_container_is_created_started_and_as_the_plan_declares(docker: Docker, deployed: Deployment):
    """HOST.sh exits 0 with the checks on; devices, groups, IPC mode, shm size, cpuset, ports, restart policy,
    environment, command as the plan says (docker inspect); each runs or, a one-shot, exited 0."""
    check_running_or_exited_0(docker, deployed)
    check_created_as_declared(docker, deployed)
    assert check_read_back_as_declared(docker, deployed) == len(deployed.containers)
    assert docker.inspect("trainer")["HostConfig"]["LogConfig"] == {
        "Type": "json-file",
        "Config": {"max-file": "2", "max-size": "10m"},
    }
    assert check_health_checks(docker, deployed) == 1, "the vLLM server has a health check"
    assert check_uploads(docker, deployed), "the training program and the checks' programs are uploads"
    assert check_gpu_nodes(docker, deployed), "the partitions' containers run"
    server = docker.inspect("server")["HostConfig"]
    assert server["PortBindings"] == {"8000/tcp": [{"HostIp": "127.0.0.1", "HostPort": "18000"}]}
    assert server["IpcMode"] == "private" and server["RestartPolicy"] == {
        "Name": "unless-stopped",
        "MaximumRetryCount": 0,
    }
    assert docker.inspect("trainer")["HostConfig"]["RestartPolicy"] == {"Name": "on-failure", "MaximumRetryCount": 3}


def test_each_partition_sees_exactly_its_own_render_nodes_and_kfd(docker: Docker, deployed: Deployment):
    """ROCm docs, "GPU isolation techniques" / "Restricting GPU access": /dev/kfd plus only the partition's
    /dev/dri/renderD<minor>; the minors come from the host's map, never 128 + index. A whole /dev/dri (every
    card* and renderD* node, GPU 3's included) fails this, in the partition's container and in its GPU check."""
    expected = EXPECTED_NODES
    seen: dict[str, dict[str, set[str]]] = {p: {} for p in PARTITIONS}
    for name, inputs in deployed.containers.items():
        partition = _partition(inputs)
        if partition is not None:
            seen[partition.removeprefix("node/")][name] = _seen(docker, name)
    assert {p: sorted(by_name) for p, by_name in seen.items()} == {
        "trainer": sorted(["trainer", *(n for n in deployed.containers if n.startswith("gpucheck-trainer-"))]),
        "server": sorted(["server", *(n for n in deployed.containers if n.startswith("gpucheck-server-"))]),
    }
    for partition, by_name in seen.items():
        for name, nodes in by_name.items():
            assert nodes == expected[partition], (partition, name)
    # The host paths behind them are the stand-in nodes of those minors.
    trainer = {d["PathInContainer"]: d["PathOnHost"] for d in docker.inspect("trainer")["HostConfig"]["Devices"]}
    assert trainer["/dev/dri/renderD144"] == str(deployed.dev_root / "dri" / "renderD144")


def test_no_visibility_variable_and_no_group_names(docker: Docker, deployed: Deployment):
    """With device-level isolation a container sees its GPUs as 0..N-1: a visibility variable with host indices
    would select wrong GPUs or none (issue 11), so none is set. Groups: numeric host GIDs or none (Docker
    resolves a name in the image's /etc/group: test_e2e_engine.py); this stack sets none, and root opens the
    nodes regardless."""
    for name in deployed.containers:
        inspected = docker.inspect(name)
        env = {e.split("=", 1)[0] for e in inspected["Config"]["Env"]}
        assert not env & set(VISIBILITY_VARIABLES), name
        groups = inspected["HostConfig"]["GroupAdd"] or []
        assert all(re.fullmatch(r"\d+", g) for g in groups), (name, groups)
        assert groups == [], name


def test_the_gpu_checks_ran_with_the_partitions_device_access_and_passed(docker: Docker, deployed: Deployment):
    """Each partition's gpucheck container ran programs/gpucheck.py (uploaded) to the end: its JSON says pass."""
    checks = [n for n in deployed.containers if n.startswith("gpucheck-")]
    assert len(checks) == len(PARTITIONS)
    for name in checks:
        state = docker.inspect(name)["State"]
        report = json.loads(docker.out("logs", name).strip().splitlines()[-1])
        assert (state["ExitCode"], report["verdict"], report["backend"]) == (0, "pass", "gloo"), report
    (preflight,) = [n for n in deployed.containers if n.startswith("preflight-")]
    assert json.loads(docker.out("logs", preflight).strip().splitlines()[-1])["host"] == "node"


def test_the_checks_ran_the_programs_the_preflight_shipped_into_the_hosts_volume(docker: Docker, deployed: Deployment):
    """The host's check programs arrive once: the preflight's uploads land in the named volume mounted at their
    directory (the daemon mounts a created container's volumes before it extracts an archive into it:
    tests/test_check_programs.py), and each GPU check, which uploads nothing, read programs/gpucheck.py from that
    volume, read-only: the image has no programs/ of its own."""
    (preflight,) = [n for n in deployed.containers if n.startswith("preflight-")]
    checks = [n for n in deployed.containers if n.startswith("gpucheck-")]
    (volume,) = [v["volumeName"] for v in deployed.containers[preflight]["volumes"] if "volumeName" in v]

    def mount(name: str) -> tuple[str, str, bool]:
        (m,) = [m for m in docker.inspect(name)["Mounts"] if m["Destination"] == PROGRAM_MOUNT]
        return m["Type"], m["Name"], m["RW"]

    assert mount(preflight) == ("volume", volume, True)
    assert all(
        mount(check) == ("volume", volume, False) and "uploads" not in deployed.containers[check] for check in checks
    )
    image = docker.inspect(checks[0])["Config"]["Image"]
    exists = f"import os; print(os.path.exists({PROGRAM_MOUNT!r}))"
    assert docker.out("run", "--rm", image, "python3", "-c", exists).strip() == "False"
    # The volume holds the plan's files, byte for byte (their sourceHash).
    digests = (
        "import hashlib, json, os; "
        f"print(json.dumps({{f: hashlib.sha256(open(os.path.join({PROGRAM_MOUNT!r}, f), 'rb').read()).hexdigest() "
        f"for f in os.listdir({PROGRAM_MOUNT!r}) if f.endswith('.py')}}))"
    )
    shipped = json.loads(
        docker.out("run", "--rm", "-v", f"{volume}:{PROGRAM_MOUNT}:ro", image, "python3", "-c", digests)
    )
    assert shipped == {u["file"].rsplit("/", 1)[1]: u["sourceHash"] for u in deployed.containers[preflight]["uploads"]}
    # A check cannot change them: the daemon refuses to write into its read-only mount.
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        member = tarfile.TarInfo(f"{PROGRAM_MOUNT.lstrip('/')}/gpucheck.py")
        tar.addfile(member, io.BytesIO(b""))
    refused = docker.run("cp", "-", f"{checks[0]}:/", input=archive.getvalue(), check=False)
    assert refused.returncode != 0 and b"read-only" in refused.stderr, refused.stderr
