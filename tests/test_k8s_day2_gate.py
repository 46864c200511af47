"""Day 2 of the Kubernetes GPU check (components/workloads/gpu_check.py, issue 22 items 1 and 2): before/after pairs of
the prod stack through synth and the change-impact preview (tools/impact.py, pulumi-kubernetes' own rules), and the
upstream facts the design rests on, read from the upstream sources `make upstream` fetches (tests/upstream_go.py: skipped where absent).

What each scenario asserts: the engine's action on every Kubernetes object, and that nothing waits on GPUs that are
held: no object but a workload's pod template requests a GPU; each pod's gpucheck init container requests exactly
what its app container requests (the kubelet then hands the app container the devices the check had: kubernetes/
kubernetes pkg/kubelet/cm/devicemanager/manager.go @ 7510f32 devicesToAllocate, "Allocates from reusableDevices list
first"; #56818); a training is replaced delete-first and awaited only until created; a vLLM rollout has no surge pod.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import components.docker.checks
import components.workloads.training
from components.docker.checks import GPU_CHECK_PROGRAMS
from components.workloads.gpu_check import GPU_CHECK_CONTAINER
from components.workloads.training import AWAIT_CREATION, SETTINGS_CHECK_CONTAINER
from schema.project import PROGRAMS
from tools.impact import Impact, ImpactReport, predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import stack_file
from upstream_go import Upstream

P = "rocm-stack:"
NEW_PYTORCH = "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.9.0"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
PULUMI = Upstream("pulumi/pulumi", "1b5949891b3cefcb9974752b24a5ecef0acc86c8")  # v3.259.0 + 14
PULUMI_K8S = Upstream("pulumi/pulumi-kubernetes", "94977969d64112b04e19945818a7d5d5f38f631d")  # after v4.32.0
GPU_OPERATOR = Upstream("ROCm/gpu-operator", "858cf255c7dd27cebf1cc5db400eee3aa06ecbbc")  # tag v1.5.1


def report_of(base: Plan, head: Plan) -> ImpactReport:
    return predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json()))


def kubernetes_impacts(report: ImpactReport) -> dict[tuple[str, str], Impact]:
    return {(i.type, i.name): i for i in report.impacts if i.type.startswith("kubernetes:")}


# --- the invariant every plan keeps -----------------------------------------------------------------------------


def pod_templates(obj: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The pod templates of a workload object: a Deployment's or Job's, each replicated Job's of a JobSet."""
    spec = obj.get("spec") or {}
    if obj["kind"] in ("Deployment", "Job"):
        yield spec["template"]
    elif obj["kind"] == "JobSet":
        for replicated in spec["replicatedJobs"]:
            yield replicated["template"]["spec"]["template"]


def gpu_requests(value: Any, path: str = "") -> Iterator[str]:
    """Paths of every `resources` block that asks for an amd.com/ resource."""
    if isinstance(value, dict):
        resources = value.get("resources")
        if isinstance(resources, dict) and any(
            key.startswith("amd.com/") for part in resources.values() if isinstance(part, dict) for key in part
        ):
            yield path
        for key, child in value.items():
            yield from gpu_requests(child, f"{path}.{key}")
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from gpu_requests(child, f"{path}[{index}]")


# A container of a workload's pod template: a Deployment's or Job's, or a JobSet's replicated Job's.
POD_CONTAINER = re.compile(
    r"\.spec(\.template|\.replicatedJobs\[\d+\]\.template\.spec\.template)\.spec\.(containers|initContainers)\[\d+\]"
)


def gpus_of(container: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in (container.get("resources") or {}).get("limits", {}).items() if k.startswith("amd.com/")}


