"""GPU queues and quotas (`kubernetes.queues`, Kueue v0.19.2): what the committed prod stack declares, validated
against the vendored Kueue CRDs (tests/data/kubernetes, tag v0.19.2), config refusals, and what a second
`pulumi up` does when a quota changes or a queue is renamed (the change-impact preview)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from components.workloads import training
from schema.queues import CPU_FLAVOR, KUEUE_API_VERSION, SERVING_PRIORITY_CLASS, TRAINING_PRIORITY_CLASS
from tools.impact import ImpactReport, predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from conftest import committed_plan, refusal, stack_file
from k8s_validation import stack_crds, validate_all
from upstream_go import Upstream

P = "rocm-stack:"
DATA = __import__("pathlib").Path(__file__).parent / "data" / "kubernetes"
KUEUE = Upstream("kubernetes-sigs/kueue", "8eab68778fc1b52affe165fdf5af29d1e9b4f3cb")  # tag v0.19.2
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
CLUSTER_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"
LOCAL_QUEUE = "kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"
FLAVOR = "kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"
PRIORITY_CLASS = "kubernetes:scheduling.k8s.io/v1:PriorityClass"


@pytest.fixture(scope="module")
def prod() -> Plan:
    return committed_plan("prod")


def objects(plan: Plan, type_token: str) -> dict[str, dict[str, Any]]:
    return {manifest_of(r)["metadata"]["name"]: manifest_of(r) for r in plan.of_type(type_token)}


def queues(config: dict[str, Any]) -> dict[str, Any]:
    return config[P + "kubernetes"]["queues"]


def report(base: Plan, config: dict[str, Any]) -> ImpactReport:
    head = synthesize("prod", config)
    return predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json()))


def test_every_kueue_object_of_prod_validates_against_the_vendored_crds(prod):
    """ResourceFlavor, ClusterQueue, LocalQueue of kueue.x-k8s.io/v1beta2 (the storage version at v0.19.2; v1beta1
    is "deprecated. Use v1beta2 instead.") against the CRDs made strict (unknown fields fail: the API server would
    prune them); the PriorityClasses against the built-in scheduling.k8s.io/v1 schema."""
    kueue = [manifest_of(r) for r in prod.kubernetes_objects() if manifest_of(r)["apiVersion"] == KUEUE_API_VERSION]
    assert {o["kind"] for o in kueue} == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    classes = list(objects(prod, PRIORITY_CLASS).values())
    assert validate_all([*kueue, *classes], stack_crds()) == len(kueue) + 2


def test_the_cluster_queues_satisfy_the_crds_own_rules(prod):
    """CEL rules the strict JSON schema cannot run, read from the vendored CRD and checked here: each flavor of a
    resource group quotes as many resources as the group covers; no borrowingLimit without a cohort."""
    crd = yaml.safe_load((DATA / "kueue.x-k8s.io_clusterqueues.yaml").read_text())
    [v1beta2] = [v for v in crd["spec"]["versions"] if v["name"] == "v1beta2"]
    spec_schema = v1beta2["schema"]["openAPIV3Schema"]["properties"]["spec"]
    group_rules = [r["rule"] for r in spec_schema["properties"]["resourceGroups"]["items"]["x-kubernetes-validations"]]
    assert "self.flavors.all(x, size(x.resources) == size(self.coveredResources))" in group_rules
    assert any(
        "borrowingLimit must be nil when cohort is empty" == r["message"]
        for r in spec_schema["x-kubernetes-validations"]
    )
    for queue in objects(prod, CLUSTER_QUEUE).values():
        spec = queue["spec"]
        covered = [r for group in spec["resourceGroups"] for r in group["coveredResources"]]
        assert len(covered) == len(set(covered))  # a resource belongs to one group
        for group in spec["resourceGroups"]:
            assert all(len(f["resources"]) == len(group["coveredResources"]) for f in group["flavors"])
        if "cohortName" not in spec:
            assert all(
                "borrowingLimit" not in r for g in spec["resourceGroups"] for f in g["flavors"] for r in f["resources"]
            )


def test_flavors_match_gpu_families_by_the_labellers_device_id_and_cpu_memory_fit_any_node(prod):
    """The node labeller labels each GPU node `amd.com/gpu.device-id` (domain/gpus.py pci_device_id: 74a1 on
    MI300X); Kueue puts an admitted pod set's flavor nodeLabels into its nodeSelector. CPU and memory are quoted on
    a flavor without labels, so a pod asking for no GPU (the elastic run's rendezvous store) may run anywhere."""
    flavors = objects(prod, FLAVOR)
    assert flavors["mi300x"]["spec"] == {"nodeLabels": {"amd.com/gpu.device-id": "74a1"}}
    assert flavors[CPU_FLAVOR]["spec"] == {}
    research = objects(prod, CLUSTER_QUEUE)["research"]["spec"]
    assert research["cohortName"] == "gpus"
    assert research["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml"]}]
    }
    cpu_group, gpu_group = research["resourceGroups"]
    assert cpu_group["coveredResources"] == ["cpu", "memory"] and cpu_group["flavors"][0]["name"] == CPU_FLAVOR
    assert gpu_group == {
        "coveredResources": ["amd.com/gpu"],
        "flavors": [
            {"name": "mi300x", "resources": [{"name": "amd.com/gpu", "nominalQuota": "8", "borrowingLimit": "8"}]}
        ],
    }
    assert objects(prod, LOCAL_QUEUE)["research"]["spec"] == {"clusterQueue": "research"}


