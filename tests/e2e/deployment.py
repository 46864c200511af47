"""A stack deployed on the real daemon by its own docker/HOST.sh, and what `docker inspect` and the containers
themselves must show for it: shared by the e2e tests of the dev stack and of the renderNodes test stack.

Every check reads the plan's inputs, what the program declared, so it holds whatever the Docker layer declares next.
"""

from __future__ import annotations

import io
import json

import shlex
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from components.docker.checks import VERDICT_LABEL
from components.docker.readback import parse_go_duration
from e2e.harness import Docker
from tools.synth import Plan, docker_scripts, upload_text, volume_bind

CONTAINER = "docker:index/container:Container"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
SCRIPT_TIMEOUT_S = 180
ONE_SHOT_TIMEOUT_S = 60


@dataclass
class Deployment:
    containers: dict[str, dict[str, Any]]  # name -> inputs, as the plan declares them (devices on the stand-ins)
    images: dict[str, str]  # image id in the plan -> reference
    dev_root: Path
    script: subprocess.CompletedProcess[str]
    seconds: float
    workdir: Path  # the test's temporary directory (host volumes, the script)


def deploy(docker: Docker, standin_image: str, plan: Plan, host: str, dev_root: Path, workdir: Path) -> Deployment:
    """Tags the stand-in image with the plan's image references, then runs the host's HOST.sh on the daemon."""
    images = {plan.mock_outputs[r["urn"]]["imageId"]: r["inputs"]["name"] for r in plan.of_type(REMOTE_IMAGE)}
    for reference in images.values():
        docker.run("tag", standin_image, reference)
    script = workdir / f"{host}.sh"
    script.write_text(docker_scripts(plan)[host])
    started = time.monotonic()
    result = subprocess.run(
        ["sh", str(script)], env=docker.env, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S
    )
    seconds = time.monotonic() - started
    print(f"\ne2e: HOST.sh of {plan.stack}/{host} ran in {seconds:.2f}s (exit {result.returncode})")
    on_host = {r["urn"] for r in plan.of_type("pulumi:providers:docker") if r["name"] == host}
    return Deployment(
        {c["inputs"]["name"]: c["inputs"] for c in plan.of_type(CONTAINER) if c["provider"] in on_host},
        images,
        dev_root,
        result,
        seconds,
        workdir,
    )


def _expected(inputs: dict[str, Any], images: dict[str, str]) -> dict[str, Any]:
    """docker inspect's fields for what the plan declares, per the provider's mapping of each input
    (terraform-provider-docker internal/provider/resource_docker_container_funcs.go and _structures.go)."""
    host_config: dict[str, Any] = {
        "Devices": [
            {
                "PathOnHost": d["hostPath"],
                "PathInContainer": d.get("containerPath") or d["hostPath"],
                "CgroupPermissions": d.get("permissions") or "rwm",
            }
            for d in inputs.get("devices", [])
        ],
        "GroupAdd": sorted(inputs.get("groupAdds", [])),  # a set in the provider's schema
        "CpusetCpus": inputs.get("cpuSet", ""),
        "CapAdd": inputs.get("capabilities", {}).get("adds"),
        "SecurityOpt": inputs.get("securityOpts"),
        "PortBindings": {
            f"{p['internal']}/{p.get('protocol', 'tcp')}": [
                {"HostIp": p.get("ip") or "0.0.0.0", "HostPort": str(p.get("external", ""))}
            ]
            for p in inputs.get("ports", [])
        },
        # A set: the daemon keeps binds in no fixed order (measured on dockerd 20.10 with three of them). A named
        # volume's bind starts with its name.
        "Binds": sorted(volume_bind(v) for v in inputs.get("volumes", [])) or None,
        "RestartPolicy": {"Name": inputs.get("restart", "no"), "MaximumRetryCount": inputs.get("maxRetryCount", 0)},
    }
    if "ipcMode" in inputs:
        host_config["IpcMode"] = inputs["ipcMode"]
    if "shmSize" in inputs:
        host_config["ShmSize"] = inputs["shmSize"] * 1024 * 1024  # the provider's shm_size is MiB
    for key, field in (("memory", "Memory"), ("memorySwap", "MemorySwap")):
        if key in inputs:
            host_config[field] = inputs[key] * 1024 * 1024  # MiB too
    if "logDriver" in inputs:
        host_config["LogConfig"] = {"Type": inputs["logDriver"], "Config": inputs.get("logOpts", {})}
    config: dict[str, Any] = {"Image": images[inputs["image"]], "Cmd": inputs.get("command")}
    if "hostname" in inputs:
        config["Hostname"] = inputs["hostname"]
    # What the provider's Read stores back (funcs.go L977-978: container.Config.StopSignal, .StopTimeout): the
    # daemon keeping the declared values verbatim is what keeps them out of every later diff (ForceNew inputs).
    for key, field in (("stopSignal", "StopSignal"), ("stopTimeout", "StopTimeout")):
        if key in inputs:
            config[field] = inputs[key]
    return {"HostConfig": host_config, "Config": config}


