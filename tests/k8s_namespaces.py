"""The namespace seam: every Helm release and namespaced object a plan declares lands in a namespace that exists when
it is created, by one of the ways the stack has to know it (issue 33 item 7):

- a built-in namespace (Kubernetes creates default, kube-system, kube-public, kube-node-lease);
- a Namespace resource of the plan the object depends on (an owned namespace's `metadata.name` output);
- a Helm release with createNamespace in that namespace, the object itself or one it depends on (Helm creates a
  missing namespace before the release's objects: helm pkg/action/install.go, `if i.CreateNamespace`);
- a read of the namespace (Cluster.existing_namespace) the object depends on: the deploy stops at the read, naming
  the fix, before anything is created there.

Without one of them the API server refuses the object ("namespaces \"x\" not found") on a fresh cluster.
"""

from __future__ import annotations

from typing import Any

from schema.kubernetes import BUILTIN_NAMESPACES
from tools.synth import Plan

RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"


def _namespace_of(resource: dict[str, Any]) -> str | None:
    inputs = resource.get("inputs") or {}
    if resource["type"] == RELEASE:
        return inputs.get("namespace")
    if not resource["type"].startswith("kubernetes:") or resource["type"].startswith("kubernetes:yaml/"):
        return None
    metadata = inputs.get("metadata")
    return metadata.get("namespace") if isinstance(metadata, dict) else None


def _readiness(resource: dict[str, Any], namespace: str) -> bool:
    """Does this resource (one the object depends on, or the object itself) make `namespace` exist?"""
    inputs = resource.get("inputs") or {}
    if resource["type"] == NAMESPACE:
        return (inputs.get("metadata") or {}).get("name") == namespace
    return resource["type"] == RELEASE and inputs.get("namespace") == namespace and bool(inputs.get("createNamespace"))


def namespace_problems(plan: Plan) -> list[str]:
    """One line per release or namespaced object whose namespace nothing makes exist first."""
    by_urn = {r["urn"]: r for r in plan.resources}

    def closure(resource: dict[str, Any]) -> set[str]:
        seen: set[str] = set()
        todo = list(resource["depends_on"])
        while todo:
            urn = todo.pop()
            if urn not in seen:
                seen.add(urn)
                todo.extend(by_urn[urn]["depends_on"] if urn in by_urn else [])
        return seen

    problems = []
    for resource in plan.resources:
        namespace = _namespace_of(resource)
        if namespace is None or namespace in BUILTIN_NAMESPACES or _readiness(resource, namespace):
            continue
        ready = False
        for urn in closure(resource):
            if urn in by_urn:
                ready = _readiness(by_urn[urn], namespace)
            else:  # a read (not registered): Cluster.existing_namespace names it "namespace <name> (...)"
                ready = urn.split("::")[-2].endswith(f"${NAMESPACE}") and urn.split("::")[-1].startswith(
                    f"namespace {namespace} ("
                )
            if ready:
                break
        if not ready:
            problems.append(f"{resource['type']} {resource['name']}: namespace '{namespace}' may not exist")
    return problems
