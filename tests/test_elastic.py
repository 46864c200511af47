"""Elastic training on Kubernetes (`training[].elastic`): the JobSet the committed prod stack declares for llm-finetune,
its command as torch's own launcher reads it, config refusals, and what a second `pulumi up` does when the bounds
change. The training program's side runs for real in tests/e2e/test_e2e_elastic.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from components.workloads import training
from tools.impact import predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import committed_plan, refusal, stack_file
from k8s_validation import stack_crds, validate_all

P = "rocm-stack:"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
NAME = "llm-finetune"


def finetune(config: dict[str, Any]) -> dict[str, Any]:
    return next(t for t in config[P + "training"] if t["name"] == NAME)


@pytest.fixture(scope="module")
def prod() -> Plan:
    return committed_plan("prod")


def jobset(plan: Plan) -> dict[str, Any]:
    [found] = [r for r in plan.of_type(JOBSET) if r["name"] == NAME]
    return manifest_of(found)


def replicated(plan: Plan) -> dict[str, dict[str, Any]]:
    return {job["name"]: job for job in jobset(plan)["spec"]["replicatedJobs"]}


def test_the_committed_prod_stack_declares_an_elastic_run_that_validates(prod):
    """Every Kubernetes object of the committed prod stack against the vendored JobSet CRD (v0.12.0) made strict, and each
    replicated Job's template against the built-in batch/v1 Job schema (tests/k8s_validation.py)."""
    objects = [manifest_of(r) for r in prod.kubernetes_objects()]
    assert validate_all(objects, stack_crds()) == len(objects)
    assert list(replicated(prod)) == [training.RENDEZVOUS, training.WORKERS]


