"""Day 2 of a partition's limits and of a partition a person stopped, through the real program and the change-impact
preview. The daemon facts are measured in tests/e2e/test_e2e_limits.py (an update of 0 or "" leaves a limit) and
tests/e2e/test_e2e_stopped.py (a stopped container has no published ports to read back)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.docker.gpu_host import LIMITS_REPLACE
from conftest import CONTAINER, stack_file
from test_impact import by_name, report_of
from tools.impact_rules import RULES, Action
from tools.synth import synthesize

P = "rocm-stack:"


def _train(**limits: Any) -> dict[str, Any]:
    config = stack_file("dev")
    config[P + "hosts"][0]["containers"][0].update(limits)
    return config


@pytest.fixture(scope="module")
def limited():
    return synthesize("dev", _train(cpuset="0-7", memory="64GiB"))


@pytest.mark.parametrize(
    ("removed", "inputs"), [("memory", ["memory", "memorySwap"]), ("cpuset", ["cpuSet"])], ids=["memory", "cpuset"]
)
def test_removing_a_limit_replaces_the_partition(limited, removed, inputs):
    """`docker update` cannot remove a limit (moby container_unix.go L285-303): the partition's container is replaced,
    and the preview says why. Before, this was an update in place that changed nothing on the host."""
    limits = {"cpuset": "0-7", "memory": "64GiB"}
    limits.pop(removed)
    impact = by_name(report_of(limited, synthesize("dev", _train(**limits))))[(CONTAINER, "workstation-train")]
    assert impact.action is Action.DELETE_REPLACE and impact.stops_container
    assert {path for path, rule in impact.replaced_by if rule == "pulumi.replace-on-changes"} == set(inputs)
    assert "moby.update-keeps-unset" in impact.rules
    assert "to remove its " + ", ".join(f"`{p}`" for p in inputs) + ": `docker update` cannot remove a limit" in (
        impact.meaning
    )


def test_changing_a_limit_replaces_the_partition_too(limited):
    """replaceOnChanges cannot tell a removal from a change (components/docker/gpu_host.py LIMITS_REPLACE)."""
    impact = by_name(report_of(limited, synthesize("dev", _train(cpuset="0-7", memory="96GiB"))))
    assert impact[(CONTAINER, "workstation-train")].action is Action.DELETE_REPLACE
    assert all(
        sorted(c["replace_on_changes"]) >= sorted(LIMITS_REPLACE)
        for c in limited.of_type(CONTAINER)
        if c["name"] in ("workstation-train", "workstation-serve")
    )


def test_a_plan_that_only_drops_a_limit_is_said_to_change_nothing_on_the_host(limited):
    """Without the option (a plan of another program), the preview tells what the update really does."""
    base = copy.deepcopy(limited.to_json())
    for resource in base["resources"]:
        resource["replace_on_changes"] = []
    head = copy.deepcopy(base)
    (train,) = [r for r in head["resources"] if r["type"] == CONTAINER and r["name"] == "workstation-train"]
    del train["inputs"]["memory"], train["inputs"]["memorySwap"]
    impact = by_name(report_of(base, head))[(CONTAINER, "workstation-train")]
    assert impact.action is Action.UPDATE and not impact.stops_container
    assert "moby.update-keeps-unset" in impact.rules and "`memory`, `memorySwap` removed: dockerd keeps" in (
        impact.meaning
    )
    assert "`docker update` of" not in impact.meaning


# --- a partition a person stopped ----------------------------------------------------------------------------


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_partitions_and_their_proxies_are_left_alone_when_stopped(stack, request):
    """TFD's Read keeps the ports of a stopped container only when must_run is false (funcs.go L800): with it true, a
    partition stopped by hand that publishes ports would be replaced by the next `pulumi up` (its writable layer
    lost), one without ports restarted. A person's stop is kept instead, as Docker's `unless-stopped` keeps it."""
    plan = request.getfixturevalue(f"{stack}_plan")
    partitions = [
        c
        for c in plan.of_type(CONTAINER)
        if any(label["label"] == "rocm-stack.partition" for label in c["inputs"].get("labels", []))
        and "rocm-stack.check" not in {label["label"] for label in c["inputs"]["labels"]}
    ]
    proxies = [c for c in plan.of_type(CONTAINER) if c["name"].endswith("-proxy")]
    assert partitions and all(c["inputs"]["mustRun"] is False for c in [*partitions, *proxies])
    assert stack == "dev" or proxies


def test_the_preview_says_a_stopped_partition_stays_stopped(dev_plan):
    base = copy.deepcopy(dev_plan.to_json())
    (serve,) = [r for r in base["resources"] if r["type"] == CONTAINER and r["name"] == "workstation-serve"]
    serve["inputs"]["mustRun"] = True  # as stacks deployed before declared it
    impact = by_name(report_of(base, dev_plan))[(CONTAINER, "workstation-serve")]
    assert impact.action is Action.UPDATE and not impact.stops_container
    assert "a container stopped by hand stays stopped: `pulumi up` neither starts nor replaces it" in impact.meaning
    assert "tfd.container-read-stopped" in impact.rules and "ForceNew" in RULES["tfd.container-read-stopped"].says