def check_created_as_declared(docker: Docker, deployed: Deployment) -> None:
    mismatches = {}
    for name, inputs in deployed.containers.items():
        inspected = docker.inspect(name)
        expected = _expected(inputs, deployed.images)
        actual = {section: {key: inspected[section][key] for key in fields} for section, fields in expected.items()}
        host = actual["HostConfig"]
        host["GroupAdd"] = sorted(host["GroupAdd"] or [])
        host["Binds"] = sorted(host["Binds"]) if host["Binds"] else None
        # The docker CLI 28 writes capabilities with their CAP_ prefix; the daemon takes either spelling.
        host["CapAdd"] = [c.removeprefix("CAP_") for c in host["CapAdd"]] if host["CapAdd"] else None
        if "command" not in inputs:  # no command: the image's own
            expected["Config"]["Cmd"] = json.loads(docker.out("image", "inspect", expected["Config"]["Image"]))[0][
                "Config"
            ]["Cmd"]
        for section, fields in expected.items():
            for key, value in fields.items():
                if actual[section][key] != value:
                    mismatches[f"{name} {section}.{key}"] = {"plan": value, "docker": actual[section][key]}
        missing_env = set(inputs.get("envs", [])) - set(inspected["Config"]["Env"])
        if missing_env:
            mismatches[f"{name} env"] = sorted(missing_env)
    assert not mismatches, json.dumps(mismatches, indent=1)