def test_the_rendezvous_store_runs_in_a_pod_of_its_own_before_the_workers(prod):
    """c10d keeps the rendezvous in one TCPStore; left to torchrun, the agent whose hostname matches the endpoint
    hosts it (c10d_rendezvous_backend.py L139-146 @ torch 2.13), and losing that pod ends the run. Here a CPU pod
    runs programs/rendezvous.py at a stable name on the JobSet's headless Service (<jobset>-<replicatedJob>-<job>-
    <pod>.<subdomain>, jobset_types.go @ v0.12.0). dependsOn: "the ReplicatedJob will be created only after the
    referenced ReplicatedJobs reach their desired state" (JobSet CRD v0.12.0, replicatedJobs[].dependsOn; "Ready"
    or "Complete"; "the first ReplicatedJob in the slice cannot use the DependsOn API"), and the store's pod is
    Ready once its port accepts connections."""
    jobs = replicated(prod)
    store_job = jobs[training.RENDEZVOUS]["template"]["spec"]
    assert (store_job["completions"], store_job["parallelism"]) == (1, 1)
    [store] = store_job["template"]["spec"]["containers"]
    assert store["command"] == ["python3", "/opt/rocm-stack/programs/rendezvous.py", "--port", "29400"]
    assert store["readinessProbe"]["tcpSocket"] == {"port": 29400}
    assert "amd.com/gpu" not in store["resources"]["limits"]
    assert jobs[training.WORKERS]["dependsOn"] == [{"name": training.RENDEZVOUS, "status": "Ready"}]
    assert "dependsOn" not in jobs[training.RENDEZVOUS]
    assert training.rendezvous_store_host(NAME) == "llm-finetune-rendezvous-0-0.llm-finetune"
    assert jobset(prod)["spec"]["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}


def test_torchrun_reads_the_rendered_command_as_an_elastic_c10d_client(prod, monkeypatch):
    """torch 2.13's own launcher parses the trainer's command: `--nnodes 1:2` (run.py parse_min_max_nnodes), c10d
    at the store pod, this agent never the host, 3 restarts after failures. TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1:
    the opt-out that pytorch/pytorch#128096 added with store sharing (torch >= 2.4, so the image's 2.8 too);
    why it is needed: training.ELASTIC_ENV."""
    from torch.distributed import run

    [trainer] = replicated(prod)[training.WORKERS]["template"]["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1" and "PET_NODE_RANK" not in env
    assert "ports" not in trainer  # workers meet at a port rank 0 picks per round; the NetworkPolicy allows all
    for variable in [v for v in os.environ if v.startswith("PET_")]:
        monkeypatch.delenv(variable)
    config, _, arguments = run.config_from_args(run.get_args_parser().parse_args(trainer["command"][1:]))
    assert (config.min_nodes, config.max_nodes, config.nproc_per_node) == (1, 2, 4)
    assert (config.rdzv_backend, config.rdzv_endpoint) == ("c10d", "llm-finetune-rendezvous-0-0.llm-finetune:29400")
    assert config.rdzv_configs["is_host"] == "false" and config.max_restarts == 3
    assert arguments[-1] == training.ENTRY


def test_a_lost_pod_is_replaced_without_restarting_the_others(prod):
    """The workers' Indexed Job, maxNodes pods: a pod lost with its node (condition DisruptionTarget) is replaced
    without counting (podFailurePolicy action Ignore: "the counter towards the .spec.backoffLimit is not
    incremented and a replacement Pod is created", kubernetes.io/docs/concepts/workloads/controllers/job/
    #pod-failure-policy) while the survivors train on; its replacement joins the next round. Other pod failures
    count toward backoffLimit; invalid settings fail everything at once. One succeeded index completes the Job
    (Job successPolicy succeededCount, batch/v1 since 1.31 beta, GA 1.33: "the lingering pods are terminated"), and
    the JobSet is done with its workers (successPolicy targetReplicatedJobs), deleting the store's Job
    (jobset_controller.go L162-167 @ v0.12.0)."""
    spec = replicated(prod)[training.WORKERS]["template"]["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["backoffLimit"] == 6 and spec["successPolicy"] == {"rules": [{"succeededCount": 1}]}
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[1] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[0]["action"] == "FailJob" and rules[0]["onExitCodes"]["containerName"] == "check-settings"
    top = jobset(prod)["spec"]
    assert top["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [training.WORKERS]}
    assert top["failurePolicy"] == {
        "maxRestarts": 0,
        "rules": [{"name": "invalidSettings", "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]}],
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t.pop("kubernetes"), "elastic: an elastic run is torchrun's elastic agent on the pods of a JobSet"),
        (lambda t: t["kubernetes"].update(nodes=3), "kubernetes.nodes 3 differs from elastic.maxNodes 2"),
        (lambda t: t["elastic"].update(minNodes=3), "minNodes 3 exceeds maxNodes 2; lower minNodes"),
        (lambda t: t["elastic"].update(maxNodes=1), "maxNodes"),
    ],
)
def test_bad_elastic_settings_are_refused_naming_the_key(change, message):
    config = stack_file("prod")
    change(finetune(config))
    refused = refusal("prod", config)
    assert "training" in refused and message in refused


def test_changing_the_bounds_replaces_the_jobset_and_the_run_resumes_from_its_checkpoints(prod):
    """Day 2: a JobSet's spec is immutable (CEL `self == oldSelf`), so the stack declares every spec change a
    replacement (delete first: the fixed name); the checkpoint PVC is untouched and the new pods resume from it."""
    config = stack_file("prod")
    finetune(config)["elastic"] = {"minNodes": 2, "maxNodes": 2}
    head = synthesize("prod", config)
    report = predict(SynthPlan.model_validate(prod.to_json()), SynthPlan.model_validate(head.to_json()))
    changed = {(i.type, i.name): i for i in report.impacts}
    assert changed[(JOBSET, NAME)].action == Action.DELETE_REPLACE
    assert {name for _, name in changed} == {NAME}, sorted(changed)
    assert replicated(head)[training.WORKERS]["template"]["spec"]["completions"] == 2
