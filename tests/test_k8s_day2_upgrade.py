"""Day 2 on Kubernetes: a GPU driver upgrade of the prod stack, and the DeviceConfig/DCM changes around it.

Before/after stacks go through synth and the change-impact preview (tools.impact.predict, the providers' rules in
tools/impact_rules.py); what the GPU Operator then does on the cluster is pinned to its source at the pinned
release (gpu-operator v1.5.1, read from the upstream source `make upstream` fetches; skipped where it is absent), and the Kubernetes and
JobSet behaviour it relies on to their source.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from components.k8s.gpu_operator import DEVICE_CONFIG_KIND, DRIVER_IMAGE_PATH
from components.workloads.training import DISRUPTION_FAILURE_MESSAGE, DISRUPTION_TARGET
from schema.kubernetes import REBOOT_POD_TOLERATED_TAINT_KEY, SCHEDULER_FILTERED_TAINT_EFFECTS
from schema.workloads import TORCHRUN_EXIT_MARGIN_S, TORCHRUN_SHUTDOWN_ENV
from tools.impact import ImpactReport, predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import refused, stack_file
from upstream_go import Upstream

P = "rocm-stack:"
DEVICE_CONFIG = "kubernetes:amd.com/v1alpha1:DeviceConfig"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
PDB = "kubernetes:policy/v1:PodDisruptionBudget"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
OPERATOR = Upstream("ROCm/gpu-operator", "858cf255c7dd27cebf1cc5db400eee3aa06ecbbc")  # tag v1.5.1
JOBSET_REPO = Upstream("kubernetes-sigs/jobset", "f22e565ac3cc3265c7c45ef67ecffdc689af5d77")  # tag v0.12.0
UPGRADEMGR = "internal/controllers/upgrademgr.go"
DRIVER = "kubernetes.gpuOperator.deviceConfig.driver"
NEXT_DRIVER = "30.20.2"


def report_of(base: Plan, head: Plan) -> ImpactReport:
    return predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json()))


def driver_of(config: dict[str, Any]) -> dict[str, Any]:
    return config[P + "kubernetes"]["gpuOperator"]["deviceConfig"]["driver"]


def lines(upstream: Upstream, path: str, first: int, last: int) -> str:
    return "\n".join(upstream.read(path).decode().splitlines()[first - 1 : last])


def only(plan: Plan, type_token: str) -> dict[str, Any]:
    [resource] = plan.of_type(type_token)
    return resource


# --- the driver upgrade: what `pulumi up` does -------------------------------------------------------------------


@pytest.fixture(scope="module")
def driver_bump(prod_plan: Plan) -> tuple[Plan, ImpactReport]:
    config = stack_file("prod")
    assert driver_of(config)["version"] == "30.20.1"
    driver_of(config)["version"] = NEXT_DRIVER
    head = synthesize("prod", config)
    return head, report_of(prod_plan, head)


def test_a_driver_version_bump_patches_the_device_config_in_place_and_nothing_else(driver_bump):
    """pulumi-kubernetes replaces a custom resource only for a new name or namespace (rule k8s.identity; diff.go
    lists no DeviceConfig: tests/test_impact_rules.py), and the DeviceConfig's replaceOnChanges names only the driver
    image: the version is a patch (k8s.update), which is what starts the operator's rolling upgrade ("If this field
    is configured and the `version` field is changed in driver spec, automatic driver upgrade progress is
    initiated", gpu-operator v1.5.1 docs/drivers/upgrading.md L16)."""
    head, report = driver_bump
    [impact] = report.impacts
    assert (impact.type, impact.action) == (DEVICE_CONFIG, Action.UPDATE)
    assert impact.updated == [("spec.driver.version", "k8s.update")] and impact.replaced_by == []
    assert manifest_of(only(head, DEVICE_CONFIG))["spec"]["driver"]["version"] == NEXT_DRIVER
    assert not report.containers_stopped and not any(i.runs_check for i in report.impacts)


