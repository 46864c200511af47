"""`rocm-stack diff` compares each Docker input as the provider does (components/docker/provider_schema.py, one table
of terraform-provider-docker v4.5.0's schema): a TypeSet without order, a TypeList in order, a map by key, and
`ports` without order (its DiffSuppressFunc). Scenarios through the real program, then a corpus generated from the
table: every set attribute reordered predicts nothing, every ordered list reordered predicts its rule."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.docker.provider_schema import (
    CONTAINER,
    VOLUME,
    DOCKER_CONTAINER,
    DOCKER_NETWORK,
    LIST,
    NETWORK,
    ORDER_IGNORED,
    SET,
    SET_OF_BLOCKS,
)
from conftest import stack_file
from test_impact import by_name, report_of
from tools.impact import Impact
from tools.impact_rules import Action
from tools.synth import Plan, synthesize
from tools.synth_diff import Key, SynthPlan, diff

P = "rocm-stack:"


def _with_volumes(*volumes: tuple[str, str]) -> dict[str, Any]:
    config = stack_file("dev")
    shell = config[P + "hosts"][0]["containers"][0]
    shell["volumes"] = [{"hostPath": h, "containerPath": c} for h, c in volumes]
    return config


@pytest.fixture(scope="module")
def volumes_ab() -> tuple[Plan, str]:
    config = _with_volumes(("/data", "/data"), ("/models", "/models"))
    plan = synthesize("dev", config)
    return plan, "workstation-train"


def test_reordering_volumes_predicts_no_change(volumes_ab):
    """`volumes` is a TypeSet (resource_docker_container.go L434): the provider keys its elements by hash, so the
    same mounts in another order are no diff. Compared by position, this was a delete-then-replace."""
    base, name = volumes_ab
    head = synthesize("dev", _with_volumes(("/models", "/models"), ("/data", "/data")))
    container = head.get(CONTAINER, name)["inputs"]["volumes"]
    assert [v["hostPath"] for v in container][-2:] == ["/models", "/data"]  # the plan keeps the order it was given
    report = report_of(base, head)
    assert report.impacts == [] and not report.containers_stopped
    assert diff(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json())).empty


def test_a_changed_volume_replaces_the_container_as_one_set_element(volumes_ab):
    base, name = volumes_ab
    head = synthesize("dev", _with_volumes(("/models", "/models"), ("/scratch", "/data")))
    impact = by_name(report_of(base, head))[(CONTAINER, name)]
    assert impact.action is Action.DELETE_REPLACE and impact.stops_container
    assert impact.replaced_by == [("volumes", "tfbridge.set-element")]


def _container_plan(inputs: dict[str, Any], type_token: str = CONTAINER) -> dict[str, Any]:
    return {
        "stack": "dev",
        "resources": [
            {
                "type": type_token,
                "name": "c",
                "urn": f"urn:pulumi:dev::rocm-stack::{type_token}::c",
                "provider": "urn:pulumi:dev::rocm-stack::pulumi:providers:docker::h",
                "inputs": inputs,
            }
        ],
    }


def _two(path: str, kind: str) -> list[Any]:
    """Two distinct values of an element of the attribute at `path`: strings, or blocks of its first field."""
    if kind in (SET, LIST):
        return ["a", "b"]
    field = next(p for p in DOCKER_CONTAINER if p.startswith(path + ".") and p.count(".") == path.count(".") + 1)
    leaf = field.rsplit(".", 1)[1]
    return [{leaf: "a"}, {leaf: "b"}]


REORDERED = sorted(
    path
    for path, attribute in DOCKER_CONTAINER.items()
    if "." not in path and (attribute.kind in (SET, SET_OF_BLOCKS, LIST) or path in ORDER_IGNORED[CONTAINER])
)


@pytest.mark.parametrize("path", REORDERED)
def test_every_container_input_reordered_is_predicted_by_its_kind(path):
    """Generated from the one table: a set (or `ports`) in another order is no change; an ordered list (command,
    entrypoint) in another order is a change by its ForceNew."""
    attribute = DOCKER_CONTAINER[path]
    values = _two(path, attribute.kind)
    report = report_of(_container_plan({path: values}), _container_plan({path: values[::-1]}))
    if attribute.kind == LIST and path not in ORDER_IGNORED[CONTAINER]:
        (impact,) = report.impacts
        assert impact.action is (Action.DELETE_REPLACE if attribute.force_new else Action.UPDATE)
    else:
        assert report.impacts == []


def test_a_duplicate_in_a_set_is_no_element_of_its_own():
    """A set holds each element once (terraform-plugin-sdk helper/schema/set.go keys them by hash code)."""
    report = report_of(_container_plan({"envs": ["A=1", "B=2"]}), _container_plan({"envs": ["B=2", "A=1", "A=1"]}))
    assert report.impacts == []


# --- docker_network ------------------------------------------------------------------------------------------


def _network_change(prod_plan: Plan, **inputs: Any) -> tuple[dict[str, Any], dict[Key, Impact]]:
    head = copy.deepcopy(prod_plan.to_json())
    (network,) = [r for r in head["resources"] if r["type"] == NETWORK and r["name"] == "gpu-node-3-serve-b-vllm"]
    network["inputs"].update(inputs)
    return network, by_name(report_of(prod_plan, head))


def test_a_network_replaced_under_its_name_fails_and_touches_nothing_attached(prod_plan):
    """Every input of docker_network is ForceNew (resource_docker_network.go L25-135) and pulumi-docker gives it no
    DeleteBeforeReplace (resources.go L133): the new network is created before the old one is deleted, and Docker
    refuses a second network of the same name (measured: tests/e2e/test_e2e_corpus.py), so `pulumi up` fails there
    and nothing that waits for it changes. Before, the preview said it was replaced with its containers."""
    assert all(a.force_new for a in DOCKER_NETWORK.values())
    network, impacts = _network_change(prod_plan, internal=True)
    replaced = impacts[(NETWORK, "gpu-node-3-serve-b-vllm")]
    assert replaced.action is Action.REPLACE and replaced.replaced_by == [("internal", "tfbridge.force-new")]
    assert replaced.fails and "docker.name-unique" in replaced.rules
    assert replaced.meaning.startswith("**`pulumi up` fails here**")
    assert [key for key in impacts if key[0] == CONTAINER] == []


def test_a_renamed_network_is_created_first_and_replaces_its_containers(prod_plan):
    """Under a new name the create succeeds; its name is new, and `networksAdvanced` is ForceNew (L909): each container
    attached to it is replaced, then the vLLM server that joins the proxy's network namespace by the proxy's ID
    (`networkMode`, ForceNew), then its health check, which joins the server's."""
    network, impacts = _network_change(prod_plan, name="rocm-stack-serve-b-2")
    replaced = impacts[(NETWORK, "gpu-node-3-serve-b-vllm")]
    assert replaced.action is Action.REPLACE and not replaced.fails
    assert replaced.meaning.startswith("creates network `rocm-stack-serve-b-2` on `gpu-node-3` before deleting")
    assert ("networksAdvanced", "pulumi.unknown-output") in impacts[(CONTAINER, "gpu-node-3-serve-b-proxy")].replaced_by
    joined = {"gpu-node-3-serve-b", "gpu-node-3-serve-b-health"}
    assert {name for (t, name) in impacts if t == CONTAINER} == {"gpu-node-3-serve-b-proxy"} | joined
    assert all(impacts[(CONTAINER, name)].replaced_by == [("networkMode", "pulumi.unknown-output")] for name in joined)


