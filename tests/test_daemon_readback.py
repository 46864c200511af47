"""The host preflight refuses a Docker daemon that changes what the provider reads back (components/docker/daemon.py),
before any partition of the host is created. The mock engine returns what the provider would have read back from
such a daemon (tools/synth.py `read_back`); tests/e2e/test_e2e_daemon.py measures the daemons themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.docker.daemon import DAEMON_SETTINGS, PROBE_MEMORY_MIB
from conftest import CONTAINER, gpu_containers, stack_file
from tools.synth import ProgramRefused, synthesize

P = "rocm-stack:"
ROOT = Path(__file__).resolve().parent.parent


def _preflights(plan) -> dict[str, dict]:
    return {c["name"]: c for c in plan.of_type(CONTAINER) if c["name"].endswith("-preflight")}


def test_the_preflight_is_given_the_log_options_of_every_container_of_its_host(prod_plan):
    """The probe is representative: the same driver and options as the host's containers (hosts[].logs)."""
    for name, preflight in _preflights(prod_plan).items():
        host = name.removesuffix("-preflight")
        declared = [
            c for c in prod_plan.of_type(CONTAINER) if c["provider"].endswith(f"::{host}") and c is not preflight
        ]
        assert declared and all(
            c["inputs"].get("logOpts") == preflight["inputs"]["logOpts"] for c in declared if "logOpts" in c["inputs"]
        )
        assert preflight["inputs"]["logDriver"] == "json-file"
        assert preflight["inputs"]["memory"] == preflight["inputs"]["memorySwap"] == PROBE_MEMORY_MIB


@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_a_daemon_that_adds_log_options_stops_the_host_before_its_partitions(stack, request):
    """moby daemon/logs.go mergeAndVerifyLogConfig adds the daemon's `log-opts` to a json-file container's own; TFD
    reads the map back (funcs.go L952, L983-989) and `log_opts` is ForceNew: every `up` would replace every
    container. The host stops at its preflight, in dev too (a warning-only preflight would let every container of
    the workstation be replaced on every `up`)."""
    plan = request.getfixturevalue(f"{stack}_plan")
    name, preflight = sorted(_preflights(plan).items())[0]
    merged = {**preflight["inputs"]["logOpts"], "compress": "true"}
    with pytest.raises(ProgramRefused) as refused:
        synthesize(stack, read_back={name: {"logOpts": merged}})
    message = str(refused.value)
    host = name.removesuffix("-preflight")
    assert f"host {host}: preflight: the Docker daemon changes what the provider reads back" in message
    assert "the daemon adds log options to every container (compress=true)" in message
    assert "remove the keys from `log-opts` in /etc/docker/daemon.json" in message


def _memory_limited() -> dict:
    config = stack_file("dev")
    config[P + "hosts"][0]["containers"][0]["memory"] = "64GiB"
    return config


def test_a_daemon_without_swap_accounting_or_memory_cgroup_is_refused():
    """moby daemon/daemon_unix.go verifyPlatformContainerResources (v28.5.2 L427-430): without swap accounting a
    memory-limited container gets MemorySwap = -1, which TFD reads back (funcs.go L940-944): `memory_swap` would be
    updated on every `up`."""
    config = _memory_limited()
    assert any(c["inputs"].get("memory") == 65536 for c in gpu_containers(synthesize("dev", config)))
    with pytest.raises(ProgramRefused) as refused:
        synthesize("dev", config, read_back={"workstation-preflight": {"memorySwap": -1}})
    assert "the daemon has no swap accounting (memory_swap declared 256 MiB, read back -1)" in str(refused.value)
    assert "swapaccount=1" in str(refused.value)
    with pytest.raises(ProgramRefused) as refused:
        synthesize("dev", config, read_back={"workstation-preflight": {"memory": 0, "memorySwap": -1}})
    assert "the daemon dropped the memory limit (declared 256 MiB, read back 0)" in str(refused.value)


def test_a_daemon_that_gives_back_what_it_is_given_passes(dev_plan):
    assert synthesize("dev", read_back={"workstation-preflight": {"logOpts": {"max-file": "5", "max-size": "100m"}}})


def test_operations_lists_every_daemon_setting():
    operations = (ROOT / "docs" / "operations.md").read_text()
    names = [name for s in DAEMON_SETTINGS for name in s.setting.split(" (")[0].split(", ")]
    assert [name for name in names if f"`{name}`" not in operations] == []