def test_nothing_in_the_upgrade_waits_on_gpus_that_are_held(driver_bump):
    """No GPU workload, GPU gate Job or device plugin is touched (only the DeviceConfig, above), and the
    DeviceConfig's update does not wait for the rollout: pulumi-kubernetes awaits a kind it has no await logic for
    only through the annotation `pulumi.com/waitFor` (or PULUMI_K8S_AWAIT_ALL=true), else returns once the patch is
    accepted (provider/pkg/metadata/overrides.go ReadyCondition L112-116 @ 94977969). The operator then drains and
    upgrades one node at a time on its own, after `pulumi up` has returned."""
    head, report = driver_bump
    assert {i.type for i in report.impacts} == {DEVICE_CONFIG}
    annotations = manifest_of(only(head, DEVICE_CONFIG))["metadata"].get("annotations") or {}
    assert "pulumi.com/waitFor" not in annotations


# --- the driver upgrade: what the operator does on the cluster -------------------------------------------------------


def test_the_reboot_pod_goes_through_the_scheduler_and_tolerates_only_the_upgrade_taint():
    """getRebootPod (upgrademgr.go L1301-1354 @ v1.5.1) places the pod by `NodeSelector` kubernetes.io/hostname, not
    `NodeName`, so the scheduler decides (a pod with spec.nodeName would skip it, and the kubelet's own admission
    checks only NoExecute taints: kubernetes pkg/kubelet/lifecycle/predicate.go generalFilter @ 00991fb9; not the
    case here). Its one toleration is the operator's cordon taint. The scheduler's TaintToleration filter rejects a node whose NoSchedule
    or NoExecute taint the pod does not tolerate and only scores PreferNoSchedule (kubernetes
    pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go Filter with plugins/helper/taint.go
    DoNotScheduleTaintsFilterFunc @ 0f7becbc: "only interested in NoSchedule and NoExecute taints")."""
    reboot_pod = lines(OPERATOR, UPGRADEMGR, 1301, 1354)
    assert "func (h *upgradeMgrHelper) getRebootPod(" in reboot_pod
    assert 'nodeSelector["kubernetes.io/hostname"] = nodeName' in reboot_pod
    assert "NodeSelector:       nodeSelector," in reboot_pod and "NodeName" not in reboot_pod
    tolerations = reboot_pod[reboot_pod.index("Tolerations:") :]
    assert tolerations.count("Key:") == 1 and f'Key:      "{REBOOT_POD_TOLERATED_TAINT_KEY}"' in tolerations
    assert "Effect:   v1.TaintEffectNoSchedule" in tolerations
    assert SCHEDULER_FILTERED_TAINT_EFFECTS == ("NoSchedule", "NoExecute")


def test_an_unschedulable_reboot_pod_is_given_up_on_and_the_node_is_never_rebooted():
    """With the pod Pending the node stays Ready: the operator polls 300 x 2 s for NotReady or a new boot id
    (handleNodeReboot's waitForRebootPod L1190-1222), then deleteRebootPod finds the node Ready, deletes the pod and
    sets Upgrade-In-Progress (L1249-1275): the upgrade goes on without the reboot rebootRequired asked for, the
    reboot AMD recommends for the new driver to be fully loaded (docs/knownlimitations.md L72-74)."""
    wait = lines(OPERATOR, UPGRADEMGR, 1190, 1222)
    assert "for i := uint(0); i < 300; _, i = <-time.NewTicker(2*time.Second).C" in wait
    assert "nodeNotReady" in wait and "BootID" in wait
    delete = lines(OPERATOR, UPGRADEMGR, 1249, 1275)
    assert "if nodeReady {" in delete and "h.client.Delete(ctx, rebootPod)" in delete
    assert "amdv1alpha1.UpgradeStateInProgress" in delete
    assert "rebootRequired to true" in lines(OPERATOR, "docs/knownlimitations.md", 72, 74)