def test_trainings_are_queued_whole_with_the_training_priority_and_vllm_outranks_them(prod):
    """Kueue admits a JobSet labelled with its LocalQueue as one Workload (https://kueue.sigs.k8s.io/docs/tasks/run/
    jobsets/); its priority is the pods' PriorityClass (jobframework/reconciler.go L1716-1723 @ v0.19.2). The jobs
    wait for Kueue's release: created before its webhook, a JobSet would start unsuspended, outside the queue."""
    classes = objects(prod, PRIORITY_CLASS)
    assert (classes[TRAINING_PRIORITY_CLASS]["value"], classes[TRAINING_PRIORITY_CLASS]["preemptionPolicy"]) == (
        1000,
        "Never",
    )
    assert classes[SERVING_PRIORITY_CLASS]["value"] > classes[TRAINING_PRIORITY_CLASS]["value"]
    release = prod.get("kubernetes:helm.sh/v3:Release", "kueue")
    for name, queue in (("llm-pretrain", "pretrain"), ("llm-finetune", "research")):
        jobset = manifest_of(prod.get(JOBSET, name))
        assert jobset["metadata"]["labels"][training.KUEUE_QUEUE_LABEL] == queue
        for replicated in jobset["spec"]["replicatedJobs"]:
            assert replicated["template"]["spec"]["template"]["spec"]["priorityClassName"] == TRAINING_PRIORITY_CLASS
        assert release["urn"] in prod.get(JOBSET, name)["depends_on"]
    deployment = manifest_of(prod.get("kubernetes:apps/v1:Deployment", "llama"))
    assert deployment["spec"]["template"]["spec"]["priorityClassName"] == SERVING_PRIORITY_CLASS


def test_kueue_is_a_pinned_release_whose_chart_upgrades_its_crds(prod):
    """charts/kueue/README.md L31 @ v0.19.2: `helm install kueue oci://registry.k8s.io/kueue/charts/kueue
    --version="0.19.2" --create-namespace --namespace=kueue-system`. The chart renders its CRDs from templates/crd/
    (not crds/, which Helm never upgrades), so each chart upgrade applies them; the image is pinned as the release
    packaging does (hack/helm-chart-package.sh L75: registry.k8s.io/kueue/kueue:<tag>, IfNotPresent)."""
    inputs = prod.get("kubernetes:helm.sh/v3:Release", "kueue")["inputs"]
    assert {k: inputs[k] for k in ("name", "chart", "version", "namespace", "createNamespace")} == {
        "name": "kueue",
        "chart": "oci://registry.k8s.io/kueue/charts/kueue",
        "version": "0.19.2",
        "namespace": "kueue-system",
        "createNamespace": True,
    }
    assert inputs["values"]["controllerManager"]["manager"]["image"] == {
        "repository": "registry.k8s.io/kueue/kueue",
        "tag": "v0.19.2",
        "pullPolicy": "IfNotPresent",
    }
    assert "skipCrds" not in inputs
    chart_files = KUEUE.read("charts/kueue/README.md").decode()
    assert 'helm install kueue oci://registry.k8s.io/kueue/charts/kueue --version="0.19.2"' in chart_files
    assert b"kind: CustomResourceDefinition" in KUEUE.read(
        "charts/kueue/templates/crd/kueue.x-k8s.io_clusterqueues.yaml"
    )


