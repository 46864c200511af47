"""What terraform-provider-docker v4.5.0's update does to a running container on the real daemon, for the limits it
applies live (resourceDockerContainerUpdate, resource_docker_container_funcs.go L991-1077: `restart`,
`max_retry_count`, `cpu_shares`, `memory`, `memory_reservation`, `cpu_set`, `memory_swap`, block IO): it sends
what the new state holds, 0 or "" for a removed limit, and dockerd reads 0 and "" as "unchanged" (moby
container/container_unix.go UpdateContainer, v28.5.2 L285-303; the same in v20.10.24). So a removed limit stays on
the container, and Read (funcs.go L932, L950) shows it again on every refresh; the stack replaces the container
instead (components/docker/gpu_host.py LIMITS_REPLACE)."""

from __future__ import annotations

from typing import Any

from docker import APIClient  # type: ignore[import-untyped]  # docker 7.2.0 ships no type information

from e2e.harness import Docker

MIB = 1024 * 1024
CGROUP_LIMITS = ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory.max")  # cgroup v1, v2


def _update_body(memory_mib: int, cpu_set: str) -> dict[str, Any]:
    """The UpdateConfig TFD builds from the new state (funcs.go L1032-1068): memory_swap is sent only when non-zero
    (`d.GetOk`), the rest always."""
    body: dict[str, Any] = {
        "RestartPolicy": {"Name": "no", "MaximumRetryCount": 0},
        "CpuShares": 0,
        "Memory": memory_mib * MIB,
        "MemoryReservation": 0,
        "CpusetCpus": cpu_set,
    }
    if memory_mib:
        body["MemorySwap"] = memory_mib * MIB
    return body


def test_an_update_that_removes_a_limit_leaves_it_while_one_that_changes_it_applies(docker: Docker, standin_image: str):
    api = APIClient(base_url=docker.host, version="auto")
    create = {
        "Image": standin_image,
        "Cmd": ["python3", "-c", "import time; time.sleep(120)"],
        "HostConfig": {"NetworkMode": "default", "Memory": 512 * MIB, "MemorySwap": 512 * MIB, "CpusetCpus": "0"},
    }
    try:
        created = api._result(api._post_json(api._url("/containers/create"), data=create), True)["Id"]
        api.start(created)

        def update(memory_mib: int, cpu_set: str) -> dict[str, Any]:
            response = api._post_json(
                api._url("/containers/{0}/update", created), data=_update_body(memory_mib, cpu_set)
            )
            api._raise_for_status(response)
            return api.inspect_container(created)["HostConfig"]

        changed = update(1024, "0")
        assert (changed["Memory"], changed["MemorySwap"], changed["CpusetCpus"]) == (1024 * MIB, 1024 * MIB, "0")
        removed = update(0, "")
        # What Read stores then: memory 1024 (Memory / MiB) and cpu_set "0": the state said none, the next refresh
        # says 1024 again, and the next update sends 0 again, for ever.
        assert (removed["Memory"], removed["MemorySwap"], removed["CpusetCpus"]) == (1024 * MIB, 1024 * MIB, "0")
        assert docker.inspect(created)["State"]["Running"]
        # The cgroup keeps it too (cgroup v1 or v2, seen from inside the container).
        read = "import os; print(open(next(p for p in CGROUP_LIMITS if os.path.exists(p))).read())"
        limit = docker.out("exec", created, "python3", "-c", f"CGROUP_LIMITS = {CGROUP_LIMITS!r}; {read}").strip()
        assert int(limit) == 1024 * MIB
    finally:
        docker.remove_all_containers()