@pytest.mark.parametrize("effect", SCHEDULER_FILTERED_TAINT_EFFECTS)
def test_a_taint_that_keeps_the_reboot_pod_off_is_refused_with_reboots(effect):
    config = stack_file("prod")
    config[P + "kubernetes"]["gpuNodeTaints"][0]["effect"] = effect
    for workload in (*config[P + "training"], *config[P + "inference"]):  # tolerate any effect
        workload["kubernetes"]["tolerations"] = [{"key": "amd.com/gpu", "operator": "Exists"}]
    message = refused(lambda: synthesize("prod", config))
    assert (
        f"rocm-stack:kubernetes.gpuNodeTaints[0].effect: {effect} keeps the GPU Operator's driver-upgrade reboot pod"
        in message
    )
    assert "PreferNoSchedule" in message and f"{DRIVER}.upgradePolicy.rebootRequired false" in message
    # Without the reboot (the other supported combination) the taint is fine.
    driver_of(config)["upgradePolicy"]["rebootRequired"] = False
    synthesize("prod", config)


def test_prod_upgrades_one_node_at_a_time_with_a_reboot_the_reboot_pod_can_reach(prod_plan):
    """isUpgradePolicyViolated (upgrademgr.go L630-655): min(maxParallelUpgrades, maxUnavailableNodes - failed)
    nodes at once; a failed node (Drain-Failed, Upgrade-Timed-Out after 2 h, L694) uses up maxUnavailableNodes 1 and
    stops the rollout instead of spreading a bad driver."""
    policy = manifest_of(only(prod_plan, DEVICE_CONFIG))["spec"]["driver"]["upgradePolicy"]
    assert (policy["enable"], policy["maxParallelUpgrades"], policy["maxUnavailableNodes"]) == (True, 1, 1)
    assert policy["rebootRequired"] is True
    assert [t["effect"] for t in stack_file("prod")[P + "kubernetes"]["gpuNodeTaints"]] == ["PreferNoSchedule"]
    assert "maxParallelAllowed = min(maxParallelUpdates, remainingUnavailable)" in lines(OPERATOR, UPGRADEMGR, 630, 655)
    assert "time.Since(upgradeTime) > (2 * time.Hour)" in lines(OPERATOR, UPGRADEMGR, 694, 694)


def test_the_drain_evicts_so_vllms_budget_keeps_a_replica_serving(prod_plan):
    """deleteOrDrainPods (upgrademgr.go L777-821) drains with kubectl's drain.Helper: evictions (DisableEviction
    false) when `nodeDrainPolicy` is set, which the stack always sets; deletions, which skip PodDisruptionBudgets,
    only with `podDeletionPolicy` alone. The helper retries an eviction the API refuses for the budget (429) until
    the timeout (k8s.io/kubectl v0.36.2, the operator's go.mod, pkg/drain/drain.go evictPods). With one node at a
    time, two replicas spread one per node and minAvailable 1, the other node's replica serves throughout."""
    drain = lines(OPERATOR, UPGRADEMGR, 777, 821)
    assert "DisableEviction:     false," in drain
    assert re.search(
        r"if dc\.NodeDrainPolicy != nil \{.*\} else if dc\.PodDeletionPolicy != nil \{\s*h\.drainHelper\.DisableEviction = true",
        drain,
        re.S,
    )
    assert "k8s.io/kubectl v0.36.2" in OPERATOR.read("go.mod").decode()
    spec = manifest_of(only(prod_plan, DEVICE_CONFIG))["spec"]["driver"]["upgradePolicy"]
    assert spec["nodeDrainPolicy"]["timeoutSeconds"] == 3300 and spec["nodeDrainPolicy"]["gracePeriodSeconds"] == -1
    deployment = manifest_of(prod_plan.get(DEPLOYMENT, "llama"))["spec"]
    [spread] = deployment["template"]["spec"]["topologySpreadConstraints"]
    assert deployment["replicas"] == 2
    assert (spread["topologyKey"], spread["maxSkew"], spread["whenUnsatisfiable"]) == (
        "kubernetes.io/hostname",
        1,
        "DoNotSchedule",
    )
    assert manifest_of(prod_plan.get(PDB, "llama-pdb"))["spec"]["minAvailable"] == 1


