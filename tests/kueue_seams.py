"""The seam between the stack's queued workloads and the Kueue it configures, read as Kueue reads them (v0.19.2).

For every object labelled `kueue.x-k8s.io/queue-name` (a Job, JobSet, Deployment or LeaderWorkerSet), from the
synthesized manifests and the Kueue release's values:
- its kind's integration is enabled (Configuration.integrations.frameworks) and, for the pod-based ones, its namespace
  is one Kueue manages (managedJobsNamespaceSelector: "Pods, deployments, etc. in non-matching namespaces will never
  be managed by Kueue", apis/config/v1beta2/configuration_types.go L55-70);
- its LocalQueue exists in its namespace, whose ClusterQueue's namespaceSelector takes that namespace;
- every resource any container or init container of its pods requests is covered by a resource group of that
  ClusterQueue, or dropped by `resources.excludeResourcePrefixes` (a prefix match on the name, pkg/workload/
  workload.go L463-477) before quota: anything else and "resource %s unavailable in ClusterQueue" stops its
  admission for good (pkg/scheduler/flavorassigner/flavorassigner.go L1069-1072; QuotaCheckStrategy BlockUndeclared
  is what Kueue runs with, cmd/kueue/main.go L730-736).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from tools.synth import Plan, manifest_of

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
# Kind -> its Kueue integration (configuration_types.go L536-557) and whether Kueue manages it as pods.
FRAMEWORKS = {
    "Job": ("batch/job", False),
    "JobSet": ("jobset.x-k8s.io/jobset", False),
    "Deployment": ("deployment", True),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io/leaderworkerset", True),
}


def kueue_configuration(plan: Plan) -> dict[str, Any]:
    """The Configuration the chart hands Kueue: the string value managerConfig.controllerManagerConfigYaml
    (charts/kueue/values.yaml L115-119, templates/manager/manager-config.yaml L26-37 @ v0.19.2)."""
    values = plan.get("kubernetes:helm.sh/v3:Release", "kueue")["inputs"]["values"]
    config: dict[str, Any] = yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])
    return config


def pod_templates(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]
    if obj["kind"] in ("Job", "Deployment"):
        return [spec["template"]]
    if obj["kind"] == "JobSet":
        return [job["template"]["spec"]["template"] for job in spec["replicatedJobs"]]
    lws = spec["leaderWorkerTemplate"]
    return [t for t in (lws.get("leaderTemplate"), lws["workerTemplate"]) if t is not None]


def requested(template: dict[str, Any]) -> set[str]:
    pod = template["spec"]
    containers = [*pod.get("initContainers", []), *pod["containers"]]
    return {name for c in containers for name in c.get("resources", {}).get("requests", {})}


def _selects(selector: dict[str, Any], namespace: str) -> bool:
    """A namespaceSelector of the only form the stack writes (matchExpressions on kubernetes.io/metadata.name)."""
    assert set(selector) == {"matchExpressions"}, selector
    for expression in selector["matchExpressions"]:
        assert expression["key"] == "kubernetes.io/metadata.name", expression
        inside = namespace in expression["values"]
        if inside != (expression["operator"] == "In"):
            return False
    return True


def seam_problems(plan: Plan, config: dict[str, Any] | None = None) -> Iterator[str]:
    """What keeps a queued workload of `plan` from ever being admitted (empty: nothing), with Kueue's Configuration
    `config` (default: the one the plan's release gives it)."""
    objects = [manifest_of(r) for r in plan.kubernetes_objects()]
    queued = [o for o in objects if QUEUE_LABEL in o["metadata"].get("labels", {})]
    if not queued:
        return
    config = config if config is not None else kueue_configuration(plan)
    excluded = config.get("resources", {}).get("excludeResourcePrefixes", [])
    local_queues = {
        (o["metadata"]["namespace"], o["metadata"]["name"]): o["spec"]["clusterQueue"]
        for o in objects
        if o["kind"] == "LocalQueue"
    }
    cluster_queues = {o["metadata"]["name"]: o["spec"] for o in objects if o["kind"] == "ClusterQueue"}
    for obj in queued:
        meta = obj["metadata"]
        at = f"{obj['kind']} {meta['namespace']}/{meta['name']}"
        framework, pod_based = FRAMEWORKS[obj["kind"]]
        if framework not in config["integrations"]["frameworks"]:
            yield f"{at}: integration {framework} is not enabled"
        if pod_based and not _selects(config["managedJobsNamespaceSelector"], meta["namespace"]):
            yield f"{at}: namespace {meta['namespace']} is outside managedJobsNamespaceSelector"
        cluster_queue = local_queues.get((meta["namespace"], meta["labels"][QUEUE_LABEL]))
        if cluster_queue is None:
            yield f"{at}: no LocalQueue {meta['labels'][QUEUE_LABEL]} in its namespace"
            continue
        spec = cluster_queues[cluster_queue]
        if not _selects(spec["namespaceSelector"], meta["namespace"]):
            yield f"{at}: ClusterQueue {cluster_queue} does not serve namespace {meta['namespace']}"
        covered = {r for group in spec["resourceGroups"] for r in group["coveredResources"]}
        asked = set().union(*(requested(template) for template in pod_templates(obj)))
        for resource in sorted(asked - covered):
            if not any(resource.startswith(prefix) for prefix in excluded):
                yield f"{at}: its pods request {resource}, which ClusterQueue {cluster_queue} does not cover"
