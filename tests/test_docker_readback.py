"""Every docker.Container input is declared in the form the provider stores after reading the container back
(components/docker/readback.py), so a `pulumi preview` right after `pulumi up` shows no change.

The table is checked against the Go formatter's own tests and, in tests/e2e/test_e2e_deadlines.py, against the
Go formatter inside the docker CLI on the real daemon.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.docker.readback import CONTAINER_READ_BACK, drifting_inputs, go_duration, parse_go_duration
from conftest import CONTAINER, solo_host_stack, stack_file
from tools.synth import SECRET, Plan, synthesize

# golang/go src/time/time_test.go `durationTests` (TestDurationString): the string each Duration prints.
GO_DURATION_STRINGS = {
    "0s": 0,
    "1ns": 1,
    "1.1µs": 1_100,
    "2.2ms": 2_200_000,
    "3.3s": 3_300_000_000,
    "4m5s": (4 * 60 + 5) * 10**9,
    "4m5.001s": (4 * 60) * 10**9 + 5_001_000_000,
    "5h6m7.001s": (5 * 3600 + 6 * 60) * 10**9 + 7_001_000_000,
    "8m0.000000001s": 8 * 60 * 10**9 + 1,
    "2562047h47m16.854775807s": 2**63 - 1,
    "-2562047h47m16.854775808s": -(2**63),
}


@pytest.mark.parametrize(("text", "nanoseconds"), GO_DURATION_STRINGS.items())
def test_go_duration_prints_what_go_prints(text, nanoseconds):
    assert go_duration(nanoseconds) == text
    assert parse_go_duration(text) == nanoseconds


def test_the_health_check_start_period_is_stored_as_go_prints_it():
    """The issue's case: "1800s" is parsed and stored as Duration.String(), "30m0s" (funcs.go L960-970)."""
    entry = CONTAINER_READ_BACK["healthcheck"]
    declared = {"tests": ["CMD", "true"], "interval": "30s", "startPeriod": "1800s"}
    assert entry.stored(declared, {})["startPeriod"] == "30m0s" and entry.drifts(declared, {})
    assert not entry.drifts({**declared, "startPeriod": "30m0s"}, {})
    assert [go_duration(s * 10**9) for s in (3600, 10, 90, 0)] == ["1h0m0s", "10s", "1m30s", "0s"]


def test_ports_are_stored_in_port_order_with_address_and_protocol_and_their_order_is_no_diff():
    """flattenContainerPorts (structures.go L35-59) sorts by internal port; `ports` is a List, but its
    DiffSuppressFunc (schema.go L534, suppressIfPortsDidNotChangeForMigrationV0ToV1 L1192-1247) finds each old port
    in the new list by internal port: the same ports in another order are no diff."""
    entry = CONTAINER_READ_BACK["ports"]
    port = {"ip": "0.0.0.0", "protocol": "tcp"}
    assert entry.stored([{"internal": 9000, **port}, {"internal": 80, **port}], {})[0]["internal"] == 80
    assert not entry.drifts([{"internal": 9000, **port}, {"internal": 80, **port}], {})
    # Left out, ip and protocol take the schema's defaults (schema.go L487-530), which Read gives back too.
    assert not entry.drifts([{"internal": 80, "external": 80}], {})
    assert not entry.drifts([{"internal": 80, "external": 80, **port}], {})


def test_a_set_is_compared_without_order():
    assert not CONTAINER_READ_BACK["envs"].drifts(["B=2", "A=1"], {})
    assert not CONTAINER_READ_BACK["securityOpts"].drifts(["b", "a"], {})


def test_host_ipc_gets_label_disable_from_dockerd():
    """moby daemon/create.go generateSecurityOpt (v20.10.24 L255-269): host IPC without a label= option."""
    entry = CONTAINER_READ_BACK["securityOpts"]
    assert entry.drifts(["seccomp=unconfined"], {"ipcMode": "host"})
    assert not entry.drifts(["seccomp=unconfined", "label=disable"], {"ipcMode": "host"})
    assert not entry.drifts(["seccomp=unconfined"], {"ipcMode": "private"})


def test_an_input_without_an_entry_is_reported():
    assert "no entry" in drifting_inputs({"privileged": True})["privileged"]


def _crafted_stacks() -> dict[str, dict[str, Any]]:
    """Optional Docker inputs the committed stacks leave out: published ports out of order, a partition's own env
    and volumes, device groups, a cpuset, a longer vLLM start."""
    dev = stack_file("dev")
    dev["rocm-stack:hosts"].append(
        {
            "name": "lab",
            "gpus": 2,
            "deviceGroups": [993, 44],
            "containers": [{"name": "extra", "gpus": [0], "cpuset": "0-7"}, {"name": "other", "gpus": [1]}],
        }
    )
    dev["rocm-stack:hosts"][1]["containers"][0].update(
        {
            "ports": [{"internal": 9000, "external": 19000}, {"internal": 22, "external": 2222, "ip": "127.0.0.1"}],
            "env": {"B": "2", "A": "1"},
            "volumes": [{"hostPath": "/data", "containerPath": "/data", "readOnly": True}],
            "restart": "on-failure",
        }
    )
    dev["rocm-stack:inference"][0]["startupTimeoutSeconds"] = 5430
    return {"dev+": dev, "dev-solo": solo_host_stack()}


def _plans(request: pytest.FixtureRequest) -> dict[str, Plan]:
    plans = {"dev": request.getfixturevalue("dev_plan"), "prod": request.getfixturevalue("prod_plan")}
    plans.update({name: synthesize("dev", config) for name, config in _crafted_stacks().items()})
    return plans


def test_every_container_input_is_declared_as_the_provider_reads_it_back(request):
    checked = set()
    for stack, plan in _plans(request).items():
        for container in plan.of_type(CONTAINER):
            inputs = {k: v for k, v in container["inputs"].items() if v != SECRET}
            assert not drifting_inputs(inputs), f"{stack} {container['name']}: {drifting_inputs(inputs)}"
            checked |= set(inputs)
    # The plans above exercise the entries that matter most, host IPC (label=disable declared) among them.
    assert {"healthcheck", "ports", "devices", "capabilities", "securityOpts", "maxRetryCount", "logOpts"} <= checked
    assert any(
        c["inputs"].get("ipcMode") == "host" and "label=disable" in c["inputs"]["securityOpts"]
        for plan in _plans(request).values()
        for c in plan.of_type(CONTAINER)
    )
