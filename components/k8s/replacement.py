"""Which changes of a Kubernetes object the API server refuses to apply in place, and what `pulumi up` does instead.

Two tables, one definition each:
- K8S_FORCE_NEW: the paths pulumi-kubernetes itself replaces an object for (its diff.go), per kind.
- IMMUTABLE: every field of a kind the stack renders that the API server's update validation, the CRD's CEL rule
  (`self == oldSelf`) or an admission webhook refuses to change, each row with its source. A row the provider does
  not already replace becomes the object's replaceOnChanges (`replacement()`), with deleteBeforeReplace where its
  name is fixed: pulumi-kubernetes asks for a delete first only for its own replacements (provider.go Diff
  L1645-1658: `len(replaces) > 0`), and a create-first replacement under the same name fails ("already exists",
  provider/pkg/await/await.go L276-286).
`rocm-stack diff` (tools/impact.py) reads the same tables: a change under a row the object does not replace is a
refusal, `pulumi up` fails at that object. MUTABLE_KINDS are the rendered kinds with no such field (name and
namespace aside, which every kind keeps). tests/test_k8s_immutable.py holds the sweep: every kind the stack renders is
in one of the two, every `oldSelf` rule of a vendored CRD is under a row, and every row is replaced in the plans
(by the provider or by replaceOnChanges) or left refused on purpose.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pulumi

from schema.queues import KUEUE_QUEUE_LABEL

# --- pulumi-kubernetes: the paths whose change replaces an object, per kind -----------------------------------
# pulumi/pulumi-kubernetes provider/pkg/provider/diff.go @ 94977969d64112b04e19945818a7d5d5f38f631d (July 2026,
# after v4.32.0; the file is unchanged since February 2026; the program pins the SDK 4.34.2).
# (apiVersion group, kind) -> paths; `[*]` is any element. metadata.name/namespace apply to every kind.
_CONTAINER_PATHS = tuple(
    f"{prefix}.{field}"
    for prefix in (".spec.containers[*]", ".spec.initContainers[*]")
    for field in (
        "args command env env.value image imagePullPolicy lifecycle livenessProbe ports readinessProbe resources "
        "securityContext stdin stdinOnce terminationMessagePath terminationMessagePolicy tty volumeDevices "
        "volumeMounts workingDir"
    ).split()
)  # diff.go containerForceNewProperties L214-241
_SELECTOR = tuple(
    ".spec.selector" + suffix
    for suffix in ("", ".matchExpressions", ".matchExpressions.key", ".matchExpressions.operator")
    + (".matchExpressions.values", ".matchLabels")
)  # diff.go labelSelectorForceNewProperties L243-251

K8S_FORCE_NEW: dict[tuple[str, str], tuple[tuple[str, ...], str]] = {
    ("apps", "Deployment"): (_SELECTOR, "diff.go L171-176 (var deployment)"),
    ("apps", "DaemonSet"): (_SELECTOR, "diff.go L164-169 (var daemonset)"),
    ("apps", "StatefulSet"): (
        (".spec.podManagementPolicy", ".spec.revisionHistoryLimit", ".spec.serviceName", ".spec.volumeClaimTemplates")
        + _SELECTOR,
        "diff.go L196-205 (var statefulSet)",
    ),
    ("batch", "Job"): (
        (".spec.completions", ".spec.parallelism", ".spec.template") + _SELECTOR,
        "diff.go L178-186 (var job)",
    ),
    ("", "PersistentVolumeClaim"): (
        (".spec.accessModes", ".spec.storageClassName", ".spec.volumeName") + _SELECTOR,
        "diff.go L111-118",
    ),
    ("", "Pod"): (
        tuple(
            ".spec." + field
            for field in (
                "affinity automountServiceAccountToken dnsConfig dnsPolicy enableServiceLinks hostAliases hostIPC "
                "hostNetwork hostPID hostname imagePullSecrets nodeName nodeSelector overhead preemptionPolicy "
                "priority priorityClassName readinessGates restartPolicy runtimeClassName schedulerName "
                "securityContext serviceAccount serviceAccountName shareProcessNamespace subdomain "
                "terminationGracePeriodSeconds volumes"
            ).split()
        )
        + _CONTAINER_PATHS,
        "diff.go L119-151",
    ),
    ("", "Service"): ((".spec.clusterIP",), "diff.go L158-160"),
    ("", "Secret"): ((".type", ".stringData", ".data"), "diff.go L28-30"),
    ("", "ConfigMap"): ((".binaryData", ".data"), "diff.go L32-34"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): ((".roleRef",), "diff.go L192-194 (var roleBinding)"),
    ("rbac.authorization.k8s.io", "RoleBinding"): ((".roleRef",), "diff.go L192-194 (var roleBinding)"),
    ("storage.k8s.io", "StorageClass"): ((".parameters", ".provisioner"), "diff.go L72-75"),
}
# Not listed (only their name and namespace replace them): policy/v1 PodDisruptionBudget (diff.go lists v1beta1 only),
# Namespace, every custom resource (DeviceConfig, JobSet, ServiceMonitor, PrometheusRule).


# --- what the API server refuses to change -------------------------------------------------------------------

K8S = "kubernetes/kubernetes @ 00447344aba0 (2026)"
KUEUE = "kubernetes-sigs/kueue @ v0.19.2"
JOBSET = "kubernetes-sigs/jobset @ v0.12.0"
LWS = "kubernetes-sigs/lws @ v0.10.0"
CORE_VALIDATION = "kubernetes/kubernetes pkg/apis/core/validation/validation.go"
LWS_WEBHOOK = "pkg/controller/jobs/leaderworkerset/leaderworkerset_webhook.go"
QUEUE_NAME = f'metadata.labels["{KUEUE_QUEUE_LABEL}"]'


@dataclass(frozen=True)
class Immutable:
    group: str  # the API group ("" for core)
    kind: str
    path: str  # a Pulumi property path (what replaceOnChanges takes), from the object's top
    source: str  # who refuses the change, where: repository @ tag, file, lines
    # Immutable only where the object sets this path: the live one for a CRD's `has(oldSelf.x)`, the declared one
    # for what Kueue manages (its webhooks judge the object a queue-name makes theirs).
    when: str = ""
    refused: Literal["any change", "a decrease"] = "any change"
    replaced: bool = True  # False: the program leaves the change refused, for the reason in `note`
    note: str = ""


_I = Immutable

IMMUTABLE: tuple[Immutable, ...] = (
    _I("scheduling.k8s.io", "PriorityClass", "value", f"{K8S} pkg/apis/scheduling/validation/validation.go L57-63"),
    _I(
        "scheduling.k8s.io",
        "PriorityClass",
        "preemptionPolicy",
        f"{K8S} pkg/apis/scheduling/validation/validation.go L64-65 (ValidateImmutableField)",
    ),
    _I(
        "kueue.x-k8s.io",
        "LocalQueue",
        "spec.clusterQueue",
        f"{KUEUE} config/components/crd/bases/kueue.x-k8s.io_localqueues.yaml L467-475 (CEL `self == oldSelf`)",
    ),
    _I(
        "kueue.x-k8s.io",
        "ClusterQueue",
        "spec.concurrentAdmissionPolicy",
        f"{KUEUE} pkg/webhooks/clusterqueue_webhook.go L102-110 (ValidateClusterQueueUpdate)",
    ),
    *(
        _I(
            "kueue.x-k8s.io",
            "ResourceFlavor",
            f"spec.{field}",
            f"{KUEUE} config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml L373-381 (CEL on oldSelf)",
            when="spec.topologyName",
        )
        for field in ("nodeLabels", "tolerations", "topologyName")
    ),
    *(
        _I(
            group,
            kind,
            QUEUE_NAME,
            f"{KUEUE} pkg/controller/jobframework/validation.go L179-183 (a job that is not suspended)",
        )
        for group, kind in (("batch", "Job"), ("jobset.x-k8s.io", "JobSet"))
    ),
    # A queued Deployment's or LeaderWorkerSet's queue-name may not change once a replica is ready (nor ever be
    # removed); a queued LeaderWorkerSet's pods' shape (SpecShape: each container's requests and ports, placement,
    # runtime class, overhead, claims) and its group size are fixed while Kueue manages it.
    *(
        _I(group, kind, QUEUE_NAME, f"{KUEUE} {webhook} (ready replicas, or the queue-name removed)", when=QUEUE_NAME)
        for group, kind, webhook in (
            ("apps", "Deployment", "pkg/controller/jobs/deployment/deployment_webhook.go L151-154"),
            ("leaderworkerset.x-k8s.io", "LeaderWorkerSet", f"{LWS_WEBHOOK} L185-191"),
        )
    ),
    _I(
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        "spec.leaderWorkerTemplate.size",
        f"{KUEUE} {LWS_WEBHOOK} L225-232 (LWSImmutableGroupSize: beta, on since v0.19)",
        when=QUEUE_NAME,
    ),
    *(
        _I(
            "leaderworkerset.x-k8s.io",
            "LeaderWorkerSet",
            f"spec.leaderWorkerTemplate.{template}.spec.{field}",
            f"{KUEUE} {LWS_WEBHOOK} L213-224 (validateImmutablePodTemplateSpec; pkg/util/pod/pod.go L147-178 SpecShape)",
            when=QUEUE_NAME,
        )
        for template in ("leaderTemplate", "workerTemplate")
        for field in (
            "containers[*].resources",
            "containers[*].ports",
            "initContainers[*].resources",
            "initContainers[*].ports",
            "nodeSelector",
            "affinity",
            "tolerations",
            "topologySpreadConstraints",
            "runtimeClassName",
            "overhead",
            "resourceClaims",
        )
    ),
    *(
        _I("batch", "Job", f"spec.{field}", f"{K8S} pkg/apis/batch/validation/validation.go ValidateJobSpecUpdate")
        for field in (
            "selector template completions completionMode podFailurePolicy backoffLimitPerIndex managedBy successPolicy"
        ).split()
    ),
    *(
        _I(
            "jobset.x-k8s.io",
            "JobSet",
            f"spec.{field}",
            f"{JOBSET} config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml (CEL `self == oldSelf`)",
        )
        for field in ("failurePolicy", "network", "startupPolicy", "successPolicy", "volumeClaimPolicies")
    ),
    _I(
        "jobset.x-k8s.io",
        "JobSet",
        "spec.replicatedJobs",
        f"{JOBSET} pkg/webhooks/jobset_webhook.go L395 (ValidateUpdate; only a suspended JobSet's pod scheduling "
        "fields may change, L371-392)",
    ),
    _I("jobset.x-k8s.io", "JobSet", "spec.managedBy", f"{JOBSET} pkg/webhooks/jobset_webhook.go L396"),
    _I(
        "leaderworkerset.x-k8s.io",
        "LeaderWorkerSet",
        "spec.leaderWorkerTemplate.subGroupPolicy",
        f"{LWS} pkg/webhooks/leaderworkerset_webhook.go L102-110 (subGroupSize: no change, no adding, no removing)",
    ),
    *(
        _I("apps", kind, "spec.selector", f"{K8S} pkg/apis/apps/validation/validation.go Validate{kind}Update")
        for kind in ("Deployment", "DaemonSet")
    ),
    *(
        _I("rbac.authorization.k8s.io", kind, "roleRef", f"{K8S} pkg/apis/rbac/validation/validation.go")
        for kind in ("RoleBinding", "ClusterRoleBinding")
    ),
    _I("", "Service", "spec.clusterIP", f"{CORE_VALIDATION} ValidateServiceUpdate (clusterIPs[0] may not change)"),
    _I("", "Secret", "type", f"{CORE_VALIDATION} ValidateSecretUpdate"),
    *(
        _I(
            "",
            kind,
            path,
            f"{CORE_VALIDATION} Validate{kind}Update (field is immutable when `immutable` is set)",
            when="immutable",
        )
        for kind, paths in (("Secret", ("data", "stringData")), ("ConfigMap", ("data", "binaryData")))
        for path in paths
    ),
    *(
        _I(
            "",
            kind,
            "immutable",
            f"{CORE_VALIDATION} Validate{kind}Update (`immutable` may not be unset once true)",
            when="immutable",
            replaced=autonamed,
            note=""
            if autonamed
            else "the stack's immutable ConfigMaps are named after their content and replaced create-first (the "
            "pods move to the new name before the old one goes); a delete-first replacement would pull their files "
            "from under running pods",
        )
        for kind, autonamed in (("Secret", True), ("ConfigMap", False))
    ),
    *(
        _I("", "PersistentVolumeClaim", f"spec.{field}", f"{CORE_VALIDATION} ValidatePersistentVolumeClaimUpdate")
        for field in ("accessModes", "storageClassName", "volumeName", "selector", "volumeMode", "dataSource")
    ),
    _I(
        "",
        "PersistentVolumeClaim",
        "spec.resources.requests.storage",
        f'{CORE_VALIDATION} ValidatePersistentVolumeClaimUpdate ("field can not be less than status.capacity")',
        refused="a decrease",
        replaced=False,
        note="a replacement would delete the claim and its volume, with the checkpoints or the model cache on it; "
        "a larger size is expanded in place where the StorageClass has allowVolumeExpansion",
    ),
)

# Rendered kinds whose every field other than metadata.name/namespace may change in place.
MUTABLE_KINDS: dict[tuple[str, str], str] = {
    ("", "Namespace"): f"{CORE_VALIDATION} ValidateNamespaceUpdate (spec.finalizers only through /finalize)",
    ("", "ServiceAccount"): f"{CORE_VALIDATION} ValidateServiceAccountUpdate (object metadata only)",
    ("networking.k8s.io", "NetworkPolicy"): f"{K8S} pkg/apis/networking/validation/validation.go "
    "ValidateNetworkPolicyUpdate (the spec is validated, not compared)",
    ("policy", "PodDisruptionBudget"): f"{K8S} pkg/apis/policy/validation/validation.go "
    "(policy/v1: the spec is mutable)",
    ("rbac.authorization.k8s.io", "Role"): f"{K8S} pkg/apis/rbac/validation/validation.go ValidateRoleUpdate",
    ("rbac.authorization.k8s.io", "ClusterRole"): f"{K8S} pkg/apis/rbac/validation/validation.go "
    "ValidateClusterRoleUpdate",
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"): f"{K8S} pkg/apis/admissionregistration/"
    "validation/validation.go ValidateValidatingAdmissionPolicyUpdate (the new spec is validated, not compared)",
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"): f"{K8S} pkg/apis/admissionregistration/"
    "validation/validation.go ValidateValidatingAdmissionPolicyBindingUpdate (the new spec is validated, not compared)",
    ("amd.com", "DeviceConfig"): "ROCm/gpu-operator @ v1.5.1 helm-charts-k8s/crds/deviceconfig-crd.yaml (no oldSelf "
    "rule; no validating webhook in the chart)",
    ("monitoring.coreos.com", "ServiceMonitor"): "prometheus-operator's CRD (no oldSelf rule)",
    ("monitoring.coreos.com", "PrometheusRule"): "prometheus-operator's CRD (no oldSelf rule; its webhook checks "
    "the rules' syntax)",
    ("keda.sh", "ScaledObject"): "kedacore/keda @ v2.20.2 config/crd/bases/keda.sh_scaledobjects.yaml (no oldSelf "
    "rule); its webhook refuses a second scaler of one workload (keda.sh/docs/2.20/concepts/admission-webhooks)",
}


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def path_parts(path: str) -> list[str]:
    """A Pulumi property path's parts: `a.b["c.d"].e[*].f` is a, b, c.d, e, *, f."""
    return [next(filter(None, groups)) for groups in re.findall(r'\["([^"]*)"\]|\[(\*)\]|([^.\[]+)', path)]


