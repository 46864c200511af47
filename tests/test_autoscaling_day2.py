"""Day 2 of inference autoscaling: what the next `pulumi up` does to a running prod platform when autoscaling is turned
on, retuned, rolled to a new image and turned off, predicted through synth and the change-impact preview
(tools.impact.predict: the engine's ignoreChanges, the provider's replacement and server-side-apply rules in
tools/impact_rules.py, each with its upstream source; tests/test_autoscaling.py pins those sources)."""

from __future__ import annotations

from typing import Any

import pytest

from components.workloads.inference import REPLICAS_PATH
from tools.impact import Impact, ImpactReport, predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import committed_plan, stack_file, synthesized

P = "rocm-stack:"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
RELEASE = "kubernetes:helm.sh/v3:Release"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
NEW_VLLM = (
    "rocm/vllm:rocm7.0.0_vllm_0.11.2_20260115@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)


def served(config: dict[str, Any]) -> dict[str, Any]:
    return config[P + "inference"][0]["kubernetes"]


def fixed(replicas: int | None = None) -> dict[str, Any]:
    """The prod stack running vLLM without autoscaling (prod's 2 replicas, or `replicas`)."""
    config = stack_file("prod")
    served(config).pop("autoscaling")
    if replicas is not None:
        served(config)["replicas"] = replicas
    return config


def report(base: dict[str, Any], head: dict[str, Any]) -> ImpactReport:
    return predict(
        SynthPlan.model_validate(synthesized("prod", base).to_json()),
        SynthPlan.model_validate(synthesized("prod", head).to_json()),
    )


def kubernetes_impacts(result: ImpactReport) -> dict[tuple[str, str], Impact]:
    return {(i.type, i.name): i for i in result.impacts if i.type.startswith("kubernetes:")}


@pytest.fixture(scope="module")
def autoscaled() -> Plan:
    return committed_plan("prod")


def roomy(config: dict[str, Any]) -> dict[str, Any]:
    """Without the fine-tuning run: 8 GPUs free for a higher minimum (the fleet is full otherwise)."""
    config[P + "training"] = [t for t in config[P + "training"] if t["name"] != "llm-finetune"]
    return config


def test_turning_autoscaling_on_for_a_running_workload_leaves_the_deployment_alone():
    """Before: 2 fixed replicas, serving. After: min 3, max 4. The Deployment's declared count changes (2 -> 3), but
    ignoreChanges resets it to the state's 2 before the diff: no provider call, no pod touched; KEDA's release and the
    ScaledObject are created, and KEDA's HPA raises the count to minReplicas itself. The budget follows the new
    minimum (prod: minReplicas - 1), patched in place."""
    head = roomy(stack_file("prod"))
    served(head)["autoscaling"]["minReplicas"] = 3
    impacts = kubernetes_impacts(report(roomy(fixed()), head))
    assert (DEPLOYMENT, "llama") not in impacts
    assert impacts[(RELEASE, "keda")].action is Action.CREATE
    assert impacts[(SCALED_OBJECT, "llama-scaler")].action is Action.CREATE
    budget = impacts[(PDB, "llama-pdb")]
    assert (budget.action, budget.updated) == (Action.UPDATE, [("spec.minAvailable", "k8s.update")])
    assert set(impacts) == {(RELEASE, "keda"), (SCALED_OBJECT, "llama-scaler"), (PDB, "llama-pdb")}


def test_turning_it_on_without_the_ignore_would_have_set_the_count():
    """The same change with the Deployment's ignoreChanges taken away updates spec.replicas: the ignore is what keeps
    Pulumi off the count (the preview is no rubber stamp)."""
    config = roomy(stack_file("prod"))
    served(config)["autoscaling"]["minReplicas"] = 3
    head = synthesize("prod", config).to_json()
    for resource in head["resources"]:
        if resource["type"] == DEPLOYMENT:
            resource["ignore_changes"] = []
    base = SynthPlan.model_validate(synthesized("prod", roomy(fixed())).to_json())
    impacts = kubernetes_impacts(predict(base, SynthPlan.model_validate(head)))
    assert impacts[(DEPLOYMENT, "llama")].updated == [(REPLICAS_PATH, "k8s.update")]


def test_a_new_max_replicas_updates_only_the_scaled_object():
    """maxReplicaCount is a plain field of the ScaledObject (no CEL immutability in the v2.20.2 CRD): patched in
    place; KEDA updates its HPA. Nothing else changes."""
    head = stack_file("prod")
    served(head)["autoscaling"]["maxReplicas"] = 3
    impacts = kubernetes_impacts(report(stack_file("prod"), head))
    assert set(impacts) == {(SCALED_OBJECT, "llama-scaler")}
    scaler = impacts[(SCALED_OBJECT, "llama-scaler")]
    assert (scaler.action, scaler.updated) == (Action.UPDATE, [("spec.maxReplicaCount", "k8s.update")])


def test_an_image_bump_with_autoscaling_on_rolls_the_pods_without_touching_the_count(autoscaled):
    """The pod template changes: the Deployment is updated in place and rolls its pods; spec.replicas is neither in
    the diff nor set by the apply (k8s.ssa-ignore-changes: the provider drops it where the HPA's manager owns it, else
    sends the live count). The rollout replaces one pod at a time without a surge pod (maxSurge 0, maxUnavailable 1):
    it never needs a GPU the Deployment does not hold, whatever count the autoscaler set."""
    head = stack_file("prod")
    head[P + "images"]["vllm"] = NEW_VLLM
    impacts = kubernetes_impacts(report(stack_file("prod"), head))
    deployment = impacts[(DEPLOYMENT, "llama")]
    assert deployment.action is Action.UPDATE
    assert {path for path, _ in deployment.updated} == {
        "spec.template.spec.containers[0].image",
        "spec.template.spec.initContainers[0].image",
    }
    assert "k8s.ssa-ignore-changes" in deployment.rules
    assert deployment.meaning == "rolls the pods of Deployment `ml/llama`"
    assert (SCALED_OBJECT, "llama-scaler") not in impacts
    strategy = manifest_of(autoscaled.get(DEPLOYMENT, "llama"))["spec"]["strategy"]
    assert strategy == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}


