"""Issue 27 item 8 on Kubernetes: Pod Security Admission levels on the owned namespaces, the pods' own hardening,
the NetworkPolicies, and the first `pulumi up` after this change (through the change-impact preview).

Upstream facts: Pod Security Standards, baseline "Capabilities: ... Allowed Values: AUDIT_WRITE, CHOWN,
DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID, SETPCAP, SETUID, SYS_CHROOT" (no
SYS_NICE, no IPC_LOCK) and "Seccomp: ... Allowed Values: Undefined/nil, RuntimeDefault, Localhost"
(https://kubernetes.io/docs/concepts/security/pod-security-standards/); the namespace label
`pod-security.kubernetes.io/<MODE>: <LEVEL>` with `<MODE>-version` (https://kubernetes.io/docs/concepts/security/
pod-security-admission/); a NetworkPolicy selecting a pod for ingress makes it accept only what a policy allows
(https://kubernetes.io/docs/concepts/services-networking/network-policies/). Every object here is also validated
strictly by tests/test_kubernetes.py (test_committed_stacks_declare_valid_objects).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from tools.impact import predict
from tools.impact_rules import Action
from tools.synth import Plan, synthesize
from tools.synth_diff import SynthPlan
from conftest import stack_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "policy"))
import rules  # noqa: E402

NAMESPACE = "kubernetes:core/v1:Namespace"
NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}


def _inputs(plan: Plan, type_: str, name: str) -> dict[str, Any]:
    [resource] = [r for r in plan.to_json()["resources"] if r["type"] == type_ and r["name"] == name]
    return resource["inputs"]


@pytest.fixture(scope="module")
def prod(prod_plan: Plan) -> Plan:
    return prod_plan  # the session's synthesis of the committed prod stack


def _pods(plan: Plan) -> list[tuple[str, dict[str, Any]]]:
    return [
        (where, dict(spec))
        for r in plan.to_json()["resources"]
        for where, spec in rules.pod_specs(r["type"], r["inputs"])
    ]


def test_each_owned_namespace_enforces_the_level_its_pods_need(prod):
    """ml runs GPU pods that add no capability: baseline (issue 34 item 2); the operator's namespace runs its
    privileged DaemonSets. A workload asking for NUMA binding (SYS_NICE, not in baseline's list) makes ml
    privileged."""
    labels = {n: _inputs(prod, NAMESPACE, f"k8s-{n}")["metadata"]["labels"] for n in ("ml", "kube-amd-gpu")}
    assert {n: (lbl[rules.PSA_ENFORCE], lbl[rules.PSA_ENFORCE + "-version"]) for n, lbl in labels.items()} == {
        "ml": ("baseline", "latest"),
        "kube-amd-gpu": ("privileged", "latest"),
    }
    for where, spec in _pods(prod):
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            added = set(container.get("securityContext", {}).get("capabilities", {}).get("add", []))
            assert added <= BASELINE_CAPABILITIES, (where, container["name"])
    config = stack_file("prod")
    config["rocm-stack:training"][0]["kubernetes"]["numaBinding"] = True
    plan = synthesize("prod", config)
    assert _inputs(plan, NAMESPACE, "k8s-ml")["metadata"]["labels"][rules.PSA_ENFORCE] == "privileged"


def test_every_workload_container_is_hardened(prod):
    pods = _pods(prod)
    # llm-pretrain's workers, llm-finetune's rendezvous store and workers, the vLLM and the router Deployments
    assert len(pods) == 5
    for where, spec in pods:
        assert spec["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
        # The router alone watches pods, as an account of its own (tests/test_router.py).
        assert spec["automountServiceAccountToken"] is (spec.get("serviceAccountName") == "llama-router")
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            assert container["securityContext"]["allowPrivilegeEscalation"] is False, (where, container["name"])


def test_vllm_accepts_only_its_clients_and_monitoring(prod):
    policy = _inputs(prod, NETWORK_POLICY, "llama-ingress")["spec"]
    deployment = _inputs(prod, DEPLOYMENT, "llama")["spec"]
    assert policy["podSelector"]["matchLabels"] == deployment["template"]["metadata"]["labels"]
    assert policy["policyTypes"] == ["Ingress"]
    [rule] = policy["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert {
        c["name"]
        for c in deployment["template"]["spec"]["containers"]
        if any(p.get("name") == "http" for p in c.get("ports", []))
    }  # the named port exists in the pod
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    # prod routes: the replicas take the router's pods and monitoring only, the router the clients.
    router = _inputs(prod, DEPLOYMENT, "llama-router")["spec"]["template"]["metadata"]["labels"]
    assert rule["from"] == [{"podSelector": {"matchLabels": router}}, monitoring]
    [rule] = _inputs(prod, NETWORK_POLICY, "llama-router-ingress")["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {}}}, monitoring]
    config = stack_file("prod")
    config["rocm-stack:inference"][0]["kubernetes"]["clients"] = [{"app.kubernetes.io/name": "chat"}]
    plan = synthesize("prod", config)
    [rule] = _inputs(plan, NETWORK_POLICY, "llama-router-ingress")["spec"]["ingress"]
    assert rule["from"][0] == {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "chat"}}}
    # Without the router the clients reach the replicas themselves.
    del config["rocm-stack:inference"][0]["kubernetes"]["router"]
    [rule] = _inputs(synthesize("prod", config), NETWORK_POLICY, "llama-ingress")["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "chat"}}}, monitoring]


def test_training_pods_accept_only_each_other(prod):
    """RCCL's bootstrap and socket transport listen on ephemeral ports: every port, from the same JobSet only."""
    policy = _inputs(prod, NETWORK_POLICY, "llm-pretrain-ingress")["spec"]
    labels = _inputs(prod, JOBSET, "llm-pretrain")["spec"]["replicatedJobs"][0]["template"]["spec"]["template"][
        "metadata"
    ]["labels"]
    assert policy["podSelector"]["matchLabels"] == labels
    assert policy["ingress"] == [{"from": [{"podSelector": {"matchLabels": labels}}]}]


@pytest.mark.parametrize(
    "tag, moving",
    [
        ("latest", True),
        ("nightly", True),
        ("latest-release", True),
        ("main", True),
        ("STABLE", True),
        ("rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.8.0", False),
        ("v1.5.1", False),
        ("1.31.0.9", False),
    ],
)
def test_moving_tags(tag, moving):
    assert (rules.unpinned_reason(f"rocm/pytorch:{tag}") is not None) is moving


@pytest.mark.parametrize(
    "version, exact",
    [
        ("1.5.1", True),
        ("v1.21.1", True),
        ("0.12.0-rc.1", True),
        ("", False),
        ("^1.5", False),
        ("~1.5.0", False),
        (">=1.0.0", False),
        ("1.5", False),
        ("1.5.x", False),
    ],
)
def test_chart_versions(version, exact):
    assert (rules.chart_version_problem(version) is None) is exact


def test_first_pulumi_up_after_this_change(prod):
    """The prod stack as the previous version declared it (no PSA labels, no pod hardening, no NetworkPolicies)
    against this one: the namespaces update in place, the vLLM Deployment rolls (its pod template changed), the
    training JobSet is replaced (its spec is immutable: replace_on_changes), the NetworkPolicies are created."""
    head = prod.to_json()
    base = {**head, "resources": []}
    for resource in head["resources"]:
        if resource["type"] == NETWORK_POLICY:
            continue
        resource = _strip_hardening(resource)
        base["resources"].append(resource)
    report = predict(SynthPlan.model_validate(base), SynthPlan.model_validate(head))
    actions = {(i.type, i.name): i.action for i in report.impacts if i.type.startswith("kubernetes:")}
    assert actions[(NAMESPACE, "k8s-ml")] == Action.UPDATE
    assert actions[(NAMESPACE, "k8s-kube-amd-gpu")] == Action.UPDATE
    assert actions[(DEPLOYMENT, "llama")] == Action.UPDATE
    assert actions[(JOBSET, "llm-pretrain")] in (Action.REPLACE, Action.DELETE_REPLACE)
    assert actions[(NETWORK_POLICY, "llama-ingress")] == Action.CREATE
    assert actions[(NETWORK_POLICY, "llm-pretrain-ingress")] == Action.CREATE


def _strip_hardening(resource: dict[str, Any]) -> dict[str, Any]:
    import copy

    resource = copy.deepcopy(resource)
    if resource["type"] == NAMESPACE:
        labels = resource["inputs"]["metadata"]["labels"]
        for key in [k for k in labels if k.startswith("pod-security.kubernetes.io/")]:
            del labels[key]
    for _, spec in rules.pod_specs(resource["type"], resource["inputs"]):
        assert isinstance(spec, dict)
        spec.pop("securityContext", None)
        spec.pop("automountServiceAccountToken", None)
        for container in (*spec.get("initContainers", []), *spec["containers"]):
            container.get("securityContext", {}).pop("allowPrivilegeEscalation", None)
            if not container.get("securityContext"):
                container.pop("securityContext", None)
    return resource
