"""A partition's container has one Pulumi identity (URN) whatever runs in it, and stacks deployed before keep theirs.

The change-impact preview found it (issue 21): a workload's container used to be its workload component's child, a
shell the GpuHost's, so a change of role was another URN: Pulumi creates the new URN before it deletes the old one
(deletes of resources no longer registered come last), and the create met the old container's Docker name. Now every
partition's container is its host's GpuHost's child (components/docker/partitions.py), and a workload's container
carries `Alias(parent=<its workload>)`, the parent it had before.

Upstream facts, pulumi/pulumi at 1b5949891b (v3.259.0-14; the program pins the SDK 3.272.0):
- a resource's URN is its parent's qualified type chain, its type and its name (pkg/resource/deploy/deployment.go
  generateURN L796-805): another parent is another resource;
- the engine looks a resource up in the old state by its URN, then by each alias; found by an alias, it is that
  resource, moved, and never deleted (pkg/resource/deploy/step_generator.go getOldResource L655-704);
- an alias's unset name and type are the resource's own, and its URN is made from the alias's parent as a child's is
  (step_generator.go collapseAliasToUrn L545-583; sdk/go/common/resource/alias.go CreateURN L40-56);
- `Alias(parent=resource)` sends that resource's URN as the alias spec's parent, name and type unset (Python SDK
  3.272.0 pulumi/runtime/resource.py create_alias_spec L320-389; pulumi/resource.py Alias L110-160: "If not
  provided, the current name of the resource is used").
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tools.impact import predict
from tools.impact_rules import Action
from tools.synth import Plan, synthesize
from tools.synth_diff import SynthPlan, diff
from conftest import gpu_containers, partition_of, shell_partitions, swapped_partitions

GPU_HOST = "rocm-stack:docker:GpuHost"
# What plan.json of main at 6512c47 (before this change) recorded: the workload's containers were its children.
FORMER_URNS = {
    "workstation-train": "urn:pulumi:dev::rocm-stack::rocm-stack:workloads:DockerTraining"
    "$docker:index/container:Container::workstation-train",
    "workstation-serve": "urn:pulumi:dev::rocm-stack::rocm-stack:workloads:DockerVllm"
    "$docker:index/container:Container::workstation-serve",
}


def identities(plan: Plan) -> dict[str | None, tuple[str, str, str, str]]:
    """Partition -> (URN, parent, type, name) of its container."""
    return {partition_of(c): (c["urn"], c["parent"], c["type"], c["name"]) for c in gpu_containers(plan)}


def test_a_partition_container_has_one_urn_whatever_runs_in_it(dev_plan):
    """Shells, the committed workloads, and the workloads swapped: the same URN and parent per partition."""
    shells = synthesize("dev", shell_partitions("dev"))
    swapped = synthesize("dev", swapped_partitions())
    assert identities(shells) == identities(dev_plan) == identities(swapped)
    hosts = {r["urn"]: r["name"] for r in dev_plan.of_type(GPU_HOST)}
    assert {partition: hosts[parent] for partition, (_, parent, _, _) in identities(dev_plan).items()} == {
        "workstation/train": "workstation",
        "workstation/serve": "workstation",
    }


@pytest.mark.parametrize("plan_name", ["dev_plan", "prod_plan"])
def test_a_workload_container_is_aliased_to_its_workload_and_a_shell_to_nothing(plan_name, request):
    plan: Plan = request.getfixturevalue(plan_name)
    workloads = {
        r["urn"]: r["name"]
        for r in plan.resources
        if r["type"] in ("rocm-stack:workloads:DockerTraining", "rocm-stack:workloads:DockerVllm")
    }
    claimed = {ref for outputs in plan.outputs["workloads"].values() for w in outputs.values() for ref in w["docker"]}
    for container in gpu_containers(plan):
        if partition_of(container) not in claimed:
            assert container["aliases"] == []
            continue
        (alias,) = container["aliases"]
        assert alias["parent"] in workloads
        # The URN the container had as that component's child: the one stacks deployed before hold.
        type_chain = alias["parent"].split("::")[2].rsplit("$", 1)[-1]
        assert alias["urn"] == container["urn"].replace(GPU_HOST, type_chain)
    if plan.stack == "dev":
        assert {c["name"]: c["aliases"][0]["urn"] for c in gpu_containers(plan)} == FORMER_URNS


def previous_layout(plan: Plan) -> dict[str, Any]:
    """The plan as the program declared it before this change: each aliased resource under its alias's parent."""
    previous = copy.deepcopy(plan.to_json())
    for resource in previous["resources"]:
        for alias in resource.pop("aliases"):
            resource.update(urn=alias["urn"], parent=alias["parent"])
    return previous


def test_the_first_up_after_this_change_moves_the_workload_containers_and_touches_none(dev_plan):
    """The engine finds each container by its alias (getOldResource): a move, no create beside the running container
    (whose Docker name it holds) and no delete. Without the alias it would be that create (`pulumi.urn`)."""
    previous = previous_layout(dev_plan)
    assert {r["name"]: r["urn"] for r in previous["resources"] if r["name"] in FORMER_URNS} == FORMER_URNS
    base, head = SynthPlan.model_validate(previous), SynthPlan.model_validate(dev_plan.to_json())
    assert [(c.key[1], c.paths) for c in diff(base, head).changed] == [
        ("workstation-serve", ("parent",)),
        ("workstation-train", ("parent",)),
        ("monitoring-kube-prometheus-stack", ("parent",)),  # declared before the GPU stack (docs/kubernetes.md CRDs)
    ]
    assert predict(base, head).impacts == []

    unaliased = copy.deepcopy(dev_plan.to_json())
    for resource in unaliased["resources"]:
        resource["aliases"] = []
    impacts = predict(base, SynthPlan.model_validate(unaliased)).impacts
    # The new server's ID is unknown in the preview: its health check, which joins its network namespace, goes too.
    (health,) = [i for i in impacts if i.name == "workstation-serve-health"]
    assert health.replaced_by == [("networkMode", "pulumi.unknown-output")]
    impacts = [i for i in impacts if i is not health]
    assert {(i.name, i.action) for i in impacts} == {
        ("workstation-serve", Action.REPLACE),
        ("workstation-train", Action.REPLACE),
        ("monitoring-kube-prometheus-stack", Action.REPLACE),
    }
    assert all(("parent", "pulumi.urn") in i.replaced_by for i in impacts)
    assert all("unless the move is declared" in i.meaning for i in impacts if i.name.startswith("workstation-"))
