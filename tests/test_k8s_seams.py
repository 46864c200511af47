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

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from schema.kubernetes import BUILTIN_NAMESPACES
from tools.synth import Plan, autoname, autonamed, manifest_of, synthesize

ALL_FEATURES = Path(__file__).parent / "data" / "seams" / "all-features.yaml"
P = "rocm-stack:"
ENVIRONMENTS = ("dev", "prod")


def all_features(environment: str) -> dict[str, Any]:
    """The all-features stack's config (`rocm-stack:` keys) for `environment`."""
    config: dict[str, Any] = yaml.safe_load(ALL_FEATURES.read_text())["config"]
    return {**config, P + "environment": environment}


@pytest.fixture(scope="module", params=ENVIRONMENTS)
def plan(request: pytest.FixtureRequest) -> Plan:
    """The all-features stack synthesized as dev, then as prod (each test taking it runs for both)."""
    return synthesize(request.param, all_features(request.param))


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


def dependencies(plan: Plan, urn: str) -> set[str]:
    """Every resource `urn` waits for in `pulumi up`: its dependsOn and those of theirs (the engine creates a
    resource only after its dependencies, property references included)."""
    by_urn = {r["urn"]: r for r in plan.resources}
    seen: set[str] = set()
    stack = list(by_urn[urn]["depends_on"])
    while stack:
        dependency = stack.pop()
        if dependency not in seen:
            seen.add(dependency)
            stack.extend(by_urn[dependency]["depends_on"])
    return seen


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
    big = by_name[("LeaderWorkerSet", "big")]
    assert big.manifest["spec"]["leaderWorkerTemplate"]["size"] == 2
    assert ("Deployment", "big-router") in by_name and ("Deployment", "small") in by_name
    (scaler,) = of_kind(plan, "ScaledObject")
    assert scaler.manifest["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"
    # Training in queues: multi-node over RDMA, elastic, and one on GPU partitions.
    queued = {o.name for o in objects(plan) if "kueue.x-k8s.io/queue-name" in o.manifest["metadata"].get("labels", {})}
    assert queued == {"pretrain", "finetune", "shard"}
    assert "rdma/hca_shared_devices_a" in requested(by_name[("JobSet", "pretrain")])
    commands = [c["command"] for spec in pod_specs(by_name[("JobSet", "finetune")]) for c in spec["containers"]]
    assert any(command[:3] == ["torchrun", "--nnodes", "1:2"] for command in commands)
    assert "amd.com/cpx_nps4" in requested(by_name[("Job", "shard")])
    assert len(of_kind(plan, "ClusterQueue")) == 3 and len(of_kind(plan, "LocalQueue")) == 3
    # Partitions: DCM on, fed the stack's profiles.
    (device_config,) = of_kind(plan, "DeviceConfig")
    assert device_config.manifest["spec"]["configManager"]["enable"] is True
    # Monitoring: the vLLM and router ServiceMonitors, the alert rules, the kube-prometheus-stack release above.
    assert {"ServiceMonitor", "PrometheusRule"} <= {o.kind for o in objects(plan)}


# --- namespaces ---------------------------------------------------------------------------------------------------


def test_every_namespaced_object_goes_into_a_namespace_that_exists_before_it(plan: Plan):
    """The API server refuses an object whose namespace does not exist ("namespaces ... not found"; namespace
    lifecycle admission, kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#namespacelifecycle):
    each namespace is one the stack declares, and the object waits for it in `pulumi up`, or one Kubernetes creates
    itself (default, kube-system, kube-public, kube-node-lease:
    kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/#initial-namespaces)."""
    declared = {o.name: o.resource["urn"] for o in of_kind(plan, "Namespace")}
    for o in objects(plan):
        if o.namespace is None or o.namespace in BUILTIN_NAMESPACES:
            continue
        assert o.namespace in declared, f"{o.kind} {o.namespace}/{o.name}: namespace {o.namespace} is not declared"
        assert declared[o.namespace] in dependencies(plan, o.resource["urn"]), (
            f"{o.kind} {o.namespace}/{o.name} does not wait for its Namespace"
        )
