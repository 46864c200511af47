"""Fields the API server refuses to change (components/k8s/replacement.py IMMUTABLE): the sweep over every kind the
stack renders (dev, prod, a stack with every Kubernetes feature on, device-plugin mode), each row's before/after
scenario through the real program and `rocm-stack diff` (tools/impact.py), the vendored CRDs' `oldSelf` rules read
mechanically, and the upstream lines the rows cite (read from the upstream sources `make upstream` fetches; skipped where one is absent)."""

from __future__ import annotations

import copy
import functools
import re
from typing import Any

import pytest

from components.k8s.replacement import (
    IMMUTABLE,
    MUTABLE_KINDS,
    Immutable,
    group_of,
    path_parts,
    provider_replaces,
    replace_on_changes,
    rows,
    value_at,
)
from tools.impact import Impact, predict
from tools.impact_rules import Action
from tools.synth import Plan, synthesize
from tools.synth_diff import SynthPlan
from conftest import all_features_plan, committed_plan, stack_file
from k8s_validation import yaml_documents
from test_k8s_seams import immutable_field_problems
from upstream_go import Upstream

P = "rocm-stack:"
DATA = __import__("pathlib").Path(__file__).parent / "data" / "kubernetes"
KUEUE = Upstream("kubernetes-sigs/kueue", "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb")  # tag v0.19.2
JOBSET = Upstream("kubernetes-sigs/jobset", "f22e565ac3cc3265c7c45ef67ecffdc689af5d77")  # tag v0.12.0
LWS = Upstream("kubernetes-sigs/lws", "2161f38ff333f9e24d3c44adef7cd5d9787cac00")  # tag v0.10.0
PULUMI_K8S = Upstream("pulumi/pulumi-kubernetes", "94977969d64112b04e19945818a7d5d5f38f631d")  # after v4.32.0
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"
PVC = "kubernetes:core/v1:PersistentVolumeClaim"
REPLACED = (Action.REPLACE, Action.DELETE_REPLACE)


def device_plugin_stack() -> dict[str, Any]:
    config = stack_file("dev")
    config[P + "kubernetes"]["mode"] = "device-plugin"
    return config


@functools.cache
def plans() -> dict[str, Plan]:
    """Every object kind the stack renders: dev, prod, the all-features stack as prod (tests/test_k8s_seams.py) and
    dev in device-plugin mode."""
    return {
        "dev": committed_plan("dev"),
        "prod": committed_plan("prod"),
        "every-feature": all_features_plan("prod"),
        "device-plugin": synthesize("dev", device_plugin_stack()),
    }


def kind_of(resource: dict[str, Any]) -> tuple[str, str]:
    inputs = resource["inputs"]
    return group_of(inputs["apiVersion"]), inputs["kind"]


def rendered() -> list[tuple[str, dict[str, Any]]]:
    return [(name, r) for name, plan in plans().items() for r in plan.kubernetes_objects()]


def report(base: Plan | dict[str, Any], head: Plan | dict[str, Any]) -> list[Impact]:
    def plan(p: Plan | dict[str, Any]) -> SynthPlan:
        return SynthPlan.model_validate(p.to_json() if isinstance(p, Plan) else p)

    return predict(plan(base), plan(head)).impacts


def impacts_of(base: Plan, config: dict[str, Any]) -> dict[tuple[str, str], Impact]:
    return {(i.type, i.name): i for i in report(base, synthesize("prod", config))}


# --- the sweep ------------------------------------------------------------------------------------------------


def test_every_rendered_kind_is_swept():
    """A kind the stack renders has rows in IMMUTABLE, or is in MUTABLE_KINDS with the source that says so: a new
    kind fails here until someone reads its API server's (or CRD's, or webhook's) update rules."""
    swept = {(r.group, r.kind) for r in IMMUTABLE} | set(MUTABLE_KINDS)
    kinds = {kind_of(r) for _, r in rendered()}
    assert kinds - swept == set()
    # The kinds of the four plans, listed: what the sweep covered.
    assert {kind for _, kind in kinds} == {
        *("Namespace ConfigMap Secret Service ServiceAccount PersistentVolumeClaim Deployment DaemonSet Job").split(),
        *("NetworkPolicy PodDisruptionBudget Role RoleBinding ClusterRole ClusterRoleBinding PriorityClass").split(),
        *("DeviceConfig PrometheusRule ServiceMonitor JobSet LeaderWorkerSet ClusterQueue LocalQueue").split(),
        *("ResourceFlavor ScaledObject ValidatingAdmissionPolicy ValidatingAdmissionPolicyBinding").split(),
    }


