"""Kueue as the stack configures it (issue 33 items 2, 5 and 6), against kubernetes-sigs/kueue v0.19.2:

- every resource a queued workload's pods request is covered by its ClusterQueue or left out of the quota by Kueue's
  configuration (an RDMA training is admitted), and config refuses what Kueue would never admit;
- the chart's webhooks fail closed only for the integrations the stack uses, only in the queued namespaces, served by
  two replicas in prod;
- serving is admitted inside the quota, the quotas fit the fleet, and waitForPodsReady outlasts the slowest start;
- what the next `pulumi up` does to a running cluster.

Upstream facts are stated with their source; where the kueue mirror is present (tests/upstream_go.py) the tests also
read them there (skipped where it is absent).
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml

from schema.queues import KUEUE_QUEUE_LABEL, PODS_READY_MARGIN_S
from tools.impact import predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import committed_plan, refusal, stack_file
from kueue_seams import kueue_configuration, requested, seam_problems
from test_multinode import BIG, DEPLOYMENT, LWS_TYPE as LWS, RELEASE
from test_queues import CLUSTER_QUEUE, JOBSET, KUEUE, LOCAL_QUEUE

P = "rocm-stack:"
ROOT = Path(__file__).parent.parent
RDMA = "rdma/hca_shared_devices_a"
NETWORK = {"rdma": {"resource": RDMA}, "networks": "rdma-net", "interface": "net1"}
# The program just before issue 33's Kueue change: the cluster a first `pulumi up` of this one meets.
BEFORE = "ba5facf"


def lines(path: str, first: int, last: int) -> str:
    return "\n".join(KUEUE.read(path).decode().splitlines()[first - 1 : last])


def kueue(config: dict[str, Any]) -> dict[str, Any]:
    return config[P + "kubernetes"]["queues"].setdefault("kueue", {})


def every_feature() -> dict[str, Any]:
    """Prod with what can be queued: its JobSets (RDMA for the pretraining), a one-node training (a Job), its vLLM
    Deployment and a multi-node vLLM (a LeaderWorkerSet group of 2 x 8 GPUs, RDMA) on 8 GPU nodes."""
    config = stack_file("prod")
    config[P + "gpuFleet"]["nodes"] = 8
    config[P + "training"][0]["kubernetes"]["network"] = copy.deepcopy(NETWORK)
    config[P + "training"].append(
        {"name": "probe", "steps": 10, "kubernetes": {"namespace": "ml", "gpusPerNode": 1, "queueName": "research"}}
    )
    big = copy.deepcopy(BIG)
    big["kubernetes"] |= {"replicas": 1, "queueName": "serving", "network": copy.deepcopy(NETWORK)}
    config[P + "inference"].append(big)
    return config


@pytest.fixture(scope="module")
def prod() -> Plan:
    return committed_plan("prod")


@pytest.fixture(scope="module")
def everything() -> Plan:
    return synthesize("prod", every_feature())


def manifest(plan: Plan, type_token: str, name: str) -> dict[str, Any]:
    return manifest_of(plan.get(type_token, name))


# --- item 2: what the queued pods request, the queue covers -------------------------------------------------------


def test_kueue_refuses_a_resource_no_resource_group_covers():
    """The facts the rest relies on: the flavor assigner gives up on a resource outside every resource group of the
    ClusterQueue, and BlockUndeclared (refuse such a workload) is the strategy unless a feature gate and the config
    say otherwise; excluded prefixes are dropped from the pods' requests before any of it."""
    assert 'return nil, NewStatus(fmt.Sprintf("resource %s unavailable in ClusterQueue", resName)), nil' in lines(
        "pkg/scheduler/flavorassigner/flavorassigner.go", 1069, 1072
    )
    assert "return configapi.QuotaCheckBlockUndeclared" in lines("cmd/kueue/main.go", 730, 736)
    assert "strings.HasPrefix(string(inputName), excludedPrefix)" in lines("pkg/workload/workload.go", 463, 477)
    assert "dropExcludedResources(specRequests, info.excludedResourcePrefixes)" in lines(
        "pkg/workload/workload.go", 677, 677
    )


