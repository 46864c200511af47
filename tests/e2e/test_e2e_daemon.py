"""Hosts whose daemon differs (components/docker/daemon.py), on a private dockerd whose daemon.json sets every
setting the table lists: each container of the dev and prod plans is created with the body terraform-provider-docker
v4.5.0 sends and read back as its Read does (tests/e2e/test_e2e_readback.py); only `log-opts` changes what the
provider reads back, and the preflight's judgement names it. Swap accounting is the kernel's: this host's answer is
checked against `docker info`, whichever it is."""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker import APIClient  # type: ignore[import-untyped]  # docker 7.2.0 ships no type information

from components.docker.daemon import PROBE_MEMORY_MIB, read_back_findings
from components.docker.readback import CONTAINER_READ_BACK
from e2e.harness import Docker, Unavailable, import_standin_image, private_daemon
from e2e.test_e2e_readback import NOT_COMPARED, _containers, _create_body, _read
from tools.synth import SECRET

# Every daemon.json setting of the table (docs/operations.md, "Hosts whose daemon differs"); `runtimes` registers the
# default runtime under another name (runc itself).
DAEMON_JSON: dict[str, Any] = {
    "log-opts": {"compress": "true"},
    "default-ulimits": {"nofile": {"Name": "nofile", "Hard": 4096, "Soft": 2048}},
    "default-shm-size": "128M",
    "default-ipc-mode": "shareable",
    "default-cgroupns-mode": "private",
    "cgroup-parent": "rocm-stack-e2e",
    "dns": ["192.0.2.53"],
    "no-new-privileges": True,
    "init": True,
    "runtimes": {"e2e-runc": {"path": "runc"}},
    "default-runtime": "e2e-runc",
}


STANDIN = "rocm-stack-e2e-standin:1"


@pytest.fixture(scope="module")
def odd_daemon() -> Iterator[Docker]:
    with tempfile.TemporaryDirectory(prefix="rocm-stack-e2e-daemon-") as tmp, contextlib.ExitStack() as stack:
        try:
            docker = stack.enter_context(private_daemon(Path(tmp), DAEMON_JSON))
        except Unavailable as reason:
            pytest.skip(str(reason))
        import_standin_image(docker, [STANDIN])
        yield docker


def _created(api: APIClient, declared: dict[str, Any], image: str = "") -> dict[str, Any]:
    created = api._post_json(
        api._url("/containers/create"),
        data=_create_body(declared, image or STANDIN),
        params={"name": declared["name"]},
    )
    return _read(api.inspect_container(api._result(created, True)["Id"]), declared)


def test_only_log_opts_change_what_the_provider_reads_back(request, odd_daemon: Docker, tmp_path):
    api = APIClient(base_url=odd_daemon.host, version="auto")
    drifting: dict[str, set[str]] = {}
    preflights = 0
    try:
        for declared in _containers(request, odd_daemon, tmp_path):
            if SECRET in (declared.get("envs"), declared.get("uploads")):
                continue
            stored = _created(api, declared)
            for key, value in declared.items():
                if key in NOT_COMPARED or key not in stored:
                    continue
                if CONTAINER_READ_BACK[key].differs(CONTAINER_READ_BACK[key].config(value), stored[key]):
                    drifting.setdefault(key, set()).add(declared["name"])
            if declared["name"].endswith("-preflight"):
                preflights += 1
                findings = read_back_findings(declared, stored)
                assert any("adds log options to every container (compress=true)" in f for f in findings)
        # Started, the container gets the daemon's cgroup parent, runtime and init; its read-back is the same.
        odd_daemon.run("start", "extra")
        assert _read(api.inspect_container("extra"), {})["shmSize"] == 256
    finally:
        odd_daemon.remove_all_containers()
    assert preflights >= 3 and set(drifting) == {"logOpts"}
    # Every container declares json-file and its rotation (components/docker/logs.py): each one would be replaced.
    assert len(drifting["logOpts"]) > 20


def test_swap_accounting_is_what_docker_info_says(docker: Docker, standin_image: str):
    """moby daemon/daemon_unix.go verifyPlatformContainerResources: without swap accounting (`SwapLimit` false in
    `docker info`) a memory-limited container's MemorySwap is -1, which the preflight's judgement names; with it the
    declared value comes back. The daemon of this test host answers one of the two."""
    info = json.loads(docker.out("info", "--format", "{{json .}}"))
    api = APIClient(base_url=docker.host, version="auto")
    probe = {"name": "swap-probe", "memory": PROBE_MEMORY_MIB, "memorySwap": PROBE_MEMORY_MIB, "command": ["true"]}
    try:
        stored = _created(api, probe, standin_image)
    finally:
        docker.remove_all_containers()
    findings = read_back_findings(probe, stored)
    if info["SwapLimit"]:
        assert stored["memorySwap"] == PROBE_MEMORY_MIB and findings == []
    else:
        assert stored["memorySwap"] == -1 and "no swap accounting" in findings[0]
