"""Issue 34 items 1, 2 and 10 (the Kubernetes side): what a training team, a tenant who may create pods and Jobs in
a workload namespace, can no longer reach of serving and of the nodes, and what KEDA may read.

Upstream facts, each cited where it is used: the keda chart's values and RBAC templates (kedacore/charts v2.20.2).
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

import pytest

from admission_cel import refusals, request
from components.k8s.keda import RESTRICTED_SECRETS
from conftest import refusal, stack_file
from components.workloads import SERVING_POLICY
from components.workloads.admission import CONTROLLER_MANAGER, LWS_CONTROLLER, controller
from k8s_validation import validate_all
from tools.impact import predict
from tools.impact_rules import Action
from tools.synth import Plan, manifest_of, synthesize
from tools.synth_diff import SynthPlan
from upstream_go import Upstream

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
import rules  # noqa: E402
from rocm_policy import offline  # noqa: E402

KEDA_CHARTS = Upstream("kedacore/charts", "cbb9bb8ce0809dc9048f72302f7c09765d66ed56")  # tag v2.20.2
PRODUCTION_STACK = Upstream(
    "vllm-project/production-stack", "66b60661aa3052810859a417559e9e830772a091"
)  # vllm-stack-0.1.12
P = "rocm-stack:"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"


@pytest.fixture(scope="module")
def prod(prod_plan: Plan) -> Plan:
    return prod_plan  # the session's synthesis of the committed prod stack


def _lines(text: bytes, first: int, last: int) -> list[str]:
    return text.decode().splitlines()[first - 1 : last]


# --- item 10: KEDA reads the Secrets of its own namespace only ---------------------------------------------------


def test_keda_reads_no_secret_outside_its_namespace(prod: Plan) -> None:
    """The stack's KEDA authenticates no trigger (no TriggerAuthentication, no `authenticationRef`): it is installed
    with `restrict.secret` for the operator and the metrics server, so its ClusterRole lists and watches no
    Secret."""
    values = prod.get(HELM_RELEASE, "keda")["inputs"]["values"]
    assert values["permissions"] == {
        "operator": {"restrict": {"secret": True}},
        "metricServer": {"restrict": {"secret": True}},
    }
    types = {r["type"] for r in prod.to_json()["resources"]}
    assert not {t for t in types if t.endswith("TriggerAuthentication")}
    for scaled in prod.of_type(SCALED_OBJECT):
        assert all("authenticationRef" not in t for t in scaled["inputs"]["spec"]["triggers"])


def test_the_charts_secret_access_is_what_the_stack_turns_off() -> None:
    """kedacore/charts v2.20.2: `restrict.secret` defaults to false for both (values.yaml L913-922); false gives the
    operator's ClusterRole list and watch on every Secret (templates/manager/clusterrole.yaml L51-57); true gives a
    Role in KEDA's namespace instead (templates/manager/minimal-rbac.yaml L36-43) and sets
    KEDA_RESTRICT_SECRET_ACCESS in both Deployments."""
    values = _lines(KEDA_CHARTS.read("keda/values.yaml"), 913, 922)
    assert [line.strip() for line in values if not line.strip().startswith("#")] == [
        "permissions:",
        "metricServer:",
        "restrict:",
        "secret: false",
        "operator:",
        "restrict:",
        "secret: false",
    ]
    clusterrole = _lines(KEDA_CHARTS.read("keda/templates/manager/clusterrole.yaml"), 51, 59)
    assert clusterrole[0] == "{{- if not .Values.permissions.operator.restrict.secret }}"
    assert [line.strip() for line in clusterrole[1:8]] == [
        "- apiGroups:",
        '- ""',
        "resources:",
        "- secrets",
        "verbs:",
        "- list",
        "- watch",
    ]
    minimal = _lines(KEDA_CHARTS.read("keda/templates/manager/minimal-rbac.yaml"), 36, 43)
    assert minimal[0] == "{{- if .Values.permissions.operator.restrict.secret }}"
    assert "- secrets" in [line.strip() for line in minimal]
    for template, key in (
        ("keda/templates/manager/deployment.yaml", "operator"),
        ("keda/templates/metrics-server/deployment.yaml", "metricServer"),
    ):
        text = KEDA_CHARTS.read(template).decode()
        assert f"{{{{- if .Values.permissions.{key}.restrict.secret }}}}\n" in text
        assert "- name: KEDA_RESTRICT_SECRET_ACCESS" in text
    assert set(RESTRICTED_SECRETS["permissions"]) == {"operator", "metricServer"}


def test_keda_restricted_on_the_next_pulumi_up(prod: Plan) -> None:
    """Day 2: prod as main declared it (the chart's default values) against this one: the release is upgraded in
    place (a values change is a Release update, a `helm upgrade`); no ScaledObject, HPA or Deployment changes."""
    head = prod.to_json()
    base = copy.deepcopy(head)
    for resource in base["resources"]:
        if resource["type"] == HELM_RELEASE and resource["name"] == "keda":
            del resource["inputs"]["values"]["permissions"]
    report = predict(SynthPlan.model_validate(base), SynthPlan.model_validate(head))
    changed = {(i.type, i.name): i.action for i in report.impacts}
    assert changed == {(HELM_RELEASE, "keda"): Action.UPDATE}


# --- item 1: serving trusts no label a tenant can write ------------------------------------------------------------

POLICY = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicy"
BINDING = "kubernetes:admissionregistration.k8s.io/v1:ValidatingAdmissionPolicyBinding"
TENANT = "system:serviceaccount:ml:default"  # a training team's pod-creating identity in `ml`
REPLICA_SETS = controller("replicaset-controller")


@pytest.fixture(scope="module")
def serving_policy(prod: Plan) -> tuple[dict[str, Any], dict[str, Any]]:
    policy = prod.get(POLICY, SERVING_POLICY)["inputs"]
    binding = prod.get(BINDING, f"{SERVING_POLICY}-binding")["inputs"]
    return policy, binding


def _replica_labels(prod: Plan) -> dict[str, str]:
    """What the router selects: the labels of prod's vLLM pods, as its Deployment declares them."""
    template = prod.get(DEPLOYMENT, "llama")["inputs"]["spec"]["template"]
    return dict(template["metadata"]["labels"])


def test_the_router_hands_every_pod_its_selector_matches_the_key() -> None:
    """vllm-project/production-stack @ vllm-stack-0.1.12 src/vllm_router/service_discovery.py: the router watches the
    pods of its namespace by label selector alone (L674-678), asks each ready one's /v1/models with `Authorization:
    Bearer $VLLM_API_KEY` (L601-606) and routes to it once it names a model (L796-799). Whoever can create a pod with
    the selector's labels in that namespace gets the key and clients' prompts: the labels must be the stack's alone."""
    source = PRODUCTION_STACK.read("src/vllm_router/service_discovery.py").decode().splitlines()
    assert [line.strip() for line in source[600:606]] == [
        'url = f"http://{pod_ip}:{self.port}/v1/models"',
        "try:",
        "headers = None",
        'if VLLM_API_KEY := os.getenv("VLLM_API_KEY"):',
        'logger.info("Using vllm server authentication")',
        'headers = {"Authorization": f"Bearer {VLLM_API_KEY}"}',
    ]
    assert [line.strip() for line in source[673:678]] == [
        "for event in self.k8s_watcher.stream(",
        "self.k8s_api.list_namespaced_pod,",
        "namespace=self.namespace,",
        "label_selector=self.label_selector,",
        "timeout_seconds=self.watcher_timeout_seconds,",
    ]
    assert [line.strip() for line in source[795:799]] == [
        "if not model_names:",
        "return",
        "",
        "self._add_engine(engine_name, engine_ip, model_names, model_label)",
    ]


def test_a_pod_with_the_replicas_labels_is_refused_unless_a_controller_creates_it(prod, serving_policy) -> None:
    """The rogue pod of the finding (the replicas' labels, created in serving's namespace by a training team's
    identity, or by a Job, a DaemonSet, any controller but the ReplicaSet and StatefulSet ones) is refused; the
    stack's own pods (ReplicaSet controller, also as kube-controller-manager's own user) and unlabelled pods pass."""
    namespace = prod.get(DEPLOYMENT, "llama")["inputs"]["metadata"]["namespace"]
    labels = _replica_labels(prod)
    rogue = {"metadata": {"name": "rogue", "labels": labels}, "spec": {}}
    policy, binding = serving_policy
    for creator in (TENANT, "alice", controller("job-controller"), controller("daemon-set-controller")):
        assert refusals(policy, binding, request("CREATE", "", "pods", rogue, creator, namespace)), creator
    for creator in (REPLICA_SETS, controller("statefulset-controller"), CONTROLLER_MANAGER):
        assert refusals(policy, binding, request("CREATE", "", "pods", rogue, creator, namespace)) == []
    router_pod = {
        "metadata": {"labels": prod.get(DEPLOYMENT, "llama-router")["inputs"]["spec"]["selector"]["matchLabels"]}
    }
    assert refusals(policy, binding, request("CREATE", "", "pods", router_pod, TENANT, namespace))
    training = {"metadata": {"labels": {**labels, "app.kubernetes.io/name": "training"}}}
    assert (
        refusals(policy, binding, request("CREATE", "", "pods", training, controller("job-controller"), namespace))
        == []
    )
    assert refusals(policy, binding, request("CREATE", "", "pods", {"metadata": {}}, TENANT, namespace)) == []
    # Labels added later: refused; a serving pod's own updates (status, finalizers) pass.
    plain = {"metadata": {"name": "rogue"}}
    assert refusals(policy, binding, request("UPDATE", "", "pods", rogue, TENANT, namespace, old=plain))
    assert refusals(policy, binding, request("UPDATE", "", "pods", rogue, TENANT, namespace, old=rogue)) == []


def test_no_controller_path_around_the_policy(prod, serving_policy) -> None:
    """The controllers that may create serving's pods create them from templates: a ReplicaSet only from the
    Deployment controller, a StatefulSet only from the LeaderWorkerSet controller, a Deployment or LeaderWorkerSet
    with serving's template only under a name the stack declares."""
    namespace = prod.get(DEPLOYMENT, "llama")["inputs"]["metadata"]["namespace"]
    policy, binding = serving_policy
    template = {"metadata": {"labels": _replica_labels(prod)}}

    def workload(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"template": template}}

    def judged(group: str, resource: str, obj: dict[str, Any], creator: str) -> list[str]:
        return refusals(policy, binding, request("CREATE", group, resource, obj, creator, namespace))

    assert judged("apps", "replicasets", workload("x"), TENANT)
    assert judged("apps", "replicasets", workload("llama-5d4f"), controller("deployment-controller")) == []
    assert judged("apps", "statefulsets", workload("x"), TENANT)
    assert judged("apps", "statefulsets", workload("x"), LWS_CONTROLLER) == []
    assert judged("apps", "deployments", workload("rogue"), TENANT)
    assert judged("apps", "deployments", workload("llama"), TENANT) == []  # the stack's: its deployer's RBAC
    assert judged("apps", "deployments", {"metadata": {"name": "x"}, "spec": {"template": {}}}, TENANT) == []
    group = "leaderworkerset.x-k8s.io"
    lws = {"metadata": {"name": "rogue"}, "spec": {"leaderWorkerTemplate": {"workerTemplate": template}}}
    assert judged(group, "leaderworkersets", lws, TENANT)
    leader = {
        "metadata": {"name": "rogue"},
        "spec": {"leaderWorkerTemplate": {"leaderTemplate": template, "workerTemplate": {}}},
    }
    assert judged(group, "leaderworkersets", leader, TENANT)