def test_every_immutable_field_of_every_rendered_object_is_replaced_or_left_refused_on_purpose():
    """The seam check of tests/test_k8s_seams.py (there on the all-features stack) on the four plans."""
    assert [problem for plan in plans().values() for problem in immutable_field_problems(plan)] == []


def test_rows_the_provider_already_replaces_are_not_declared_again():
    for _, resource in rendered():
        group, kind = kind_of(resource)
        assert [p for p in resource["replace_on_changes"] if provider_replaces(group, kind, p)] == [], resource["name"]


# --- each row, changed on an object of the plans: what `rocm-stack diff` predicts -------------------------------


def _set(inputs: Any, path: str | list[str], value: Any) -> None:
    """Sets `path` to `value`; under `[*]`, in every element of the list (one made where there is none)."""
    first, *rest = path_parts(path) if isinstance(path, str) else path
    if first == "*":
        if not inputs:
            inputs.append({})
        for element in inputs:
            _set(element, rest, value)
        return
    if rest:
        _set(inputs.setdefault(first, [] if rest[0] == "*" else {}), rest, value)
    else:
        inputs[first] = value


def _another(value: Any, row: Immutable) -> Any:
    if row.refused == "a decrease":
        number, unit = re.fullmatch(r"(\d+)(\D*)", value).groups()  # type: ignore[union-attr]
        return f"{int(number) // 2}{unit}"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, *value[:1]] or ["x"]
    if isinstance(value, dict):
        return {**value, "x": "x"}
    return {"x": "x"}  # a field the object did not set


@pytest.mark.parametrize("row", IMMUTABLE, ids=lambda r: f"{r.kind}.{r.path}")
def test_changing_the_field_is_a_replacement_or_a_predicted_refusal(row: Immutable):
    """The field changed on the first object of its kind in the four plans (the program's options as synthesized):
    replaced by the provider's rule, by the program's replaceOnChanges (rule k8s.immutable), or, for a row left
    refused, predicted as a refusal naming its source. A row whose condition no plan meets is checked against the
    options the program would declare once it holds."""
    holding = [
        (name, r)
        for name, r in rendered()
        if kind_of(r) == (row.group, row.kind) and row in rows(r["inputs"]["apiVersion"], row.kind, r["inputs"])
    ]
    if not holding:
        assert row.when, "every unconditional row's kind is rendered (test_every_rendered_kind_is_swept)"
        declared: dict[str, Any] = {}
        _set(declared, row.when, "x")
        api_version = f"{row.group}/v1" if row.group else "v1"
        assert (row.path in replace_on_changes(api_version, row.kind, declared)) == (
            row.replaced and not provider_replaces(row.group, row.kind, row.path)
        )
        return
    name, resource = holding[0]
    base = plans()[name].to_json()
    head = copy.deepcopy(base)
    [changed] = [r for r in head["resources"] if r["urn"] == resource["urn"]]
    _set(changed["inputs"], row.path, _another(value_at(changed["inputs"], row.path), row))
    [impact] = [i for i in report(base, head) if i.name == resource["name"] and i.type == resource["type"]]
    if provider_replaces(row.group, row.kind, row.path):
        assert impact.action in REPLACED and not {"k8s.force-new", "k8s.secret", "k8s.configmap"}.isdisjoint(
            impact.rules
        )
    elif row.replaced and row.refused == "any change":
        assert impact.action in REPLACED
        assert {"k8s.immutable", "pulumi.replace-on-changes"} <= set(impact.rules)
    else:
        assert impact.action is Action.REFUSED and impact.rules == ["k8s.immutable"]
        assert row.source in impact.meaning and row.note in impact.meaning


def test_without_the_programs_replace_on_changes_the_diff_predicts_the_refusal(prod_plan: Plan):
    """What `pulumi up` did before: a new priority value went out as a patch, refused; `rocm-stack diff` says so for
    a plan whose object does not declare the replacement."""
    config = stack_file("prod")
    config[P + "kubernetes"]["queues"]["priorities"] = {"training": 2000}
    head = synthesize("prod", config).to_json()
    base = copy.deepcopy(prod_plan.to_json())  # the session's plan stays as synthesized
    for plan in (base, head):
        for r in plan["resources"]:
            if r["type"] == PRIORITY_CLASS:
                r["replace_on_changes"], r["delete_before_replace"] = [], False
    [impact] = report(base, head)
    assert (impact.name, impact.action, impact.updated) == (
        "priority-training",
        Action.REFUSED,
        [("value", "k8s.immutable")],
    )
    assert "pkg/apis/scheduling/validation/validation.go" in impact.meaning
    assert "`pulumi up` fails" in predict_markdown(base, head)


