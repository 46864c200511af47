"""The policy pack's prod allow-list (issue 34 item 3, the catalogue's rules/allowlist.py): derived from the program's
own synth of the committed prod stacks and committed; prod's and dev's plans pass; every mutation of prod's plan, one
field at a time, into a value outside the list is refused by the pack (tests/attacks/plans has the 14 tampered plans
of the review)."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy.proxy import UnknownValueError

from rules import allowlist
from tools import allowlist as generator
from tools.synth import Plan

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "policy"))  # the CLI runs the pack with policy/ first on sys.path

from rocm_policy import offline, pack  # noqa: E402

POLICY = [p for p in pack.POLICIES if p.name == "prod-declared-by-the-program"]
IMAGE = allowlist.REMOTE_IMAGE
PROD_CONFIG = offline.read_policy_config(ROOT / "policy" / "prod.json")


def test_the_committed_allowlist_is_what_the_program_declares_for_the_prod_stacks(prod_plan: Plan):
    """`rocm-stack allowlist --check` without a second synth: the list derived from the session's prod synth."""
    assert generator.prod_stacks() == ["prod"]
    derived = {"derivedFrom": ["prod"], **allowlist.derive([prod_plan.resources], generator.computed_texts(prod_plan))}
    assert allowlist.load(pack.ALLOWLIST_FILE) == json.loads(json.dumps(derived)), (
        "stale: run `rocm-stack allowlist --write`"
    )


def test_prod_and_dev_plans_pass(prod_plan: Plan, dev_plan: Plan):
    with offline.stack_environment("prod"):
        assert offline.check(prod_plan.resources, config=PROD_CONFIG) == []
    with offline.stack_environment("dev"):  # dev: the policy is not applicable
        assert offline.check(dev_plan.resources, POLICY) == []
        # Judged as prod (policy/prod.json on a dev stack), dev's program is refused: it is not prod's.
        assert offline.check(dev_plan.resources, POLICY, config=PROD_CONFIG)


def test_what_the_engine_sends_that_synth_does_not_show_passes(prod_plan: Plan):
    """The engine hands the pack a resource's inputs after the provider's Check (pulumi/pulumi
    pkg/resource/deploy/step_generator.go v3.259.0 L1342-1410: `new.Inputs = resp.Properties`, then
    AnalyzerResource{Properties: inputs}): the bridge's schema defaults for inputs left unset (terraform-provider-docker
    v4.5.0 resource_docker_container.go, allowlist.PROVIDER_DEFAULTS) and its `__defaults`; numbers as floats (a
    protobuf Struct has no integers); secrets decrypted; values computed by other resources unknown during preview."""
    resources = copy.deepcopy(prod_plan.resources)
    container = next(r for r in resources if r["name"] == "gpu-node-1-train-a")
    inputs = container["inputs"]
    defaults = allowlist.PROVIDER_DEFAULTS[allowlist.CONTAINER]
    inputs.update({p[1:]: v for p, v in defaults.items() if "." not in p[1:] and "[" not in p}, __defaults=[])
    inputs["healthcheck"] = {**inputs.get("healthcheck", {}), "startInterval": "0s"}
    inputs.update(mustRun=False, restart="on-failure")  # what the program declares wins over the default
    inputs["shmSize"] = float(inputs["shmSize"])
    grafana = next(r for r in resources if r["name"] == "gpu-node-1-grafana")
    assert grafana["inputs"]["envs"] == "[secret]"
    grafana["inputs"]["envs"] = ["GF_SECURITY_ADMIN_PASSWORD=decrypted", "GF_PATHS_DATA=/var/lib/grafana"]
    with offline.stack_environment("prod"):
        assert offline.check(resources, POLICY, config=PROD_CONFIG) == []
    inputs["privileged"] = False  # not a default the provider fills in: a field prod's program never declares
    with offline.stack_environment("prod"):
        [refused] = offline.check(resources, POLICY, config=PROD_CONFIG)
    assert (
        refused.message
        == "field privileged is not one the program declares for prod (rule prod-declared-by-the-program)"
    )


def test_an_unknown_value_passes_only_where_another_resource_computes_it():
    role = {"fields": {".image": ["<computed>"], ".name": ["x"]}, "secret": [], "required": [".image", ".name"]}
    allowed = {"types": {allowlist.CONTAINER: {"": role}}}

    class Unknown(dict):
        """A value pulumi_policy's proxy refuses to show during preview."""

        def __getitem__(self, key: str) -> Any:
            if key in self.unknown:
                raise UnknownValueError("04da6b54-80e4-46f7-96ec-b56ff0331ba9", [key])
            return super().__getitem__(key)

    props = Unknown(image="", name="")
    props.unknown = {"image"}
    assert allowlist.problems(allowlist.Judged(allowlist.CONTAINER, pack.plain(props)), allowed) == [
        'name = "" is not a value the program declares for prod ("x")'
    ]
    props.unknown = {"image", "name"}
    assert allowlist.problems(allowlist.Judged(allowlist.CONTAINER, pack.plain(props)), allowed) == [
        "name is unknown during preview, where the program declares a constant"
    ]