def provider_read_back(inspected: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """What the provider's Read stores for these inputs from `docker inspect` (terraform-provider-docker v4.5.0
    internal/provider/resource_docker_container_funcs.go: L932 memory and L940-944 memory_swap in MiB, L945
    shm_size in MiB, L951 log_driver, L952 log_opts only when declared, L973 ipc_mode), by input name."""
    host = inspected["HostConfig"]
    swap = host["MemorySwap"]
    read = {
        "memory": host["Memory"] // 1024 // 1024,
        "memorySwap": swap // 1024 // 1024 if swap > 0 else swap,
        "shmSize": host["ShmSize"] // 1024 // 1024,
        "logDriver": host["LogConfig"]["Type"],
        "ipcMode": host["IpcMode"],
    }
    if "logOpts" in declared:
        read["logOpts"] = host["LogConfig"]["Config"]
    return read


def check_read_back_as_declared(docker: Docker, deployed: Deployment) -> int:
    """A refresh right after the deploy finds these inputs as declared: no diff on the next `pulumi preview`.
    (An undeclared memory_swap would read back as the daemon's 2 x memory, moby v20.10.24 daemon/daemon_unix.go
    L343-346; the provider's memory_swap is Optional without Computed, so that would be a diff every time.)"""
    checked = 0
    for name, inputs in deployed.containers.items():
        read = provider_read_back(docker.inspect(name), inputs)
        declared = {key: inputs[key] for key in read if key in inputs}
        assert declared == {key: read[key] for key in declared}, name
        # Every container bounds its log and declares it in the provider's form.
        assert {"logDriver", "logOpts"} <= declared.keys(), name
        checked += 1
    return checked


def check_health_checks(docker: Docker, deployed: Deployment) -> int:
    """docker/cli's --health-cmd stores ["CMD-SHELL", cmd] (cli/command/container/opts.go): the plan's
    exec-form ["CMD", *argv] is kept as a shell command that a POSIX shell splits back into the same argv."""
    checked = 0
    for name, inputs in deployed.containers.items():
        if "healthcheck" not in inputs:
            continue
        plan, health = inputs["healthcheck"], docker.inspect(name)["Config"]["Healthcheck"]
        kind, *argv = plan["tests"]
        assert health["Test"][0] == "CMD-SHELL"
        assert (shlex.split(health["Test"][1]) if kind == "CMD" else health["Test"][1:]) == argv
        for key, field in (("interval", "Interval"), ("timeout", "Timeout"), ("startPeriod", "StartPeriod")):
            assert health[field] == parse_go_duration(plan[key]), (name, key)
        assert health["Retries"] == plan["retries"]
        checked += 1
    return checked


def check_uploads(docker: Docker, deployed: Deployment) -> int:
    """Each upload is in the container before it starts, byte for byte, with the provider's mode (0644 unless
    executable or `permissions`), read back with `docker cp` (works on created and stopped containers)."""
    checked = 0
    for name, inputs in deployed.containers.items():
        for upload in inputs.get("uploads", []):
            archive = tarfile.open(fileobj=io.BytesIO(docker.run("cp", f"{name}:{upload['file']}", "-").stdout))
            (member,) = archive.getmembers()
            assert archive.extractfile(member).read().decode() == upload_text(upload), upload["file"]
            assert member.mode & 0o7777 == int(
                upload.get("permissions") or ("0744" if upload.get("executable") else "0644"), 8
            )
            checked += 1
    return checked


def _state(docker: Docker, name: str) -> dict[str, Any]:
    return docker.inspect(name)["State"]


def _one_shot(inputs: dict[str, Any]) -> bool:
    # A container whose restart policy lets a clean exit stand (on-failure, no) is a job that may finish.
    return inputs.get("restart", "no") in ("on-failure", "no")


def _warn_only(inputs: dict[str, Any]) -> bool:
    """A check whose failure the stack only reports (the preflight in dev: this machine has no amdgpu)."""
    return {"label": VERDICT_LABEL, "value": "warn"} in inputs.get("labels", [])


def check_running_or_exited_0(docker: Docker, deployed: Deployment) -> None:
    """HOST.sh exits 0; every container runs, or has exited 0 when its restart policy makes it a one-shot (a
    warn-only check has exited); a running container's health check command passes in it (run with docker exec,
    as dockerd runs it)."""
    assert deployed.script.returncode == 0, deployed.script.stderr
    for name, inputs in deployed.containers.items():
        deadline = time.monotonic() + ONE_SHOT_TIMEOUT_S
        state = _state(docker, name)
        while _one_shot(inputs) and state["Running"] and time.monotonic() < deadline:
            time.sleep(0.2)
            state = _state(docker, name)
        exited = state["Status"] == "exited" and (state["ExitCode"] == 0 or _warn_only(inputs))
        assert state["Running"] or (_one_shot(inputs) and exited), (name, state, docker.out("logs", name, check=False))
        health = docker.inspect(name)["Config"].get("Healthcheck")
        if state["Running"] and health:
            # The stand-in server may need a moment to listen; dockerd's own start period is 30 minutes.
            for _ in range(50):
                probe = docker.run("exec", name, "/bin/sh", "-c", health["Test"][1], check=False)
                if probe.returncode == 0:
                    break
                time.sleep(0.1)
            assert probe.returncode == 0, (name, probe.stderr.decode())


def _nodes_under(path: Path, dev_root: Path) -> set[str]:
    """The container paths a --device host path maps: a directory maps every device node below it."""
    nodes = [path] if not path.is_dir() else [p for p in path.rglob("*") if not p.is_dir()]
    return {"/dev/" + str(p.relative_to(dev_root)) for p in nodes}


def check_gpu_nodes(docker: Docker, deployed: Deployment) -> int:
    checked = 0
    for name, inputs in deployed.containers.items():
        if not _state(docker, name)["Running"]:
            continue  # a container that never started is the test above's failure
        expected = set()
        for device in inputs.get("devices", []):
            host = Path(device["hostPath"])
            mapped = _nodes_under(host, deployed.dev_root)
            container = device.get("containerPath") or device["hostPath"]
            expected |= {container + m.removeprefix("/dev/" + str(host.relative_to(deployed.dev_root))) for m in mapped}
        listing = docker.out(
            "exec",
            name,
            "python3",
            "-c",
            "import os; print('\\n'.join(os.path.join(d, f) for d, _, fs in os.walk('/dev') "
            "for f in fs if d == '/dev/dri' or f == 'kfd'))",
        ).split()
        assert set(listing) == expected, name
        checked += 1
    return checked