def test_every_queued_workload_of_prod_and_of_an_every_feature_stack_is_admissible(prod, everything):
    """The seam (tests/kueue_seams.py), read as Kueue reads it: for each queued Job, JobSet, Deployment and
    LeaderWorkerSet, its integration is on, its namespace managed, its queues exist, and every resource its pods
    request is covered or excluded. Before issue 33 the RDMA JobSet requested rdma/hca_shared_devices_a, which no
    ClusterQueue covered: it stayed suspended for good while `pulumi up` succeeded."""
    assert list(seam_problems(prod)) == []
    assert list(seam_problems(everything)) == []
    pretrain = manifest(everything, JOBSET, "llm-pretrain")
    assert RDMA in requested(pretrain["spec"]["replicatedJobs"][0]["template"]["spec"]["template"])
    assert kueue_configuration(everything)["resources"] == {"excludeResourcePrefixes": [RDMA]}
    # Without the exclusion the same plan is one Kueue never admits: the check sees it.
    config = kueue_configuration(everything)
    del config["resources"]
    assert [p for p in seam_problems(everything, config) if RDMA in p] == [
        f"JobSet ml/llm-pretrain: its pods request {RDMA}, which ClusterQueue pretrain does not cover",
        f"LeaderWorkerSet ml/big-lws: its pods request {RDMA}, which ClusterQueue serving does not cover",
    ]


def test_the_rule_reads_the_one_definition_of_the_pods_requests(everything):
    """schema.workloads.pod_requests builds the GPU pods' requests (components/workloads/pods.py pod_resources) and
    is what the config checks and Kueue's exclusions read: the trainer's requests are exactly it."""
    config = every_feature()
    from schema.workloads import TrainingConfig

    training = TrainingConfig.model_validate(config[P + "training"][0])
    trainer = manifest(everything, JOBSET, "llm-pretrain")["spec"]["replicatedJobs"][0]["template"]["spec"]
    [container] = trainer["template"]["spec"]["containers"]
    assert container["resources"]["requests"] == training.pod_requests() == container["resources"]["limits"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            # The cluster's own Kueue: the stack cannot leave the RDMA resource out of its quota.
            lambda c: kueue(c).update(install=False),
            f"training[0].kubernetes.queueName: the pods request {RDMA}, which ClusterQueue 'pretrain' does not "
            "cover (cpu, memory, amd.com/gpu): Kueue admits no workload requesting a resource that no resource group "
            "covers; the stack leaves an RDMA resource out of Kueue's quota (resources.excludeResourcePrefixes) only "
            "in the Kueue it installs: set kubernetes.queues.kueue.install",
        ),
        (
            lambda c: c[P + "inference"][0]["kubernetes"].pop("queueName"),
            "inference[0].kubernetes.queueName: kubernetes.queues quotes the cluster's GPUs and Kueue counts only the "
            "workloads it admits",
        ),
        (
            lambda c: c[P + "kubernetes"]["queues"]["clusterQueues"]["serving"]["gpus"]["mi300x"].update(
                {"amd.com/gpu": 16}
            ),
            "kubernetes.queues.clusterQueues: the nominal quotas of amd.com/gpu (16 pretrain + 8 research + 16 serving "
            "= 40) exceed the 32 of gpuFleet",
        ),
    ],
)
def test_what_kueue_would_never_admit_is_refused_naming_the_key(change, message):
    config = stack_file("prod")
    config[P + "training"][0]["kubernetes"]["network"] = copy.deepcopy(NETWORK)
    change(config)
    assert message in refusal("prod", config)


# --- item 5: the webhooks: only the stack's integrations, only its namespaces, two replicas in prod --------------


