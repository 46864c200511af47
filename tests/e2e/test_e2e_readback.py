"""The read-back table (components/docker/readback.py) against the real daemon: each container of the dev and prod
plans is created through the Engine API with the body terraform-provider-docker v4.5.0 sends for its inputs
(resource_docker_container_funcs.go L43-436, transcribed below for the inputs this program declares), inspected,
and read back as the provider's Read does (funcs.go L750-981, below); what the table predicts must be what Docker
gives back, and equal to the declaration.

Created, never started: Read's values come from `ContainerInspect`, which a created container answers in full,
except `ports` (Read takes them from NetworkSettings.Ports of a running container; the private daemon has no
bridge, tests/e2e/harness.py) and the image (the plans hold stand-in IDs). Not through the docker CLI: it rewrites
some values before sending them (`--cap-add SYS_PTRACE` goes out as CAP_SYS_PTRACE), the provider does not.
"""

from __future__ import annotations

import copy
import os
from typing import Any

import pytest
from docker import APIClient  # type: ignore[import-untyped]  # docker 7.2.0 ships no type information

from components.docker.readback import CONTAINER_READ_BACK, go_duration, parse_go_duration
from conftest import CONTAINER, solo_host_stack
from e2e.harness import Docker, make_gpu_nodes, on_test_host
from tools.synth import SECRET, synthesize, volume_bind

MIB = 1024 * 1024
# What the provider's Read does not set (table entries saying so) or what cannot be compared here (module doc).
NOT_COMPARED = {"image", "ports"}
# Inputs on a copy of the dev vLLM server: those no plan declares yet (stop signal and timeout, a grace period) and
# values the committed stacks do not use (private IPC, a small shm).
EXTRA_INPUTS = {
    "memory": 512,
    "memorySwap": 512,
    "logDriver": "json-file",
    "logOpts": {"max-size": "10m", "max-file": "3"},
    "stopSignal": "SIGTERM",
    "stopTimeout": 30,
    "ipcMode": "private",
    "shmSize": 256,
    "user": "0",  # the monitoring host's token container's (its uploads are secret: skipped below)
    "destroyGraceSeconds": 30,
}


def _create_body(i: dict[str, Any], image: str) -> dict[str, Any]:
    """ContainerCreate's config and host config as the provider builds them from the inputs (funcs.go)."""
    health = i.get("healthcheck")
    config: dict[str, Any] = {
        "Image": image,
        "Hostname": i.get("hostname", ""),
        "User": i.get("user", ""),  # L96-97
        "StopSignal": i.get("stopSignal", ""),
        "StopTimeout": i.get("stopTimeout"),
        "Env": i.get("envs"),
        "Cmd": i.get("command"),
        "Labels": {label["label"]: label["value"] for label in i.get("labels", [])} or None,
        # L145-156: each duration through time.ParseDuration, sent in nanoseconds.
        "Healthcheck": None
        if health is None
        else {
            "Test": health.get("tests"),
            **{
                field: parse_go_duration(health.get(key, "0s"))
                for field, key in (
                    ("Interval", "interval"),
                    ("Timeout", "timeout"),
                    ("StartPeriod", "startPeriod"),
                    ("StartInterval", "startInterval"),
                )
            },
            "Retries": health.get("retries", 0),
        },
    }
    host: dict[str, Any] = {
        "RestartPolicy": {"Name": i.get("restart", "no"), "MaximumRetryCount": i.get("maxRetryCount", 0)},
        "Init": bool(i.get("init", False)),  # L447-448: `init := d.Get("init").(bool); hostConfig.Init = &init`
        # The schema's default "bridge" does not exist on this daemon (--bridge=none): the daemon's default network.
        "NetworkMode": "default",
        "LogConfig": {"Type": i.get("logDriver", ""), "Config": i.get("logOpts")},
        "Binds": [volume_bind(v) for v in i.get("volumes", [])] or None,
        "CapAdd": i.get("capabilities", {}).get("adds"),
        "CapDrop": i.get("capabilities", {}).get("drops"),
        "Devices": [
            {
                "PathOnHost": d["hostPath"],
                "PathInContainer": d.get("containerPath") or d["hostPath"],
                "CgroupPermissions": d.get("permissions", "rwm"),
            }
            for d in i.get("devices", [])
        ]
        or None,
        "SecurityOpt": i.get("securityOpts"),
        "Memory": i.get("memory", 0) * MIB,
        "MemorySwap": i.get("memorySwap", 0) * MIB,
        "ShmSize": i.get("shmSize", 0) * MIB,
        "CpusetCpus": i.get("cpuSet", ""),
        "IpcMode": i.get("ipcMode", ""),
        "GroupAdd": i.get("groupAdds"),
    }
    return {**config, "HostConfig": host}