def assert_nothing_waits_on_held_gpus(plan: Plan) -> None:
    checked = 0
    for resource in plan.kubernetes_objects():
        obj = manifest_of(resource)
        for path in gpu_requests(obj):
            assert obj["kind"] in ("Deployment", "Job", "JobSet") and POD_CONTAINER.fullmatch(path), (
                f"{obj['kind']} {resource['name']} requests GPUs at {path}, outside a workload's pod"
            )
        if obj.get("kind") not in ("Deployment", "Job", "JobSet"):
            continue
        for template in pod_templates(obj):
            pod = template["spec"]
            if not any(gpus_of(c) for c in pod["containers"]):
                continue  # an elastic run's rendezvous store: no GPU, no check
            (app,) = [c for c in pod["containers"] if gpus_of(c)]  # beside it at most vLLM's proxy, without GPUs
            (check,) = [c for c in pod.get("initContainers", []) if c["name"] == GPU_CHECK_CONTAINER]
            assert gpus_of(app) and check["resources"] == app["resources"], resource["name"]  # the same devices
            assert "restartPolicy" not in check  # a sidecar's devices are not passed on (kubernetes#120461)
            assert not [c for c in pod["initContainers"] if c is not check and gpus_of(c)]
            checked += 1
        if obj["kind"] == "Deployment":
            # A rolling update never adds a pod: each new one takes the GPUs its predecessor freed (a router's
            # Deployment, without GPUs, surges instead).
            gpu = any(gpus_of(c) for t in pod_templates(obj) for c in t["spec"]["containers"])
            assert obj["spec"]["strategy"]["rollingUpdate"] == (
                {"maxSurge": 0, "maxUnavailable": 1} if gpu else {"maxSurge": 1, "maxUnavailable": 0}
            )
        else:
            # `pulumi up` does not wait for a training's pods (they wait for free GPUs, or for Kueue)...
            assert obj["metadata"]["annotations"].items() >= AWAIT_CREATION.items()
            # ... and a replacement is created only once the old one (and the GPUs its pods held) is gone.
            assert resource["delete_before_replace"]
    assert checked, "no GPU pod in the plan"


# --- scenarios on the prod stack -------------------------------------------------------------------------------


def test_prod_as_shipped(prod_plan):
    assert_nothing_waits_on_held_gpus(prod_plan)
    assert not prod_plan.of_type("kubernetes:batch/v1:Job")  # no gate Job of its own


def test_pytorch_image_bump_with_training_running_replaces_only_the_training(prod_plan):
    """Before issue 22 the same bump also replaced the gate Job, which then needed all 32 GPUs while the running
    training and vLLM held 24: it never scheduled and every update behind it never applied."""
    config = stack_file("prod")
    config[P + "images"]["pytorch"] = NEW_PYTORCH
    head = synthesize("prod", config)
    assert_nothing_waits_on_held_gpus(head)
    impacts = kubernetes_impacts(report_of(prod_plan, head))
    # Both trainings (llm-finetune is elastic); vLLM runs the vllm image: untouched
    assert set(impacts) == {(JOBSET, "llm-pretrain"), (JOBSET, "llm-finetune")}
    jobset = impacts[(JOBSET, "llm-pretrain")]
    # replaceOnChanges of spec.replicatedJobs (immutable: JobSet's webhook) with deleteBeforeReplace: the old pods go
    # first, and the new ones check and use the GPUs they freed.
    assert jobset.action is Action.DELETE_REPLACE
    assert {path.rsplit(".", 1)[-1] for path, _ in jobset.replaced_by} == {"image"}
    assert [path for path, _ in jobset.replaced_by if "initContainers" in path] == [
        "spec.replicatedJobs[0].template.spec.template.spec.initContainers[0].image",
        "spec.replicatedJobs[0].template.spec.template.spec.initContainers[1].image",
    ]  # the check runs in the new image too
    assert jobset.rules == ["k8s.immutable", "pulumi.delete-before-replace-option", "pulumi.replace-on-changes"]