def test_the_policy_binds_where_the_stack_serves_and_refuses(prod, serving_policy) -> None:
    """Bound to the namespaces of the stack's vLLM servers, on CREATE and UPDATE, failing closed: `Deny`
    (https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/, stable since 1.30:
    kubernetes/website content/en/docs/reference/command-line-tools-reference/feature-gates/
    ValidatingAdmissionPolicy.md)."""
    policy, binding = serving_policy
    namespaces = {r["inputs"]["metadata"]["namespace"] for r in prod.of_type(DEPLOYMENT)}
    [expression] = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert set(expression["values"]) == namespaces
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {(g, r) for rule in rules for g in rule["apiGroups"] for r in rule["resources"]} == {
        ("", "pods"),
        ("apps", "replicasets"),
        ("apps", "statefulsets"),
        ("apps", "deployments"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    }
    assert all(rule["operations"] == ["CREATE", "UPDATE"] for rule in rules)
    objects = [
        manifest_of(prod.get(POLICY, SERVING_POLICY)),
        manifest_of(prod.get(BINDING, f"{SERVING_POLICY}-binding")),
    ]
    assert validate_all(objects) == 2  # kubernetes-validate --strict, the built-in kinds


def serving_moved(namespace: str = "serving") -> dict[str, Any]:
    """Prod's stack file with serving in a namespace of its own, with its LocalQueue (docs/kubernetes.md)."""
    config = stack_file("prod")
    k8s = config[P + "kubernetes"]
    k8s["namespaces"] = [*k8s["namespaces"], namespace]
    k8s["queues"]["clusterQueues"]["serving"]["namespaces"] = [namespace]
    for queue in k8s["queues"]["localQueues"]:
        if queue["name"] == "serving":
            queue["namespace"] = namespace
    config[P + "inference"][0]["kubernetes"]["namespace"] = namespace
    return config


def test_moving_serving_to_its_own_namespace_on_a_running_prod(prod: Plan) -> None:
    """Day 2 of the move, as `rocm-stack diff` predicts it through the real program: a namespace is part of an
    object's identity, so every serving object is replaced. The replicas' Deployment and their model-cache PVC go
    first (deleteBeforeReplace: their GPUs and fixed names), so serving is down until the new replicas have loaded the
    model again into an empty cache; the router's objects are created in the new namespace first and the old ones
    deleted at the end: the clients' address changes (`llama-router.serving.svc`). The policy's binding follows
    the namespace in place; nothing of the training changes."""
    report = predict(
        SynthPlan.model_validate(prod.to_json()),
        SynthPlan.model_validate(synthesize("prod", serving_moved()).to_json()),
    )
    actions = {(i.type.rsplit(":", 1)[-1], i.name): i.action for i in report.impacts}
    meanings = {(i.type.rsplit(":", 1)[-1], i.name): i.meaning for i in report.impacts}
    assert actions[("Deployment", "llama")] == Action.DELETE_REPLACE
    assert meanings[("Deployment", "llama")] == "deletes Deployment `ml/llama`, then creates it as `serving/llama`"
    assert actions[("PersistentVolumeClaim", "llama-model-cache")] == Action.DELETE_REPLACE
    for kind, name in (
        ("Deployment", "llama-router"),
        ("Service", "llama-router-service"),
        ("Secret", "llama-api-key"),
    ):
        assert actions[(kind, name)] == Action.REPLACE, (kind, name)
    assert meanings[("Service", "llama-router-service")].startswith(
        "creates Service `serving/llama-router`, then deletes `ml/llama-router`"
    )
    assert actions[("Namespace", "k8s-serving")] == Action.CREATE
    assert actions[("ValidatingAdmissionPolicyBinding", f"{SERVING_POLICY}-binding")] == Action.UPDATE
    assert actions[("LocalQueue", "local-queue-ml.serving")] == Action.DELETE
    assert not [key for key in actions if key[0] in ("JobSet", "Job") or key[1].startswith("llm-")]


# --- item 2: Pod Security baseline unless a workload needs more, and then exactly that ----------------------------

NAMESPACE = "kubernetes:core/v1:Namespace"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"


def _numa(config: dict[str, Any]) -> dict[str, Any]:
    """Prod's stack file with its pretraining asking for NUMA binding (SYS_NICE)."""
    config[P + "training"][0]["kubernetes"]["numaBinding"] = True
    return config


@pytest.fixture(scope="module")
def numa() -> Plan:
    return synthesize("prod", _numa(stack_file("prod")))


def _level(plan: Plan, namespace: str) -> str:
    return str(plan.get(NAMESPACE, f"k8s-{namespace}")["inputs"]["metadata"]["labels"][rules.PSA_ENFORCE])


def test_workload_namespaces_are_baseline_unless_a_workload_needs_more(prod: Plan, numa: Plan) -> None:
    """Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/), baseline:
    capabilities only from AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP,
    SETGID, SETPCAP, SETUID, SYS_CHROOT; no privileged container, hostPath volume, host namespace or hostPort.
    Prod's workloads need none of these: `ml` enforces baseline and no pod adds SYS_NICE; one asking for NUMA binding
    gets SYS_NICE alone, and its namespace privileged."""
    assert _level(prod, "ml") == "baseline"
    assert not [r for r in prod.to_json()["resources"] if r["name"].startswith("rocm-stack-pods-")]
    for r in prod.to_json()["resources"]:
        for spec in rules.workload_pod_specs(r["type"], r["inputs"]):
            assert rules.pod_needs(spec).level() == "baseline", r["name"]
    assert _level(numa, "ml") == "privileged"
    [pretrain] = rules.workload_pod_specs(JOBSET, numa.get(JOBSET, "llm-pretrain")["inputs"])
    assert rules.pod_needs(pretrain).capabilities == {"SYS_NICE"}
    assert rules.BASELINE_CAPABILITIES == frozenset(
        "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID SETPCAP SETUID "
        "SYS_CHROOT".split()
    )


def test_the_config_refuses_a_level_laxer_than_the_pods_need() -> None:
    """`podSecurity: privileged` on a workload whose pods need baseline is refused, by the rule the pack applies to
    the namespaces (rules.laxer_pod_security_problem); with NUMA binding it is what they need."""
    config = stack_file("prod")
    config[P + "training"][0]["kubernetes"]["podSecurity"] = "privileged"
    problem = refusal("prod", config)
    assert "training[0].kubernetes.podSecurity" in problem and "need only 'baseline'" in problem
    synthesize("prod", _numa(config))


def test_the_pack_refuses_a_namespace_laxer_than_its_pods_need(prod: Plan, numa: Plan) -> None:
    """The pack reads the same rule from the plan: every pod template the stack declares in a namespace it creates
    (JobSets, Deployments, LeaderWorkerSets, ...), against the namespace's enforce label; a namespace a Helm release
    installs into is left out (its pods are not in the plan). Prod passes the whole pack; a prod asking for NUMA
    binding (privileged `ml`) passes this policy, while the allow-list refuses what the committed prod does not
    declare."""
    with offline.stack_environment("prod"):
        assert offline.check(prod.to_json()["resources"]) == []
        assert _as_needed(offline.check(numa.to_json()["resources"])) == []
    tampered = copy.deepcopy(prod.to_json())
    [ml] = [r for r in tampered["resources"] if r["type"] == NAMESPACE and r["name"] == "k8s-ml"]
    ml["inputs"]["metadata"]["labels"][rules.PSA_ENFORCE] = "privileged"
    with offline.stack_environment("prod"):
        violations = _as_needed(offline.check(tampered["resources"]))
    assert [v.message.split(":")[0] for v in violations] == [
        "namespace 'ml' enforces Pod Security 'privileged' but its pods need only 'baseline'"
    ]


def _as_needed(violations: list[offline.Violation]) -> list[offline.Violation]:
    return [v for v in violations if v.policy == "prod-namespaces-pod-security-as-needed"]


def _pod(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "tenant"}, "spec": {"containers": [{"name": "c", "image": "x"}], **spec}}