def _read(inspected: dict[str, Any], declared: dict[str, Any]) -> dict[str, Any]:
    """What the provider's Read stores for each declared input, from ContainerInspect (funcs.go L828-978)."""
    config, host = inspected["Config"], inspected["HostConfig"]
    stored: dict[str, Any] = {
        "name": inspected["Name"].lstrip("/"),
        "command": config["Cmd"],
        "hostname": config["Hostname"],
        "user": config["User"],  # L851
        "securityOpts": host["SecurityOpt"] or [],
        "restart": host["RestartPolicy"]["Name"],
        "maxRetryCount": host["RestartPolicy"]["MaximumRetryCount"],
        "memory": host["Memory"] // MIB,
        "memorySwap": host["MemorySwap"] // MIB if host["MemorySwap"] > 0 else host["MemorySwap"],
        "logDriver": host["LogConfig"]["Type"],
        "shmSize": host["ShmSize"] // MIB,
        "cpuSet": host["CpusetCpus"],
        "ipcMode": host["IpcMode"],
        "groupAdds": host["GroupAdd"] or [],
        "stopSignal": config.get("StopSignal", ""),
        "stopTimeout": config.get("StopTimeout"),
        "init": bool(host["Init"]),  # L864-868
    }
    if host["CapAdd"] or host["CapDrop"]:
        stored["capabilities"] = {k: v for k, v in (("adds", host["CapAdd"]), ("drops", host["CapDrop"])) if v}
    if "devices" in declared:  # flattenDevices: container_path only where declared
        paths = {d["hostPath"] for d in declared["devices"] if d.get("containerPath")}
        stored["devices"] = [
            {"hostPath": d["PathOnHost"], "permissions": d["CgroupPermissions"]}
            | ({"containerPath": d["PathInContainer"]} if d["PathOnHost"] in paths else {})
            for d in host["Devices"]
        ]
    if "logOpts" in declared:
        stored["logOpts"] = host["LogConfig"]["Config"]
    if config.get("Healthcheck"):
        h = config["Healthcheck"]
        stored["healthcheck"] = {
            "tests": h["Test"],
            **{
                key: go_duration(h.get(field, 0))
                for key, field in (
                    ("interval", "Interval"),
                    ("timeout", "Timeout"),
                    ("startPeriod", "StartPeriod"),
                    ("startInterval", "StartInterval"),
                )
            },
            "retries": h.get("Retries", 0),
        }
    return stored


def _containers(request: pytest.FixtureRequest, docker: Docker, tmp: Any) -> list[dict[str, Any]]:
    found = []
    plans = {"dev": request.getfixturevalue("dev_plan"), "prod": request.getfixturevalue("prod_plan")}
    plans["solo"] = synthesize("dev", solo_host_stack())  # host IPC: dockerd's label=disable
    for stack, plan in plans.items():
        nodes = make_gpu_nodes(tmp / stack, gpus=8)
        plan = on_test_host(copy.deepcopy(plan), docker.host, nodes.root)
        for container in plan.of_type(CONTAINER):
            inputs = {**container["inputs"], "name": f"{stack}-{container['name']}"}  # unique across hosts
            if "cpuSet" in inputs:  # dockerd refuses CPUs the machine lacks: a list of this machine's, same form
                inputs["cpuSet"] = f"0-{os.cpu_count() - 1}" if os.cpu_count() > 1 else "0"
            found.append(inputs)
    # The inputs other helpers add, on a copy of the dev vLLM server.
    (serve,) = [c for c in found if c["name"] == "dev-workstation-serve"]
    found.append({**serve, **EXTRA_INPUTS, "name": "extra"})
    return found


def test_docker_gives_back_what_the_table_predicts(request, docker: Docker, standin_image: str, tmp_path):
    api = APIClient(base_url=docker.host, version="auto")
    compared: set[str] = set()
    try:
        for declared in _containers(request, docker, tmp_path):
            if SECRET in (declared.get("envs"), declared.get("uploads")):
                continue
            created = api._post_json(
                api._url("/containers/create"),
                data=_create_body(declared, standin_image),
                params={"name": declared["name"]},
            )
            stored = _read(api.inspect_container(api._result(created, True)["Id"]), declared)
            for key, value in declared.items():
                entry = CONTAINER_READ_BACK[key]
                if key in NOT_COMPARED or key not in stored:
                    continue
                prediction = entry.stored(value, declared)
                assert not entry.differs(prediction, stored[key]), (declared["name"], key, prediction, stored[key])
                seen = entry.config(value)  # with the provider's schema defaults
                assert not entry.differs(seen, stored[key]), (declared["name"], key, seen, stored[key])
                compared.add(key)
    finally:
        docker.remove_all_containers()
    assert compared >= {
        "healthcheck",
        "capabilities",
        "securityOpts",
        "devices",
        "shmSize",
        "memory",
        "logOpts",
        "memorySwap",
        "init",
    }