def test_kueue_runs_only_the_integrations_the_stack_uses(prod, everything):
    """The chart enables 12 integrations by default, pod, deployment, statefulset and leaderworkerset among them
    (charts/kueue/values.yaml L165-184 @ v0.19.2), and makes the pod, Deployment and StatefulSet webhooks fail closed
    exactly when listed (templates/webhook/manifests.yaml L92-96, L315-319, L525-529). The stack lists the kinds it
    queues: prod's JobSets and vLLM Deployment (whose pods Kueue admits as pods: deployment_controller.go L40-48,
    ImplicitlyEnabledFrameworkNames ["pod"]); a one-node training adds batch/job, a multi-node vLLM leaderworkerset.
    So no StatefulSet webhook fails closed, whatever namespace."""
    values = lines("charts/kueue/values.yaml", 165, 184)
    assert all(f'- "{name}"' in values for name in ("pod", "deployment", "statefulset"))
    webhooks = KUEUE.read("charts/kueue/templates/webhook/manifests.yaml").decode().splitlines()
    for first, name in ((92, "deployment"), (315, "pod"), (525, "statefulset")):
        assert webhooks[first - 1 : first + 3] == [
            f'    {{{{- if has "{name}" $integrationsConfig.frameworks }}}}',
            "    failurePolicy: Fail",
            "    {{- else }}",
            "    failurePolicy: Ignore",
        ]
    assert kueue_configuration(prod)["integrations"] == {"frameworks": ["jobset.x-k8s.io/jobset", "deployment", "pod"]}
    assert kueue_configuration(everything)["integrations"]["frameworks"] == [
        "batch/job",
        "jobset.x-k8s.io/jobset",
        "deployment",
        "pod",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    ]


def test_every_kueue_webhook_serves_the_queued_namespaces_only(prod):
    """Every webhook of the chart that has a namespaceSelector takes the config's managedJobsNamespaceSelector when it
    is set (templates/webhook/manifests.yaml, e.g. L42-52, L320-330: 36 of 36), and Kueue's own default otherwise is
    every namespace but kube-system and its own (apis/config/v1beta2/defaults.go L124-132). The stack names the
    ClusterQueues' namespaces: a Kueue outage blocks no pod elsewhere (the GPU Operator's, kube-system's, ...)."""
    template = KUEUE.read("charts/kueue/templates/webhook/manifests.yaml").decode()
    selectors = template.count("    namespaceSelector:\n")
    assert selectors == 36 == template.count('{{- if (hasKey $managerConfig "managedJobsNamespaceSelector") }}')
    assert 'Values:   []string{"kube-system", *cfg.Namespace}' in lines("apis/config/v1beta2/defaults.go", 124, 132)
    assert kueue_configuration(prod)["managedJobsNamespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml"]}]
    }