def test_training_pods_get_their_grace_to_checkpoint_when_drained(prod_plan):
    """The drain evicts with gracePeriodSeconds -1, i.e. each pod's terminationGracePeriodSeconds (drain.go
    makeDeleteOptions: "set to a negative value to use the pod's terminationGracePeriodSeconds"); train.py
    checkpoints on SIGTERM and torchrun waits the grace less 10 s for it (TORCH_ELASTIC_SHUTDOWN_TIMEOUT)."""
    template = manifest_of(prod_plan.get(JOBSET, "llm-pretrain"))["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]
    pod = template["spec"]
    assert pod["terminationGracePeriodSeconds"] == 300
    [trainer] = pod["containers"]
    env = {e["name"]: e.get("value") for e in trainer["env"]}
    assert env[TORCHRUN_SHUTDOWN_ENV] == str(300 - TORCHRUN_EXIT_MARGIN_S)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("gracePeriodSeconds", 60, "nodeDrainPolicy.gracePeriodSeconds: 60s cuts the 300s training pods get"),
        ("timeoutSeconds", 300, "nodeDrainPolicy.timeoutSeconds: 300s does not outlast the 300s an evicted training"),
    ],
)
def test_a_drain_that_would_cut_the_checkpoint_is_refused(key, value, expected):
    config = stack_file("prod")
    driver_of(config)["upgradePolicy"]["nodeDrainPolicy"][key] = value
    assert expected in refused(lambda: synthesize("prod", config))


def test_an_evicted_training_pod_restarts_the_whole_jobset_without_using_a_restart(prod_plan):
    """An eviction gives the pod the condition DisruptionTarget ("the Pod is about to be deleted due to a
    disruption", kubernetes.io/docs/concepts/workloads/pods/disruptions/#pod-disruption-conditions). Its Job fails
    with reason PodFailurePolicy and the message "Pod %s/%s has condition %v matching %v rule at index %d"
    (kubernetes pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy); the JobSet's first rule matches that
    message as a regular expression (jobset v0.12.0 pkg/controllers/failure_policy.go ruleIsApplicable/anyMatchFound)
    and recreates every Job without counting towards maxRestarts (jobset_types.go RestartJobSetAndIgnoreMaxRestarts);
    BlockingRecreate, and train.py resumes from the checkpoint the evicted pods wrote."""
    spec = manifest_of(prod_plan.get(JOBSET, "llm-pretrain"))["spec"]
    pod_rules = spec["replicatedJobs"][0]["template"]["spec"]["podFailurePolicy"]["rules"]
    assert pod_rules[1] == {"action": "FailJob", "onPodConditions": [{"type": DISRUPTION_TARGET, "status": "True"}]}
    disruption, invalid = spec["failurePolicy"]["rules"]
    assert disruption["action"] == "RestartJobSetAndIgnoreMaxRestarts" and invalid["action"] == "FailJobSet"
    [pattern] = disruption["onJobFailureMessagePatterns"]
    evicted = (
        f"Pod ml/llm-pretrain-workers-0-1-x7k2p has condition {DISRUPTION_TARGET} matching FailJob rule at index 1"
    )
    bad_settings = "Container check-settings for pod ml/llm-pretrain-workers-0-0-a1b2c failed with exit code 2 matching FailJob rule at index 0"
    assert re.search(pattern, evicted) and not re.search(pattern, bad_settings)
    assert pattern == DISRUPTION_FAILURE_MESSAGE
    rules = JOBSET_REPO.read("pkg/controllers/failure_policy.go").decode()
    assert "regexp.MatchString(pattern, message)" in rules
    assert "anyMatchFound(ctx, rule.OnJobFailureMessagePatterns, jobFailureMessage)" in rules
    types = JOBSET_REPO.read("api/jobset/v1alpha2/jobset_types.go").decode()
    assert "// Same as RestartJobSet, but does not check `jobSet.spec.maxRestarts`." in types


# --- item 8: the driver image and the DCM ConfigMap ------------------------------------------------------------------