def predict_markdown(base: dict[str, Any], head: dict[str, Any]) -> str:
    from tools.impact import to_markdown

    return to_markdown(predict(SynthPlan.model_validate(base), SynthPlan.model_validate(head)), 50)


# --- the scenarios a configuration change reaches ----------------------------------------------------------


def test_a_new_training_priority_deletes_and_recreates_its_priority_class(prod_plan: Plan):
    """`queues.priorities.training` 1000 -> 2000: the class is immutable (value), so it is deleted and created
    again under its name; nothing else changes (the pods name the class, not its value)."""
    config = stack_file("prod")
    config[P + "kubernetes"]["queues"]["priorities"] = {"training": 2000}
    impacts = impacts_of(prod_plan, config)
    assert set(impacts) == {(PRIORITY_CLASS, "priority-training")}
    impact = impacts[(PRIORITY_CLASS, "priority-training")]
    assert impact.action is Action.DELETE_REPLACE and impact.replaced_by == [("value", "pulumi.replace-on-changes")]
    assert impact.rules == ["k8s.immutable", "pulumi.delete-before-replace-option", "pulumi.replace-on-changes"]
    assert "running pods keep the priority they were created with" in impact.meaning


def test_a_local_queue_moved_to_another_cluster_queue_is_deleted_and_created_again(prod_plan: Plan):
    """`localQueues[].clusterQueue` (CEL `self == oldSelf`): the LocalQueue `ml/research` now feeds `pretrain`."""
    config = stack_file("prod")
    config[P + "kubernetes"]["queues"]["localQueues"][1]["clusterQueue"] = "pretrain"
    impacts = impacts_of(prod_plan, config)
    impact = impacts[(LOCAL_QUEUE, "local-queue-ml.research")]
    assert impact.action is Action.DELETE_REPLACE
    assert impact.replaced_by == [("spec.clusterQueue", "pulumi.replace-on-changes")]
    assert "k8s.immutable" in impact.rules and "doesn't exist" in impact.meaning
    assert set(impacts) == {(LOCAL_QUEUE, "local-queue-ml.research")}


@pytest.mark.parametrize(("size", "action"), [("1Ti", Action.REFUSED), ("3Ti", Action.UPDATE)])
def test_a_checkpoint_volume_grows_in_place_and_never_shrinks(prod_plan: Plan, size: str, action: Action):
    """`checkpoints.size` 2Ti -> 1Ti: the API server refuses a request below the claim's capacity, and the program
    does not replace the claim (its volume holds the checkpoints): `rocm-stack diff` says `pulumi up` fails there.
    2Ti -> 3Ti: patched in place (expanded where the StorageClass allows it)."""
    config = stack_file("prod")
    config[P + "training"][0]["kubernetes"]["checkpoints"]["size"] = size
    impacts = impacts_of(prod_plan, config)
    impact = impacts[(PVC, "llm-pretrain-checkpoints")]
    assert impact.action is action
    assert ("k8s.immutable" in impact.rules) == (action is Action.REFUSED)


# --- the vendored CRDs' own rules, read mechanically ---------------------------------------------------------


def _crd_rules(schema: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], str]]:
    found = [(path, v["rule"]) for v in schema.get("x-kubernetes-validations", []) if "oldSelf" in v["rule"]]
    for name, child in (schema.get("properties") or {}).items():
        found += _crd_rules(child, (*path, name))
    if isinstance(schema.get("items"), dict):
        found += _crd_rules(schema["items"], path)  # an element's rule holds for the list's path
    if isinstance(schema.get("additionalProperties"), dict):
        found += _crd_rules(schema["additionalProperties"], path)
    return found