def test_prod_runs_two_kueue_replicas_one_leading_both_serving_the_webhooks(prod):
    """The chart runs one replica with no PodDisruptionBudget (values.yaml L78-79, L110-114; manager-pdb.yaml renders
    only when enabled, L17). In prod the stack asks for two, spread over nodes, with the chart's PDB (minAvailable
    1) and leader election (one reconciles, lease "c1f6bfd2.kueue.x-k8s.io", defaults.go L40). A replica is Ready
    once its webhook server is (cmd/kueue/main.go L642-649), leader or not, so both answer the webhooks. The chart
    takes the Configuration as one string that replaces its own: the ports it leaves to Kueue's defaults are the
    ones the chart's Deployment probes and exposes (defaults.go L36-39; manager.yaml)."""
    assert lines("charts/kueue/values.yaml", 78, 79).splitlines()[-1].strip() == "replicas: 1"
    assert "enabled: false" in lines("charts/kueue/values.yaml", 110, 114)
    assert "{{- if .Values.controllerManager.podDisruptionBudget.enabled }}" in lines(
        "charts/kueue/templates/manager/manager-pdb.yaml", 17, 17
    )
    assert "return mgr.GetWebhookServer().StartedChecker()(req)" in lines("cmd/kueue/main.go", 642, 649)
    defaults = lines("apis/config/v1beta2/defaults.go", 36, 40)
    manager = KUEUE.read("charts/kueue/templates/manager/manager.yaml").decode()
    for port in ("9443", "8081", "8443"):
        assert port in defaults and port in manager
    values = prod.get(RELEASE, "kueue")["inputs"]["values"]["controllerManager"]
    assert (values["replicas"], values["podDisruptionBudget"]) == (2, {"enabled": True, "minAvailable": 1})
    assert values["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert kueue_configuration(prod)["leaderElection"] == {"leaderElect": True}
    dev = stack_file("prod")
    kueue(dev)["replicas"] = 1
    single = synthesize("prod", dev).get(RELEASE, "kueue")["inputs"]["values"]["controllerManager"]
    assert single["replicas"] == 1 and "podDisruptionBudget" not in single


# --- item 6: serving inside the quota, quotas that fit the fleet, waitForPodsReady --------------------------------


def test_serving_is_admitted_inside_the_fleets_quota_and_preempts_training_through_kueue(prod):
    """The model: every GPU pod is queued, so the quota counts the serving GPUs. Prod's 32 GPUs (gpuFleet 4 x 8) are
    all quoted: pretrain 16 + research 8 + serving 8 (vLLM's two replicas of 4). A burst to 4 replicas borrows 8 from
    the cohort; when training holds them, borrowWithinCohort LowerPriority lets Kueue preempt lower-priority
    workloads of the other queues "when a Workload may fit while both borrowing and preempting"
    (apis/kueue/v1beta2/clusterqueue_types.go L508-509, L539-594): training JobSets are suspended (they checkpoint),
    not single pods evicted by the scheduler behind Kueue's back."""
    assert "borrowWithinCohort" in lines("apis/kueue/v1beta2/clusterqueue_types.go", 539, 544)
    queues = {r["name"].removeprefix("cluster-queue-"): manifest_of(r)["spec"] for r in prod.of_type(CLUSTER_QUEUE)}
    nominal = {
        name: int(r["nominalQuota"])
        for name, spec in queues.items()
        for group in spec["resourceGroups"]
        for flavor in group["flavors"]
        for r in flavor["resources"]
        if r["name"] == "amd.com/gpu"
    }
    assert nominal == {"pretrain": 16, "research": 8, "serving": 8}
    fleet = stack_file("prod")[P + "gpuFleet"]
    assert sum(nominal.values()) == fleet["nodes"] * fleet["gpusPerNode"] == 32
    assert all(spec["preemption"]["borrowWithinCohort"] == {"policy": "LowerPriority"} for spec in queues.values())
    llama = manifest(prod, DEPLOYMENT, "llama")
    assert llama["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "serving"
    autoscaling = stack_file("prod")[P + "inference"][0]["kubernetes"]["autoscaling"]
    assert autoscaling["minReplicas"] * 4 == 8 and autoscaling["maxReplicas"] * 4 == 8 + 8  # nominal + borrowing


def test_wait_for_pods_ready_outlasts_the_slowest_start_of_a_queued_workload(prod):
    """Since v0.19 waitForPodsReady is on by default with a 30-minute timeout (defaults.go L48, L99-117; the
    DisableWaitForPodsReady gate "while WaitForPodsReady is enabled by default", kube_features.go L49-52): an admitted
    workload whose pods are not all Ready within it is evicted and requeued, releasing its quota
    (configuration_types.go L302-329). 30 minutes would evict a prod vLLM replica still in its GPU check (900 s) and
    model load (1800 s); the stack sets the slowest start of its queued workloads plus 600 s for scheduling, the image
    pull and the claim: 3300 s."""
    assert "DefaultWaitForPodsReadyTimeout                = 30 * time.Minute" in lines(
        "apis/config/v1beta2/defaults.go", 48, 48
    )
    assert "cfg.WaitForPodsReady = cmp.Or(" in lines("apis/config/v1beta2/defaults.go", 99, 102)
    assert "Temporary option while WaitForPodsReady is enabled by default." in lines(
        "pkg/features/kube_features.go", 49, 52
    )
    config = stack_file("prod")
    start = config[P + "checks"]["timeoutSeconds"] if P + "checks" in config else 900
    assert start + 1800 + PODS_READY_MARGIN_S == 3300 > 30 * 60
    assert kueue_configuration(prod)["waitForPodsReady"] == {"timeout": "3300s", "blockAdmission": False}


def test_a_queued_multi_node_server_is_replaced_when_kueue_fixes_its_shape(everything):
    """Kueue admits a LeaderWorkerSet group whole; its webhook refuses, once a replica is ready, a new queue-name and
    (for a queued one) any change of the pods' shape or group size (leaderworkerset_webhook.go L185-191, L213-232 @
    v0.19.2; pkg/util/pod/pod.go L147-178). Those paths are replacements of the LeaderWorkerSet, the old one deleted
    first; an image change still rolls in place."""
    shape = lines("pkg/util/pod/pod.go", 147, 180)
    assert "func SpecShape(podSpec *corev1.PodSpec)" in shape
    # Its fields; `priority` is set on pods by admission, never in a template, and pod-level `resources` count only
    # where a template sets them (the stack sets neither).
    fields = set(re.findall(r'^\s+"(\w+)":\s+(?:ContainersShape\()?podSpec\.', shape, re.M)) - {"priority"}
    assert '"resources": map[string]any{\n\t\t\t\t"requests": c.Resources.Requests' in shape
    assert '"ports": c.Ports' in shape
    big = everything.get(LWS, "big")
    assert manifest_of(big)["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "serving"
    assert big["delete_before_replace"] is True
    expected = {f'metadata.labels["{KUEUE_QUEUE_LABEL}"]', "spec.leaderWorkerTemplate.size"} | {
        f"spec.leaderWorkerTemplate.{template}.spec.{path}"
        for template in ("leaderTemplate", "workerTemplate")
        for field in fields
        for path in ([f"{field}[*].resources", f"{field}[*].ports"] if field.endswith("ontainers") else [field])
    }
    assert len(fields) == 9 and set(big["replace_on_changes"]) >= expected
    assert not any("image" in path for path in big["replace_on_changes"])


# --- day 2 -------------------------------------------------------------------------------------------------------


def _plan_at(commit: str, stack: str) -> SynthPlan:
    """The plan the program at `commit` synthesizes for `stack` (its own stack file), through its own CLI."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True)
    if archive.returncode:
        pytest.skip(f"needs the git history with {commit} (a full clone)")
    with tempfile.TemporaryDirectory() as tmp:
        tarfile.open(fileobj=BytesIO(archive.stdout)).extractall(tmp, filter="data")
        run = "import sys; from tools.cli import main; sys.argv[1:] = sys.argv[2:]; main()"
        out = Path(tmp) / "out"
        subprocess.run(
            [sys.executable, "-c", run, "-", "synth", "--stack", stack, "--out", str(out)],
            cwd=tmp,
            check=True,
            capture_output=True,
        )
        return SynthPlan.model_validate_json((out / "plan.json").read_text())


def test_day2_the_first_up_after_this_change_on_a_running_prod(prod):
    """From the program before this change (commit ba5facf, prod's stack file then) to this one, on what it touches
    (Kueue and its queues, the GPU workloads; later changes of other objects have their own scenarios): Kueue's release is
    upgraded in place (new values: Helm upgrade; the manager's pods roll on the config's checksum annotation,
    templates/manager/manager.yaml L38), its ClusterQueues patched in place (preemption and quotas are mutable: no
    CEL rule on them in the v0.19.2 CRD), the serving queue created. The vLLM Deployment gets its queue label by a
    replacement: Kueue's webhook refuses adding queue-name to a Deployment with ready replicas
    (deployment_webhook.go L151-154: old "" and new "serving" with ReadyReplicas > 0), so serving is down while the
    new replicas load the model: plan it in a window. Nothing else of Kueue's changes the JobSets: they are replaced
    only by the training program shipped since (its digest in their pod template, by design), never by a queue."""
    assert "charts.kueue.x-k8s.io/config-checksum" in lines("charts/kueue/templates/manager/manager.yaml", 38, 38)
    before = _plan_at(BEFORE, "prod")
    touched = (RELEASE, CLUSTER_QUEUE, LOCAL_QUEUE, JOBSET, DEPLOYMENT)
    found = [i for i in predict(before, SynthPlan.model_validate(prod.to_json())).impacts if i.type in touched]
    found = [i for i in found if (i.type, i.name) != (RELEASE, "keda")]  # KEDA's own values: test_tenant_isolation
    # ... and by their GPU containers' capabilities since SYS_NICE needs numaBinding (test_tenant_isolation).
    program = (
        "annotations.rocm-stack/program-sha256",
        "volumes[0].configMap.name",
        "containers[0].securityContext.capabilities",
    )
    for jobset in [i for i in found if i.type == JOBSET]:
        assert jobset.replaced_by and all(path.endswith(program) for path, _ in jobset.replaced_by), jobset
    impacts = {(i.type, i.name): i.action for i in found if i.type != JOBSET}
    assert impacts == {
        (RELEASE, "kueue"): Action.UPDATE,
        (CLUSTER_QUEUE, "cluster-queue-pretrain"): Action.UPDATE,
        (CLUSTER_QUEUE, "cluster-queue-research"): Action.UPDATE,
        (CLUSTER_QUEUE, "cluster-queue-serving"): Action.CREATE,
        (LOCAL_QUEUE, "local-queue-ml.serving"): Action.CREATE,
        (DEPLOYMENT, "llama"): Action.DELETE_REPLACE,
    }


def test_day2_kueue_settings_update_the_release_alone(prod):
    """More replicas, or the first queued RDMA training (a new excluded prefix), are new values of the same release:
    an in-place Helm upgrade; the training whose pods change is replaced as any JobSet spec change is."""
    config = stack_file("prod")
    kueue(config)["replicas"] = 3
    impacts = {(i.type, i.name): i.action for i in _report(prod, config)}
    assert impacts == {(RELEASE, "kueue"): Action.UPDATE}
    config = stack_file("prod")
    config[P + "training"][0]["kubernetes"]["network"] = copy.deepcopy(NETWORK)
    impacts = {(i.type, i.name): i.action for i in _report(prod, config)}
    assert impacts[(RELEASE, "kueue")] == Action.UPDATE
    assert impacts[(JOBSET, "llm-pretrain")] == Action.DELETE_REPLACE
    assert not [key for key in impacts if key[0] in (CLUSTER_QUEUE, LOCAL_QUEUE, DEPLOYMENT)]


def _report(base: Plan, config: dict[str, Any]) -> list[Any]:
    head = synthesize("prod", config)
    return predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json())).impacts


def test_the_manager_config_is_yaml_kueue_reads(prod):
    """The string is one YAML document of kind Configuration (config.kueue.x-k8s.io/v1beta2), the form the chart's
    template parses with fromYaml (templates/manager/manager-config.yaml L26)."""
    raw = prod.get(RELEASE, "kueue")["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"]
    [document] = list(yaml.safe_load_all(raw))
    assert (document["apiVersion"], document["kind"]) == ("config.kueue.x-k8s.io/v1beta2", "Configuration")
    assert "$config := .Values.managerConfig.controllerManagerConfigYaml | fromYaml" in lines(
        "charts/kueue/templates/manager/manager-config.yaml", 26, 26
    )