def test_autoscaling_turned_on_with_an_image_bump_rolls_the_pods_and_leaves_the_count():
    """Both at once: the update carries the new image only; the declared count (2 -> 3) is reset by the engine
    (pulumi.ignore-changes) and the apply leaves the live one (k8s.ssa-ignore-changes)."""
    head = roomy(stack_file("prod"))
    served(head)["autoscaling"]["minReplicas"] = 3
    head[P + "images"]["vllm"] = NEW_VLLM
    deployment = kubernetes_impacts(report(roomy(fixed()), head))[(DEPLOYMENT, "llama")]
    assert REPLICAS_PATH not in {path for path, _ in deployment.updated}
    assert {"pulumi.ignore-changes", "k8s.ssa-ignore-changes"} <= set(deployment.rules)


def test_turning_autoscaling_off_deletes_the_scaled_object_and_sets_a_new_count():
    """Back to `replicas: 3` with KEDA kept (`kubernetes.keda.install: true`). The ScaledObject is deleted last
    (deletes follow every update); KEDA's finalizer deletes its HPA. The Deployment's declared 3 differs from the
    state's 2: updated in place, its apply forced over the HPA's ownership of spec.replicas (patchForce). Until the
    ScaledObject is gone the HPA may still rescale once; `pulumi up --refresh` afterwards reads the live count and
    sets 3 again if it differs (docs/workloads.md)."""
    head = roomy(fixed(replicas=3))
    head[P + "kubernetes"]["keda"]["install"] = True
    impacts = kubernetes_impacts(report(roomy(stack_file("prod")), head))
    assert impacts[(SCALED_OBJECT, "llama-scaler")].action is Action.DELETE
    deployment = impacts[(DEPLOYMENT, "llama")]
    assert (deployment.action, deployment.updated) == (Action.UPDATE, [(REPLICAS_PATH, "k8s.update")])
    assert "k8s.ssa-ignore-changes" not in deployment.rules
    assert (RELEASE, "keda") not in impacts


def test_turning_it_off_without_keeping_keda_stops_at_the_protected_release():
    """Without `keda.install: true` the last autoscaled workload takes KEDA's release with it, which prod protects
    (uninstalling it deletes the CRDs and every ScaledObject): `pulumi up` stops there instead."""
    impacts = kubernetes_impacts(report(stack_file("prod"), fixed()))
    release = impacts[(RELEASE, "keda")]
    assert release.action is Action.DELETE and "protected" in release.meaning