# --- the mutation generator --------------------------------------------------------------------------------


def _nodes(value: Any, at: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(location, node) of every node of a resource's inputs: a location is a tuple of keys and indices."""
    yield at, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _nodes(child, (*at, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _nodes(child, (*at, index))


def _path(at: tuple) -> str:
    return "".join(allowlist.LIST_ITEM if isinstance(step, int) else allowlist._step(step) for step in at)


def _parent(inputs: dict, at: tuple) -> Any:
    for step in at[:-1]:
        inputs = inputs[step]
    return inputs


def _outside_value(value: Any, allowed: list[Any]) -> Any:
    """A value of the leaf's kind that the allow-list does not hold at its path (None: every text passes there)."""
    if isinstance(value, bool):
        candidates: list[Any] = [not value, "yes"]
    elif isinstance(value, (int, float)):
        candidates = [max([a for a in allowed if isinstance(a, (int, float))] + [0]) + 1]
    elif isinstance(value, str):
        candidates = [value + "-mutated", "host"]
    elif value == {}:
        candidates = [{"mutated": True}]
    elif value == []:
        candidates = [["mutated"]]
    else:
        candidates = ["mutated"]
    return next((c for c in candidates if not allowlist._matches(c, allowed)), None)


def mutations(resource: dict[str, Any], role: dict[str, Any]) -> Iterator[str]:
    """Mutates a resource of prod's plan in place, one field at a time, each outside its role's allow-list, and
    yields what it changed (then puts it back): every leaf given a value the list does not hold at its path, every
    object given a field the program never declares, every field that every declaration of its role has removed."""
    if True:
        inputs = resource["inputs"]
        for at, node in list(_nodes(inputs)):
            path, name = _path(at), resource["name"]
            if allowlist._under(path, role["secret"]):
                continue  # a secret: any value (the engine hands the pack its decrypted text)
            if isinstance(node, dict):
                node["mutatedField"] = "x"
                yield f"{name}: {path}.mutatedField added"
                del node["mutatedField"]
            if (isinstance(node, (dict, list)) and node) or path not in role["fields"]:
                continue
            value = _outside_value(node, role["fields"][path])
            if value is not None and at:
                parent = _parent(inputs, at)
                parent[at[-1]] = value
                yield f"{name}: {path} = {value!r}"
                parent[at[-1]] = node
            elif value is not None:
                resource["inputs"] = value
                yield f"{name}: inputs = {value!r}"
                resource["inputs"] = inputs
            if path in role["required"] and at and not isinstance(at[-1], int):
                parent = _parent(inputs, at)
                keys = list(parent)
                del parent[at[-1]]
                if all(p != path for p, _ in allowlist.leaves(inputs)):  # no other item of a list still has it
                    yield f"{name}: {path} removed"
                parent.update({k: node if k == at[-1] else parent.pop(k) for k in keys if k in parent or k == at[-1]})


@pytest.mark.slow
def test_every_mutation_of_prod_s_plan_outside_the_allowlist_is_refused(prod_plan: Plan):
    plan = copy.deepcopy(prod_plan)
    by_urn = {r["urn"]: r for r in plan.resources}
    allowed = allowlist.load(pack.ALLOWLIST_FILE)["types"]
    count, passed = 0, []
    with offline.stack_environment("prod"):
        for resource in plan.resources:
            if resource["type"].startswith(allowlist.PROVIDERS):
                continue  # judged by prod-host-access (allowlist.problems says why)
            # The resource with the images its role depends on, as the engine hands a stack policy.
            images = [by_urn[u] for u in resource["depends_on"] if u in by_urn and by_urn[u]["type"] == IMAGE]
            names = [i["inputs"]["name"] for i in images]
            role = allowed[resource["type"]][allowlist.role_of(resource["type"], resource["inputs"], names)]
            for what in mutations(resource, role):
                count += 1
                if not offline.check([resource, *images], POLICY, config=PROD_CONFIG):
                    passed.append(what)
    assert plan.resources == prod_plan.resources  # every mutation was put back
    assert count > 5000 and passed == [], f"{len(passed)} of {count} mutations passed: {passed[:20]}"


@pytest.mark.parametrize("kind", ["type", "role"])
def test_a_type_or_role_the_program_never_declares_is_refused(prod_plan: Plan, kind: str):
    resources = copy.deepcopy(prod_plan.resources)
    proxy = next(r for r in resources if r["name"] == "gpu-node-3-serve-b-proxy")
    if kind == "type":
        proxy["type"] = "docker:index/plugin:Plugin"
        text = "resource type docker:index/plugin:Plugin is not one the program declares for prod"
    else:
        proxy["inputs"]["labels"] = [{"label": "rocm-stack.monitoring", "value": "cadvisor"}]
        text = "a Container of role 'image=nginx;rocm-stack.monitoring=cadvisor' (its image and the stack's labels)"
    with offline.stack_environment("prod"):
        violations = offline.check(resources, POLICY, config=PROD_CONFIG)
    assert [v.message for v in violations if v.urn == proxy["urn"]][0].startswith(text)