def _immutable_by(path: tuple[str, ...], rule: str) -> tuple[str, str]:
    """(field, condition) a transition rule makes immutable: `self == oldSelf` at the field itself, or
    `!has(oldSelf.w) || (... self.f == oldSelf.f)`: field f, only where w is set."""
    if rule.strip() == "self == oldSelf":
        return ".".join(path), ""
    conditional = re.fullmatch(
        r"!has\(oldSelf\.(\w+)\) \|\| \(.*self\.(\w+)\s*==\s*oldSelf\.\2\)+", " ".join(rule.split())
    )
    assert conditional, f"a new kind of transition rule at {'.'.join(path)}: {rule} (read it and add its row)"
    return ".".join((*path, conditional[2])), ".".join((*path, conditional[1]))


def test_every_old_self_rule_of_the_vendored_crds_is_under_a_row():
    """Every CRD rule comparing with oldSelf, in every served version of the CRDs the stack's objects use (JobSet,
    LeaderWorkerSet, Kueue's three, KEDA's ScaledObject, the GPU Operator's DeviceConfig): a row of its kind whose
    path is the field or holds it (replaceOnChanges replaces for a change under its path: pulumi/pulumi
    pkg/resource/deploy/step_generator.go applyReplaceOnChanges L3148-3154 @ v3.259.0, PropertyPath.Contains)."""
    found = []
    for file in sorted(DATA.glob("*.yaml")):
        for crd in yaml_documents(file):
            if not isinstance(crd, dict) or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                for path, rule in _crd_rules(version["schema"]["openAPIV3Schema"]):
                    field, when = _immutable_by(path, rule)
                    covered = [
                        r
                        for r in IMMUTABLE
                        if (r.group, r.kind) == (group, kind)
                        and r.when == when
                        and (field == r.path or field.startswith(r.path + "."))
                    ]
                    assert covered, f"{kind} {version['name']} {field} ({rule}) has no row"
                    found.append((kind, field))
    assert {kind for kind, _ in found} == {"JobSet", "LocalQueue", "ResourceFlavor"}
    assert ("LocalQueue", "spec.clusterQueue") in found and ("JobSet", "spec.replicatedJobs.dependsOn") in found


def test_the_cited_crd_lines_hold_the_rules():
    lines = (DATA / "kueue.x-k8s.io_localqueues.yaml").read_text().splitlines()
    assert lines[466].strip() == "clusterQueue:"  # L467
    assert [
        line.strip() for line in lines[473:475]
    ]  # L474-475 == ["- message: field is immutable", "rule: self == oldSelf"]
    flavor = "\n".join((DATA / "kueue.x-k8s.io_resourceflavors.yaml").read_text().splitlines()[372:381])
    for field in ("nodeLabels are", "tolerations are", "topologyName is"):
        assert f"- message: {field} immutable when topologyName is set" in flavor


# --- the upstream lines the rows cite (the upstream sources of `make upstream`) -----------------------------------------------------


def _lines(upstream: Upstream, path: str, first: int, last: int) -> str:
    return "\n".join(upstream.read(path).decode().splitlines()[first - 1 : last])


@pytest.mark.parametrize(
    ("upstream", "path", "first", "last", "says"),
    [
        (KUEUE, "pkg/webhooks/clusterqueue_webhook.go", 102, 110, "newCQ.Spec.ConcurrentAdmissionPolicy,"),
        (KUEUE, "pkg/controller/jobframework/validation.go", 179, 183, "ValidateImmutableField(QueueName(newJob)"),
        (KUEUE, "pkg/controller/core/localqueue_controller.go", 263, 280, "r.queues.DeleteLocalQueue(log, e.Object)"),
        (KUEUE, "pkg/controller/core/workload_controller.go", 2082, 2084, "LocalQueue %s doesn't exist"),
        (JOBSET, "pkg/webhooks/jobset_webhook.go", 395, 396, "ValidateImmutableField(mungedSpec.ReplicatedJobs"),
        (JOBSET, "pkg/webhooks/jobset_webhook.go", 371, 371, "Allow pod template to be mutated for suspended JobSets"),
        (LWS, "pkg/webhooks/leaderworkerset_webhook.go", 102, 110, "cannot enable subGroupSize"),
        (PULUMI_K8S, "provider/pkg/provider/provider.go", 1645, 1658, "len(replaces) > 0 &&"),
        (PULUMI_K8S, "provider/pkg/await/await.go", 276, 286, "The resource already exists in the cluster."),
    ],
    ids=lambda v: v if isinstance(v, str) and "/" in v else None,
)
def test_the_cited_upstream_lines_say_what_the_rows_rely_on(upstream, path, first, last, says):
    assert says in _lines(upstream, path, first, last)
