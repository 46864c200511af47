"""Where the stack's Kubernetes features meet (issue 33): one stack that turns every feature on at once
(tests/data/seams/all-features.yaml: multi-node inference behind the router and autoscaled, multi-node RDMA and
elastic training in Kueue queues, GPU partitions, monitoring), synthesized as dev and as prod through the real
program, and checks over its plan of what no single feature's tests see.

To add a seam check: a test taking `plan` (it runs once per environment) that reads the declared objects
(`objects(plan)`: each Kubernetes object as the API server receives it, with its plan resource) and states the
upstream fact it relies on with its source. A feature the stack gains goes into the data file, and into
`test_the_stack_turns_every_kubernetes_feature_on`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from components.k8s.replacement import provider_replaces, rows
from schema.mirror import MirrorConfig
from tools.synth import Plan, autoname, autonamed, manifest_of
from conftest import all_features, all_features_plan
from k8s_mirror import outside_mirror
from kueue_seams import kueue_configuration, seam_problems
from k8s_namespaces import namespace_problems

P = "rocm-stack:"
ENVIRONMENTS = ("dev", "prod")


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def plan(request: pytest.FixtureRequest) -> Plan:
    """The all-features stack synthesized as dev, then as prod (each test taking it runs for both)."""
    return all_features_plan(request.param)


@dataclass(frozen=True)
class Declared:
    """One Kubernetes object the plan declares: the manifest the API server receives, and its plan resource."""

    manifest: dict[str, Any]
    resource: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def group(self) -> str:
        return str(self.manifest["apiVersion"]).rpartition("/")[0]

    @property
    def name(self) -> str:
        """metadata.name; for an object declared without one, the provider's `<resource name>-<8 hex>` (autoname)."""
        metadata = self.manifest.get("metadata") or {}
        if autonamed(self.resource["type"], self.resource["inputs"]):
            return autoname(self.resource["name"])
        return str(metadata["name"])

    @property
    def namespace(self) -> str | None:
        return (self.manifest.get("metadata") or {}).get("namespace")


def objects(plan: Plan) -> list[Declared]:
    """Every Kubernetes object the plan declares (not Helm releases, CRD files or providers)."""
    return [Declared(manifest_of(r), r) for r in plan.kubernetes_objects()]


def of_kind(plan: Plan, kind: str) -> list[Declared]:
    return [o for o in objects(plan) if o.kind == kind]


def pod_specs(declared: Declared) -> Iterator[dict[str, Any]]:
    """The pod specs of a workload object (Deployment, Job, JobSet, LeaderWorkerSet)."""
    spec = declared.manifest.get("spec") or {}
    if declared.kind in ("Deployment", "Job"):
        yield spec["template"]["spec"]
    elif declared.kind == "JobSet":
        for job in spec["replicatedJobs"]:
            yield job["template"]["spec"]["template"]["spec"]
    elif declared.kind == "LeaderWorkerSet":
        template = spec["leaderWorkerTemplate"]
        yield template["leaderTemplate"]["spec"]
        yield template["workerTemplate"]["spec"]


def requested(declared: Declared) -> set[str]:
    """The resource names any container of the object's pods requests or limits."""
    return {
        resource
        for spec in pod_specs(declared)
        for container in [*spec.get("initContainers", []), *spec["containers"]]
        for field in ("requests", "limits")
        for resource in (container.get("resources") or {}).get(field, {})
    }


# --- the stack itself ---------------------------------------------------------------------------------------------