def test_kueue_resizes_no_jobset_so_an_elastic_run_is_admitted_at_its_maximum(prod):
    """Elastic workloads (workload slices) at v0.19.2: "Currently available only for the following workloads:
    batch/v1.Job, ray.io/v1.RayJob, ray.io/v1.RayCluster" (site/content/en/docs/concepts/elastic_workload.md). So
    Kueue admits the elastic JobSet as one Workload of all its pods: maxNodes x gpusPerNode GPUs are held while it
    trains on fewer after a loss; Kueue neither shrinks its quota nor grows it."""
    doc = KUEUE.read("site/content/en/docs/concepts/elastic_workload.md").decode()
    limited = doc.split("Currently available only for the following workloads:")[1].split("* Elastic workloads")[0]
    assert "`batch/v1.Job`" in limited and "jobset" not in limited.lower()
    workers = {j["name"]: j for j in manifest_of(prod.get(JOBSET, "llm-finetune"))["spec"]["replicatedJobs"]}
    assert workers[training.WORKERS]["template"]["spec"]["parallelism"] == 2  # maxNodes: the pods Kueue counts


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: queues(c)["clusterQueues"]["research"]["gpus"].update(mi250={"amd.com/gpu": 8}),
            "clusterQueues.research.gpus.mi250: no such flavor",
        ),
        (lambda c: queues(c)["localQueues"][1].update(namespace="default"), "serves ml, not 'default'"),
        (
            lambda c: c[P + "training"][1]["kubernetes"].update(queueName="urgent"),
            "no LocalQueue 'urgent' in namespace 'ml'",
        ),
        (
            lambda c: queues(c)["clusterQueues"]["research"].pop("cohort"),
            "a borrowingLimit needs a cohort to borrow from",
        ),
        (
            lambda c: [q.update(gpus={"mi300x": {"amd.com/gpu": 4}}) for q in queues(c)["clusterQueues"].values()],
            "16 amd.com/gpu admitted at once, but ClusterQueue 'pretrain' and its cohort quote 12",
        ),
        (
            lambda c: queues(c)["flavors"]["mi300x"].update(partitionProfile="cpx"),
            "no partition profile 'cpx' in kubernetes.partitionProfiles",
        ),
    ],
)
def test_bad_queue_settings_are_refused_naming_the_key(change, message):
    config = stack_file("prod")
    change(config)
    assert message in refusal("prod", config)


def test_day2_a_quota_change_updates_the_cluster_queue_in_place_and_nothing_else(prod):
    """A ClusterQueue's quotas are mutable (no CEL immutability on resourceGroups in the v0.19.2 CRD, unlike
    ResourceFlavor fields with a topology): the provider patches it; running jobs are untouched (Kueue preempts
    only if the new quota no longer fits what it admitted, and then through suspension: they checkpoint)."""
    config = stack_file("prod")
    queues(config)["clusterQueues"]["pretrain"]["gpus"]["mi300x"]["amd.com/gpu"] = 12
    impacts = {(i.type, i.name): i for i in report(prod, config).impacts}
    assert set(impacts) == {(CLUSTER_QUEUE, "cluster-queue-pretrain")}
    assert impacts[(CLUSTER_QUEUE, "cluster-queue-pretrain")].action == Action.UPDATE


def test_day2_renaming_a_queue_replaces_the_local_queue_and_the_jobs_that_name_it(prod):
    """A LocalQueue is named by its key: a new name is a new object, the old one deleted. Kueue's webhook refuses
    a new queue-name on a job that is not suspended (jobframework/validation.go L180-183 @ v0.19.2), so the stack
    declares that label a replacement (replaceOnChanges): the JobSet is deleted (its pods checkpoint on SIGTERM)
    and created again in the new queue, resuming from its PVC."""
    assert b"ValidateImmutableField(QueueName(newJob), QueueName(oldJob), queueNameLabelPath)" in KUEUE.read(
        "pkg/controller/jobframework/validation.go"
    )
    config = stack_file("prod")
    queues(config)["localQueues"][1]["name"] = "finetune"
    config[P + "training"][1]["kubernetes"]["queueName"] = "finetune"
    impacts = {(i.type, i.name): i.action for i in report(prod, config).impacts}
    assert impacts == {
        (LOCAL_QUEUE, "local-queue-ml.research"): Action.DELETE,
        (LOCAL_QUEUE, "local-queue-ml.finetune"): Action.CREATE,
        (JOBSET, "llm-finetune"): Action.DELETE_REPLACE,
    }