def test_a_privileged_namespace_admits_baseline_and_the_stacks_exceptions_only(numa: Plan) -> None:
    """Where a workload needs privileged, Pod Security enforces nothing; the pod policy bound there admits every pod
    template the stack declares in it and a tenant's baseline pod, and refuses a privileged container, another
    capability, a hostPath, the node's namespaces and a hostPort, also through an ephemeral container."""
    policy = numa.get(POLICY, "rocm-stack-pods-ml")["inputs"]
    binding = numa.get(BINDING, "rocm-stack-pods-ml-binding")["inputs"]
    objects = [
        manifest_of(numa.get(POLICY, "rocm-stack-pods-ml")),
        manifest_of(numa.get(BINDING, "rocm-stack-pods-ml-binding")),
    ]
    assert validate_all(objects) == 2  # kubernetes-validate --strict

    def refused(pod: dict[str, Any], resource: str = "pods") -> list[str]:
        return refusals(policy, binding, request("CREATE", "", resource, pod, TENANT, "ml"))

    for r in numa.to_json()["resources"]:
        if r["inputs"].get("metadata", {}).get("namespace") == "ml":
            for spec in rules.workload_pod_specs(r["type"], r["inputs"]):
                assert refused({"metadata": {}, "spec": spec}) == [], r["name"]
    assert refused(_pod()) == []
    nice = {"name": "c", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_NICE", "CHOWN"]}}}
    assert refused(_pod(containers=[nice])) == []
    for bad in (
        _pod(containers=[{"name": "c", "image": "x", "securityContext": {"privileged": True}}]),
        _pod(containers=[{"name": "c", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]),
        _pod(initContainers=[{"name": "i", "image": "x", "securityContext": {"capabilities": {"add": ["BPF"]}}}]),
        _pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        _pod(hostPID=True),
        _pod(hostIPC=True),
        _pod(hostNetwork=True),
        _pod(containers=[{"name": "c", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}]}]),
        _pod(ephemeralContainers=[{"name": "e", "image": "x", "securityContext": {"privileged": True}}]),
    ):
        assert refused(bad), bad
        assert rules.pod_needs(bad["spec"]).level() == "privileged"  # what baseline would have refused
    ephemeral = _pod(ephemeralContainers=[{"name": "e", "image": "x", "securityContext": {"privileged": True}}])
    assert refused(ephemeral, "pods/ephemeralcontainers")