def test_a_volume_replaced_under_its_name_is_adopted_and_said_so(prod_plan):
    """docker_volume has no DeleteBeforeReplace either (resources.go L136): the create answers with the existing
    volume, and the old resource's delete removes it, or fails while mounted (tests/e2e/test_e2e_corpus.py); a
    retained volume (the monitoring data) is only forgotten, so its data stay."""
    head = copy.deepcopy(prod_plan.to_json())
    for resource in head["resources"]:
        if resource["type"] == VOLUME and resource["name"] in (
            "gpu-node-1-prometheus-files",
            "gpu-node-1-grafana-data",
        ):
            resource["inputs"]["driverOpts"] = {"type": "tmpfs"}
    impacts = by_name(report_of(prod_plan, head))
    files, grafana = impacts[(VOLUME, "gpu-node-1-prometheus-files")], impacts[(VOLUME, "gpu-node-1-grafana-data")]
    assert files.action is grafana.action is Action.REPLACE and "docker.name-unique" in files.rules
    assert "its delete removes that very volume" in files.meaning and "retainOnDelete keeps it" in grafana.meaning


def test_a_network_reordered_label_set_is_no_change():
    labels = [{"label": "a", "value": "1"}, {"label": "b", "value": "2"}]
    before = _container_plan({"name": "n", "labels": labels}, NETWORK)
    after = _container_plan({"name": "n", "labels": labels[::-1]}, NETWORK)
    assert report_of(before, after).impacts == []