def value_at(inputs: Mapping[str, Any], path: str) -> Any:
    """The value at a property path of `inputs` (under `[*]`, the first element's); None where there is none."""
    value: Any = inputs
    for part in path_parts(path):
        if part == "*":
            value = value[0] if isinstance(value, list) and value else None
        else:
            value = value.get(part) if isinstance(value, Mapping) else None
    return value


def rows(api_version: str, kind: str, live: Mapping[str, Any]) -> list[Immutable]:
    """The rows of a kind that hold for an object whose (live, old) inputs are `live`."""
    group = group_of(api_version)
    return [r for r in IMMUTABLE if (r.group, r.kind) == (group, kind) and (not r.when or value_at(live, r.when))]


def provider_replaces(group: str, kind: str, path: str) -> bool:
    """pulumi-kubernetes replaces the object for a change at `path` (one of its listed paths, or under one)."""
    listed, _ = K8S_FORCE_NEW.get((group, kind), ((), ""))
    return any(path == p.lstrip(".") or path.startswith(p.lstrip(".") + ".") for p in listed)


def replace_on_changes(api_version: str, kind: str, declared: Mapping[str, Any]) -> list[str]:
    """The paths of `declared` (the object's inputs, as the plan shows them) the program must declare replaceOnChanges."""
    group = group_of(api_version)
    return [
        r.path
        for r in rows(api_version, kind, declared)
        if r.replaced and r.refused == "any change" and not provider_replaces(group, kind, r.path)
    ]


def replacement(
    api_version: str, kind: str, declared: Mapping[str, Any] | None = None, *, fixed_name: bool = True
) -> pulumi.ResourceOptions:
    """The resource options that replace an object where the API server would refuse the update: replaceOnChanges
    of its immutable paths, deleting the old object first where the new one takes the same name."""
    paths = replace_on_changes(api_version, kind, declared or {})
    # None, not False, where nothing is replaced: merged after other options it must not undo their deleteBeforeReplace.
    return pulumi.ResourceOptions(
        replace_on_changes=paths or None, delete_before_replace=True if paths and fixed_name else None
    )