def test_the_stack_turns_every_kubernetes_feature_on(plan: Plan):
    """What makes it the all-features stack: a check below that passes only because a feature is missing proves
    nothing, so each feature is asserted present in both environments."""
    by_name = {(o.kind, o.name): o for o in objects(plan)}
    releases = {r["name"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")}
    assert {"amd-gpu-operator", "jobset", "lws", "keda", "kueue", "monitoring-kube-prometheus-stack"} <= releases
    # Multi-node inference (a LeaderWorkerSet) behind the router, autoscaled by KEDA; a one-node one beside it.
    big = by_name[("LeaderWorkerSet", "big-lws")]
    assert big.manifest["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert ("Deployment", "big-router") in by_name and ("Deployment", "small") in by_name
    (scaler,) = of_kind(plan, "ScaledObject")
    assert scaler.manifest["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    # Training in queues: multi-node over RDMA, elastic, and one on GPU partitions.
    queued = {o.name for o in objects(plan) if "kueue.x-k8s.io/queue-name" in o.manifest["metadata"].get("labels", {})}
    assert queued == {"pretrain", "finetune", "shard", "big-lws", "small"}
    assert "rdma/hca_shared_devices_a" in requested(by_name[("JobSet", "pretrain")])
    commands = [c["command"] for spec in pod_specs(by_name[("JobSet", "finetune")]) for c in spec["containers"]]
    assert any(command[:3] == ["torchrun", "--nnodes", "1:2"] for command in commands)
    assert "amd.com/cpx_nps4" in requested(by_name[("Job", "shard")])
    assert len(of_kind(plan, "ClusterQueue")) == 4 and len(of_kind(plan, "LocalQueue")) == 4
    # Partitions: DCM on, fed the stack's profiles.
    (device_config,) = of_kind(plan, "DeviceConfig")
    assert device_config.manifest["spec"]["configManager"]["enable"] is True
    # Monitoring: the vLLM and router ServiceMonitors, the alert rules, the kube-prometheus-stack release above.
    assert {"ServiceMonitor", "PrometheusRule"} <= {o.kind for o in objects(plan)}
    # The mirror: every chart from its OCI repository.
    charts = {r["inputs"]["chart"] for r in plan.of_type("kubernetes:helm.sh/v3:Release")}
    assert all(chart.startswith(_mirror(plan).charts + "/") for chart in charts)


# --- namespaces ---------------------------------------------------------------------------------------------------


def test_every_release_and_namespaced_object_goes_into_a_namespace_that_exists_before_it(plan: Plan):
    """The namespace seam (tests/k8s_namespaces.py: a Namespace it waits for, a built-in one, a release's own with
    createNamespace, or a read of an existing one)."""
    assert namespace_problems(plan) == []


# --- the mirror -----------------------------------------------------------------------------------------------------


def _mirror(plan: Plan) -> MirrorConfig:
    return MirrorConfig.model_validate(all_features(plan.outputs["environment"])[P + "mirror"])


def test_with_the_mirror_no_image_chart_or_file_is_referenced_outside_it(plan: Plan):
    """The mirror seam (tests/k8s_mirror.py: every reference to an image, a chart or a file, found by its key or its
    URL shape, starts with one of the mirror's prefixes)."""
    assert outside_mirror(plan, _mirror(plan)) == []


# --- names the controllers create ---------------------------------------------------------------------------------
# Each controller below creates objects named after the object it reconciles, and takes a name already in use as its
# own (or fails): an object the stack declares under such a name breaks the feature silently.


@dataclass(frozen=True)
class Created:
    """An object a controller creates in the cluster for one the stack declares."""

    group: str
    kind: str
    namespace: str
    name: re.Pattern[str]
    why: str

    def takes(self, declared: Declared) -> bool:
        return (declared.group, declared.kind, declared.namespace) == (self.group, self.kind, self.namespace) and bool(
            self.name.fullmatch(declared.name)
        )


def exactly(name: str) -> re.Pattern[str]:
    return re.compile(re.escape(name))


def created_by_leader_worker_set(lws: Declared) -> Iterator[Created]:
    """kubernetes-sigs/lws v0.10.0: the headless Service of the set's name (subdomainPolicy Shared, the webhook's
    default), created only where no Service of that name exists (pkg/utils/controller/controller_utils.go L33-64,
    leaderworkerset_controller.go L213-220), or one per group named like its leader pod `<lws>-<i>` with
    UniquePerReplica (pod_controller.go L116-117); the leaders' StatefulSet `<lws>` (leaderworkerset_controller.go
    L846) and each group's workers' StatefulSet, named like its leader pod (pod_controller.go L438)."""
    spec, ns = lws.manifest["spec"], str(lws.namespace)
    groups = rf"{re.escape(lws.name)}-\d+"
    unique = (spec.get("networkConfig") or {}).get("subdomainPolicy") == "UniquePerReplica"
    service = re.compile(groups) if unique else exactly(lws.name)
    yield Created("", "Service", ns, service, f"the headless Service of LeaderWorkerSet {lws.name}")
    yield Created("apps", "StatefulSet", ns, exactly(lws.name), f"the leaders of LeaderWorkerSet {lws.name}")
    yield Created("apps", "StatefulSet", ns, re.compile(groups), f"a group's workers of LeaderWorkerSet {lws.name}")


def created_by_job_set(job_set: Declared) -> Iterator[Created]:
    """kubernetes-sigs/jobset v0.12.0: with enableDNSHostnames, the headless Service named spec.network.subdomain, or
    the JobSet's name (pkg/controllers/jobset_controller.go createHeadlessSvcIfNecessary L788-833, GetSubdomain
    L1090-1099), created only where none of that name exists; the Jobs `<jobset>-<replicatedJob>-<index>`
    (pkg/util/placement/placement.go GenJobName L14-16)."""
    spec, ns = job_set.manifest["spec"], str(job_set.namespace)
    network = spec.get("network") or {}
    if network.get("enableDNSHostnames"):
        subdomain = network.get("subdomain") or job_set.name
        yield Created("", "Service", ns, exactly(subdomain), f"the headless Service of JobSet {job_set.name}")
    for job in spec["replicatedJobs"]:
        jobs = re.compile(rf"{re.escape(job_set.name)}-{re.escape(job['name'])}-\d+")
        yield Created("batch", "Job", ns, jobs, f"a Job of JobSet {job_set.name}")


# Kueue's Workload per queued Job or JobSet: `<kind>-<name>-<5 hex digits>`, the prefix cut to 253 - 6
# (kubernetes-sigs/kueue v0.19.2 pkg/controller/jobs/job/job_controller.go L486, jobs/jobset/jobset_controller.go
# L251, jobframework/workload_names.go GetWorkloadNameForOwnerWithGVK L64-66, GenerateWorkloadNamePrefix L76-78,
# generateWorkloadNameWithHash L90-96: the hash covers the owner's UID, so only the form is known offline).
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_WORKLOAD_PREFIX_LENGTH = 253 - 1 - 5


def created_by_kueue(job: Declared) -> Iterator[Created]:
    if job.kind in ("Job", "JobSet") and KUEUE_QUEUE_LABEL in (job.manifest["metadata"].get("labels") or {}):
        prefix = f"{job.kind.lower()}-{job.name}"[:KUEUE_WORKLOAD_PREFIX_LENGTH]
        workload = re.compile(rf"{re.escape(prefix)}-[0-9a-f]{{5}}")
        yield Created("kueue.x-k8s.io", "Workload", str(job.namespace), workload, f"Kueue's Workload of {job.name}")


def controller_created(plan: Plan) -> list[Created]:
    created: list[Created] = []
    for o in objects(plan):
        if o.kind == "LeaderWorkerSet":
            created += created_by_leader_worker_set(o)
        if o.kind == "JobSet":
            created += created_by_job_set(o)
        created += created_by_kueue(o)
    return created


def test_no_declared_object_takes_a_name_a_controller_creates(plan: Plan):
    created = controller_created(plan)
    # The stack has objects of all three controllers (test_the_stack_turns_every_kubernetes_feature_on).
    assert {(c.kind, c.why.split(" of ")[0]) for c in created} >= {
        ("Service", "the headless Service"),
        ("Workload", "Kueue's Workload"),
    }
    assert {c.why.split()[-2] for c in created if c.kind == "Service"} == {"LeaderWorkerSet", "JobSet"}
    for o in objects(plan):
        taken = [c.why for c in created if c.takes(o)]
        assert not taken, f"{o.kind} {o.namespace}/{o.name} takes the name of {taken}"


def renamed(declared: Declared, name: str) -> Declared:
    metadata = {**declared.manifest["metadata"], "name": name}
    inputs = {**declared.resource["inputs"], "metadata": metadata}
    return Declared({**declared.manifest, "metadata": metadata}, {**declared.resource, "inputs": inputs})


def test_the_check_finds_the_api_service_named_like_its_leader_worker_set(plan: Plan):
    """The check above, on what the stack declared before issue 33: the API Service named like the set."""
    (lws,) = of_kind(plan, "LeaderWorkerSet")
    (service,) = [o for o in of_kind(plan, "Service") if o.name == "big"]
    assert [c.why for c in controller_created(plan) if c.takes(renamed(service, lws.name))] == [
        "the headless Service of LeaderWorkerSet big-lws"
    ]


# --- network policies ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pod:
    """The pods of one template as they run: the template's labels and those their controller adds."""

    owner: str
    namespace: str
    labels: dict[str, str]
    spec: dict[str, Any]

    def ports(self) -> set[int | str]:
        """Each container port by number and by name (a NetworkPolicy port names either)."""
        declared = [p for c in self.spec["containers"] for p in c.get("ports", [])]
        return {p["containerPort"] for p in declared} | {p["name"] for p in declared if "name" in p}


# The LWS pod webhook labels every pod of a group with its worker index, 0 on the leader (kubernetes-sigs/lws v0.10.0
# api/leaderworkerset/v1/leaderworkerset_types.go L43-45, WorkerIndexLabelKey: "The leader also gets a workerIndex,
# and it is always set to 0").
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def pods(plan: Plan) -> Iterator[Pod]:
    for o in objects(plan):
        templates: list[tuple[dict[str, Any], dict[str, str]]] = []
        spec = o.manifest.get("spec") or {}
        if o.kind in ("Deployment", "Job"):
            templates.append((spec["template"], {}))
        elif o.kind == "JobSet":
            templates += [(job["template"]["spec"]["template"], {}) for job in spec["replicatedJobs"]]
        elif o.kind == "LeaderWorkerSet":
            group = spec["leaderWorkerTemplate"]
            templates.append((group["leaderTemplate"], {LWS_WORKER_INDEX: "0"}))
            templates.append((group["workerTemplate"], {LWS_WORKER_INDEX: "1"}))
        for template, added in templates:
            labels = {**template["metadata"].get("labels", {}), **added}
            yield Pod(f"{o.kind} {o.name}", str(o.namespace), labels, template["spec"])


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """meta/v1 LabelSelector semantics: every matchLabels pair, every matchExpressions requirement."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values", [])
        present = key in labels
        if not {
            "In": present and labels.get(key) in values,
            "NotIn": not present or labels.get(key) not in values,
            "Exists": present,
            "DoesNotExist": not present,
        }[operator]:
            return False
    return True


def test_every_port_a_network_policy_opens_is_one_its_pods_have(plan: Plan):
    """A NetworkPolicy rule's ports apply to every pod its podSelector selects; a named port resolves per pod among
    its containers' ports (networking/v1 NetworkPolicyPort: "a named port on a pod"): a rule for a port some selected
    pods do not have opens nothing there and says what the pods do not do (issue 33: the API port's rule selected a
    multi-node server's workers)."""
    running = list(pods(plan))
    for policy in of_kind(plan, "NetworkPolicy"):
        spec = policy.manifest["spec"]
        selected = [p for p in running if p.namespace == policy.namespace and selects(spec["podSelector"], p.labels)]
        assert selected, f"NetworkPolicy {policy.namespace}/{policy.name} selects no pod"
        for rule in spec.get("ingress", []):
            for port in rule.get("ports", []):
                lacking = [p.owner for p in selected if port["port"] not in p.ports()]
                assert not lacking, f"NetworkPolicy {policy.name} opens port {port['port']} on {lacking}, which lack it"


# --- taints ---------------------------------------------------------------------------------------------------------


def tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    """core/v1 Toleration.ToleratesTaint (kubernetes/api core/v1/toleration.go): an empty effect matches every effect,
    an empty key every key; Exists any value, Equal (or no operator) the same value."""
    if toleration.get("effect") and toleration["effect"] != taint["effect"]:
        return False
    if toleration.get("key") and toleration["key"] != taint["key"]:
        return False
    if toleration.get("operator") == "Exists":
        return True
    return toleration.get("value", "") == taint.get("value", "")


def test_every_gpu_pod_tolerates_the_taints_the_stack_declares_for_the_gpu_nodes(plan: Plan):
    """`kubernetes.gpuNodeTaints` are the taints the GPU nodes carry (the GPU layer's DaemonSets tolerate them): every
    pod that requests a GPU tolerates each of them, PreferNoSchedule included (an untolerated one lowers the GPU
    nodes' score for GPU pods, which can run nowhere else: TaintToleration's Score,
    kubernetes.io/docs/concepts/scheduling-eviction/taint-and-toleration/)."""
    taints = all_features(plan.stack)[P + "kubernetes"]["gpuNodeTaints"]
    assert taints  # the stack declares one (prod's)
    for pod in pods(plan):
        containers = [*pod.spec.get("initContainers", []), *pod.spec["containers"]]
        wants = {r for c in containers for r in (c.get("resources") or {}).get("limits", {})}
        if not any(r.startswith("amd.com/") for r in wants):
            continue
        for taint in taints:
            assert any(tolerates(t, taint) for t in pod.spec.get("tolerations", [])), f"{pod.owner} misses {taint}"


# --- immutable fields -------------------------------------------------------------------------------------------


def immutable_field_problems(plan: Plan) -> list[str]:
    """Each field of a declared object that the API server, its CRD or a webhook keeps immutable
    (components/k8s/replacement.py IMMUTABLE, each row cited) must be replaced by pulumi-kubernetes itself
    (K8S_FORCE_NEW, checked against its diff.go in tests/test_impact_rules.py) or by the object's replaceOnChanges,
    deleting first where the name stays (an auto-named object gets a new one; a create-first replacement under the
    same name fails "already exists"); or its row says why the program leaves the change to be refused (the
    change-impact preview predicts that refusal: tests/test_k8s_immutable.py)."""
    problems = []
    for declared in objects(plan):
        resource = declared.resource
        for row in rows(declared.manifest["apiVersion"], declared.kind, resource["inputs"]):
            where = f"{declared.kind} {resource['name']} {row.path}"
            if provider_replaces(declared.group, declared.kind, row.path):
                continue
            if not (row.replaced and row.refused == "any change"):
                if not row.note:
                    problems.append(f"{where}: left refused without a reason")
            elif row.path not in resource["replace_on_changes"]:
                problems.append(f"{where}: not in replaceOnChanges")
            elif not resource["delete_before_replace"] and not autonamed(resource["type"], resource["inputs"]):
                problems.append(f"{where}: replaced create-first under the same name")
    return problems


def test_every_immutable_field_of_every_declared_object_is_replaced_or_left_refused_on_purpose(plan: Plan):
    assert immutable_field_problems(plan) == []


# --- Kueue: what the queued pods request, their queue covers ------------------------------------------------------


def test_every_resource_a_queued_workloads_pods_request_is_covered_by_its_cluster_queue(plan: Plan):
    """tests/kueue_seams.py, read as Kueue v0.19.2 reads the plan: each queued object's integration on, its namespace
    managed, its queues there, and every resource its pods request covered by a resource group of its ClusterQueue
    or excluded by Kueue's resources.excludeResourcePrefixes (else "resource %s unavailable in ClusterQueue":
    pkg/scheduler/flavorassigner/flavorassigner.go L1069-1072). The RDMA training and the partition training are
    the ones that need it."""
    assert list(seam_problems(plan)) == []
    config = kueue_configuration(plan)
    del config["resources"]
    assert list(seam_problems(plan, config)) == [
        "JobSet ml/pretrain: its pods request rdma/hca_shared_devices_a, which ClusterQueue pretrain does not cover"
    ]