def test_a_driver_image_change_deletes_and_recreates_the_device_config(prod_plan):
    """AMD: "Updating the driver image repository is not supported. Please delete the existing DeviceConfig and
    create a new one with the updated image repository" (docs/drivers/installation.md L120 @ v1.5.1). The program
    declares it (replaceOnChanges), deletes first (the operator refuses two DeviceConfigs on the same nodes), and
    prod protects it: `pulumi up` stops with an error until it is unprotected (docs/kubernetes.md)."""
    assert "Updating the driver image repository is not supported" in lines(
        OPERATOR, "docs/drivers/installation.md", 120, 120
    )
    config = stack_file("prod")
    driver_of(config)["image"] = "registry.example.internal/amd/amdgpu-driver-v2"
    [impact] = report_of(prod_plan, synthesize("prod", config)).impacts
    assert impact.type == DEVICE_CONFIG and impact.action is Action.DELETE_REPLACE
    assert impact.replaced_by == [(DRIVER_IMAGE_PATH, "pulumi.replace-on-changes")]
    assert {"pulumi.delete-before-replace-option", "pulumi.protect"} <= set(impact.rules)
    assert impact.meaning.endswith("it is protected: `pulumi up` stops with an error instead")
    assert manifest_of(only(prod_plan, DEVICE_CONFIG))["kind"] == DEVICE_CONFIG_KIND


def dcm_stack(profiles: dict[str, Any]) -> dict[str, Any]:
    config = stack_file("prod")
    config[P + "kubernetes"]["partitionProfiles"] = profiles
    config[P + "kubernetes"]["gpuOperator"]["deviceConfig"]["configManager"] = {"enable": True}
    return config


def test_a_partition_profile_edit_patches_the_dcm_config_map_in_place():
    """DCM "monitors for any changes in the ConfigMap" (gpu-operator v1.5.1 docs/dcm/device-config-manager-configmap.md
    L3): the stack's provider runs with enableConfigMapMutable, so the edit is a patch of the fixed-name ConfigMap
    (rule k8s.configmap-mutable), not a delete and re-create under a running DCM; the DeviceConfig, which names the
    ConfigMap, is untouched."""
    spx = {"gpuModel": "MI300X", "computePartition": "SPX", "memoryPartition": "NPS1", "gpus": 8}
    cpx = {"gpuModel": "MI300X", "computePartition": "CPX", "memoryPartition": "NPS4", "gpus": 8}
    before = synthesize("prod", dcm_stack({"spx": spx}))
    after = synthesize("prod", dcm_stack({"spx": spx, "cpx-nps4": cpx}))
    [impact] = report_of(before, after).impacts
    assert (impact.type, impact.action) == (CONFIG_MAP, Action.UPDATE)
    assert impact.updated == [("data.config.json", "k8s.configmap-mutable")]
    provider = after.get("pulumi:providers:kubernetes", "k8s")  # the cluster's (the JobSet CRD has its own)
    assert provider["inputs"]["enableConfigMapMutable"] == "true"
    assert "DCM monitors for any changes in the ConfigMap" in lines(
        OPERATOR, "docs/dcm/device-config-manager-configmap.md", 3, 3
    )


def test_content_named_config_maps_stay_immutable_replacements(prod_plan):
    """The program ConfigMaps are named after their content and `immutable`: the provider still replaces them with
    enableConfigMapMutable on (diff.go L32 `|| clients.IsImmutable(obj)`), so running pods never see files change."""
    programs = [r for r in prod_plan.of_type(CONFIG_MAP) if r["name"].endswith("-program")]
    assert programs and all(manifest_of(r)["immutable"] is True for r in programs)


def test_turning_on_mutable_config_maps_updates_the_provider_and_replaces_nothing(prod_plan):
    """A stack deployed before the option: the first `pulumi up` updates the provider in place (rule
    k8s.provider-config: only kubeconfig, context or cluster replace it) and touches no object under it."""
    before = copy.deepcopy(prod_plan.to_json())
    for resource in before["resources"]:
        if resource["type"] == "pulumi:providers:kubernetes" and resource["name"] == "k8s":
            del resource["inputs"]["enableConfigMapMutable"]
    report = predict(SynthPlan.model_validate(before), SynthPlan.model_validate(prod_plan.to_json()))
    [impact] = report.impacts
    assert (impact.type, impact.action) == ("pulumi:providers:kubernetes", Action.UPDATE)
    assert impact.updated == [("enableConfigMapMutable", "k8s.provider-config")]