def test_baseline_by_default_on_a_running_prod(prod: Plan) -> None:
    """Day 2, from main's prod (every GPU pod with SYS_NICE, `ml` privileged: this program with numaBinding on every
    workload, less the pod policy main did not have) to this one: the namespace's label is patched in place (Pod
    Security then checks the running pods and only warns, https://kubernetes.io/docs/concepts/security/
    pod-security-admission/), the vLLM Deployment rolls, each training JobSet is replaced (its spec is immutable:
    the training restarts from its newest checkpoint); nothing else changes."""
    before = stack_file("prod")
    for key in (P + "training", P + "inference"):
        for workload in before[key]:
            workload["kubernetes"]["numaBinding"] = True
    base = synthesize("prod", before).to_json()
    base["resources"] = [r for r in base["resources"] if not r["name"].startswith("rocm-stack-pods-")]
    assert _level(synthesize("prod", before), "ml") == "privileged"
    report = predict(SynthPlan.model_validate(base), SynthPlan.model_validate(prod.to_json()))
    actions = {(i.type.rsplit(":", 1)[-1], i.name): i.action for i in report.impacts}
    assert actions.pop(("Namespace", "k8s-ml")) == Action.UPDATE
    assert actions.pop(("Deployment", "llama")) == Action.UPDATE
    for training in ("llm-pretrain", "llm-finetune"):
        assert actions.pop(("JobSet", training)) in (Action.REPLACE, Action.DELETE_REPLACE)
    assert actions == {}