@pytest.fixture
def changed_gpucheck(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """programs/ with a changed gpucheck.py, where the program reads it (the pods' ConfigMaps, the Docker checks)."""
    programs = tmp_path / "programs"
    shutil.copytree(PROGRAMS, programs)
    (programs / "gpucheck.py").write_text((programs / "gpucheck.py").read_text() + "\n# a new check\n")
    files = components.workloads.training.program_files
    monkeypatch.setattr(components.workloads.training, "program_files", lambda: files(programs))
    monkeypatch.setattr(components.docker.checks, "PROGRAM_SOURCE", programs)
    return programs


def test_a_gpucheck_change_rolls_every_gpu_pod_through_the_new_check(prod_plan, changed_gpucheck):
    head = synthesize("prod")
    assert_nothing_waits_on_held_gpus(head)
    impacts = kubernetes_impacts(report_of(prod_plan, head))
    assert set(impacts) == {
        (CONFIG_MAP, "llm-pretrain-program"),
        (CONFIG_MAP, "llm-finetune-program"),
        (CONFIG_MAP, "llama-program"),
        (JOBSET, "llm-pretrain"),
        (JOBSET, "llm-finetune"),
        (DEPLOYMENT, "llama"),
    }
    for name in ("llm-pretrain-program", "llm-finetune-program", "llama-program"):
        # A content-named immutable ConfigMap: a new one is created before the old one is deleted (k8s.identity).
        config_map = impacts[(CONFIG_MAP, name)]
        assert config_map.action is Action.REPLACE
        assert config_map.replaced_by == [("data.gpucheck.py", "k8s.configmap"), ("metadata.name", "k8s.identity")]
    assert impacts[(JOBSET, "llm-pretrain")].action is Action.DELETE_REPLACE
    # The Deployment's pod template names the new ConfigMap: patched in place, its pods roll one by one (maxSurge 0),
    # each through the new check on the GPUs of the pod it replaces.
    deployment = impacts[(DEPLOYMENT, "llama")]
    assert deployment.action is Action.UPDATE
    assert deployment.updated == [("spec.template.spec.volumes[2].configMap.name", "k8s.update")]
    assert deployment.meaning == "rolls the pods of Deployment `ml/llama`"
    # vLLM ships the check's files only: a change of train.py would not roll it.
    llama = manifest_of(head.get(CONFIG_MAP, "llama-program"))
    assert sorted(llama["data"]) == sorted(GPU_CHECK_PROGRAMS) and llama["immutable"] is True
    assert llama["data"]["gpucheck.py"] == (changed_gpucheck / "gpucheck.py").read_text()


def test_a_node_added_to_the_fleet_changes_nothing_and_more_training_nodes_replace_only_the_training(prod_plan):
    """Before issue 22 both replaced the gate Job (its completions were gpuFleet.nodes). A node that joins is
    checked by the first pods that land on it (docs/kubernetes.md "Node life cycle")."""
    config = stack_file("prod")
    config[P + "gpuFleet"]["nodes"] = 5
    head = synthesize("prod", config)
    assert report_of(prod_plan, head).impacts == []
    config[P + "training"][0]["kubernetes"]["nodes"] = 3
    head = synthesize("prod", config)
    assert_nothing_waits_on_held_gpus(head)
    impacts = kubernetes_impacts(report_of(prod_plan, head))
    assert set(impacts) == {(JOBSET, "llm-pretrain")}
    assert impacts[(JOBSET, "llm-pretrain")].action is Action.DELETE_REPLACE
    replicated = manifest_of(head.get(JOBSET, "llm-pretrain"))["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (replicated["completions"], replicated["parallelism"]) == (3, 3)  # each pod checks its own node's GPUs


def test_checks_off_drops_the_init_container_and_its_config_map():
    config = stack_file("prod")
    config[P + "checks"] = {"enable": False}
    plan = synthesize("prod", config)
    programs = sorted(r["name"] for r in plan.of_type(CONFIG_MAP) if r["name"].endswith("-program"))
    assert programs == ["llm-finetune-program", "llm-pretrain-program"]
    for resource in (*plan.of_type(JOBSET), plan.get(DEPLOYMENT, "llama")):
        for template in pod_templates(manifest_of(resource)):
            names = [c["name"] for c in template["spec"].get("initContainers", [])]
            assert GPU_CHECK_CONTAINER not in names


# --- the check as the pod runs it --------------------------------------------------------------------------------


def test_the_vllm_pods_check_runs_from_its_config_map_alone(prod_plan, tmp_path):
    """The init container's own command and environment, with only the ConfigMap's files on PYTHONPATH, on this
    machine's CPU-only torch: the program starts and fails on the GPU count, with its JSON report."""
    template = manifest_of(prod_plan.get(DEPLOYMENT, "llama"))["spec"]["template"]["spec"]
    (check,) = template["initContainers"]
    mount = next(m["mountPath"] for m in check["volumeMounts"] if m["name"] == "program")
    volume = next(v for v in template["volumes"] if v["name"] == "program")
    config_map = next(
        manifest_of(r)
        for r in prod_plan.of_type(CONFIG_MAP)
        if manifest_of(r)["metadata"]["name"] == volume["configMap"]["name"]
    )
    programs = tmp_path / mount.lstrip("/")
    programs.mkdir(parents=True)
    for name, text in config_map["data"].items():
        (programs / name).write_text(text)
    env = {e["name"]: str(tmp_path) + e["value"] for e in check["env"] if e["name"] == "PYTHONPATH"}
    command = [sys.executable if check["command"][0] == "python3" else check["command"][0], *check["command"][1:]]
    run = subprocess.run(
        command,
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONWARNINGS": "ignore", **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1, run.stderr  # gpucheck: 1 = a check failed (2 would be bad arguments)
    assert '"expect_gpus": 4' in run.stdout and '"visible_gpus": 0' in run.stdout


def test_a_failed_gpu_check_is_no_invalid_settings(prod_plan):
    """The Job's one exit-code rule matches exit code 2 of check-settings only: "containerName: Restricts the check
    for exit codes to the container with the specified name" (batch/v1 PodFailurePolicyOnExitCodesRequirement, the
    Kubernetes API reference); its other rule matches the DisruptionTarget condition, which a failed container does
    not set. So a GPU check's failure, whatever its code, counts toward backoffLimit: the Job fails with reason
    BackoffLimitExceeded, which neither JobSet rule matches (both need PodFailurePolicy), and the JobSet restarts."""
    spec = manifest_of(prod_plan.get(JOBSET, "llm-pretrain"))["spec"]
    rules = spec["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    (exit_codes,) = [r["onExitCodes"] for r in rules if "onExitCodes" in r]
    assert exit_codes["containerName"] == SETTINGS_CHECK_CONTAINER != GPU_CHECK_CONTAINER
    assert [r["onPodConditions"] for r in rules if "onExitCodes" not in r] == [
        [{"type": "DisruptionTarget", "status": "True"}]
    ]
    assert all(r["onJobFailureReasons"] == ["PodFailurePolicy"] for r in spec["failurePolicy"]["rules"])
    assert spec["failurePolicy"]["maxRestarts"] == 6  # training.kubernetes.backoffLimit: restarts, each checked again


# --- upstream facts (read from the upstream sources `make upstream` fetches) ------------------------------------------------------------


def test_the_engine_awaits_a_resource_whose_create_failed_to_initialize_again_on_the_next_up():
    """A create that times out in the provider's await leaves the object in the state with init errors; the next
    `pulumi up` gives it an update step even when nothing changed (the retry of docs/operations.md)."""
    lines = PULUMI.read("pkg/resource/deploy/step_generator.go").decode().splitlines()
    assert lines[1942].strip() == "hasInitErrors := len(old.InitErrors) > 0"  # L1943
    block = "\n".join(lines[2179:2196])  # L2180-2196, cited in docs/operations.md
    assert lines[2179].strip().startswith("// If resource was unchanged, but there were initialization errors")
    assert re.fullmatch(
        r"\s*if hasInitErrors \{.*return \[\]Step\{NewUpdateStep\(.*\)\}, nil\s*\}", block.split("\n", 2)[2], re.S
    )
    assert "L2180-2196" in (Path(__file__).parents[1] / "docs" / "operations.md").read_text()


def test_pulumi_kubernetes_update_awaits_again_and_a_waitfor_annotation_replaces_the_awaiter():
    source = PULUMI_K8S.read("provider/pkg/await/await.go").decode()
    update = source[source.index("func Update(c UpdateConfig)") : source.index("func updateResource(")]
    # The update (also an empty one) runs the kind's awaiter, unless waitFor / skipAwait says otherwise (`custom`).
    assert "metadata.ReadyCondition(ctx, source, c.ClientSet, c.DedupLogger, c.Inputs, currentOutputs)" in update
    assert "if spec, ok := a[id]; ok && spec.await != nil && !custom {" in update
    assert "live, err := awaiter.Await(ctx)" in update
    overrides = PULUMI_K8S.read("provider/pkg/metadata/overrides.go").decode()
    assert 'case strings.HasPrefix(expr, "jsonpath="):' in overrides  # AWAIT_CREATION's form
    # An unchanged Deployment (no new revision) is ready once its ReplicaSet's pods are: the retry passes when the
    # pods got past their check in the meantime.
    deployment = PULUMI_K8S.read("provider/pkg/await/deployment.go").decode()
    assert re.search(
        r"\} else \{\s*dia\.updatedReplicaSetReady = updatedReplicaSetCreated &&\s*doneWaitingOnReplicas\(\)\s*\}",
        deployment,
    )
    assert "return dia.deployment, &timeoutError{" in deployment  # a stuck rollout fails `pulumi up` at the timeout


def test_amds_init_container_caveat_is_about_its_own_gpu_count():
    doc = GPU_OPERATOR.read("docs/test/pre-start-job-test.md").decode().splitlines()
    assert "initContainer and workload container might not be assigned the same GPUs" in doc[11]  # L12
    assert "both initContainer and workload containers request all GPUs on the same node" in doc[13]  # L14
    assert "not compatible with partitioned GPUs" in doc[7]  # L8


def test_a_second_pulumi_up_of_an_unchanged_prod_stack_changes_nothing(prod_plan: Plan):
    """Day 2 starts from a no-op: the program declares the same inputs on every run (auto-named Secrets, content-named
    ConfigMaps, the check's init containers), so a preview right after a deploy predicts no step. What a real API
    server defaults on top is not seen here (no cluster); the Docker side is read back on a real daemon
    (tests/e2e/test_e2e_readback.py)."""
    report = report_of(prod_plan, synthesize("prod"))
    assert report.impacts == []
