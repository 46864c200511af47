"""The stack's ValidatingAdmissionPolicies (admissionregistration.k8s.io/v1, stable since Kubernetes 1.30: KEP-3488,
https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/): CEL the API server evaluates
on every matching request, refusing what fails (`validationActions: [Deny]`).

Serving trusts pod labels: the router discovers its replicas by label and hands each one the API key and clients'
prompts (router.py), the replicas' Service sends to every pod it selects, the ServiceMonitor scrapes them and KEDA
sums their queue. So in each namespace the stack serves from, a pod carrying serving's labels
(`app.kubernetes.io/managed-by: rocm-stack` with `app.kubernetes.io/name` vllm or vllm-router) is admitted only from
the controllers that create the stack's pods, and so on up the chain to objects only the stack declares:

- pods: the ReplicaSet controller (Deployments) or the StatefulSet controller (LeaderWorkerSet groups);
- ReplicaSets: the Deployment controller; StatefulSets: the LeaderWorkerSet controller;
- Deployments and LeaderWorkerSets: only the names the stack declares there.

The built-in controllers' user names: kube-controller-manager with `--use-service-account-credentials` runs each
controller as `system:serviceaccount:kube-system:<controller>`, otherwise all as `system:kube-controller-manager`
(https://kubernetes.io/docs/reference/access-authn-authz/rbac/#controller-roles). A pod or template that was
already serving's on UPDATE stays admissible (status, finalizers, the garbage collector's patches).

The expressions use CEL's core only (no Kubernetes library), so tests evaluate them as written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider

from schema.kubernetes import LWS_NAMESPACE
from components.k8s.admission import MANAGED_BY, admission_policy, bind, cel_list
from . import multinode
from .pods import app_labels
from .router import ROUTER_APP

SERVING_APPS = ("vllm", ROUTER_APP)
APP_NAME = "app.kubernetes.io/name"
CONTROLLER_MANAGER = "system:kube-controller-manager"


def controller(name: str) -> str:
    """A built-in controller's user name under --use-service-account-credentials."""
    return f"system:serviceaccount:kube-system:{name}"


# The LeaderWorkerSet controller's ServiceAccount: `{{ include "lws.fullname" . }}-controller-manager` in the
# release's namespace, fullname the release name when it contains the chart's (kubernetes-sigs/lws
# charts/lws/templates/rbac/serviceaccount.yaml, _helpers.tpl L13-24 @ v0.10.0; components/k8s/lws.py installs
# release `lws` in lws-system).
LWS_CONTROLLER = f"system:serviceaccount:{LWS_NAMESPACE}:lws-controller-manager"
POD_CREATORS = (controller("replicaset-controller"), controller("statefulset-controller"), CONTROLLER_MANAGER)
REPLICA_SET_CREATORS = (controller("deployment-controller"), CONTROLLER_MANAGER)
STATEFUL_SET_CREATORS = (LWS_CONTROLLER,)


def serving(meta: str) -> str:
    """CEL: the object metadata at path `meta` (present) carries serving's labels."""
    labels = f"{meta}.labels"
    owner = app_labels("vllm")[MANAGED_BY]
    return (
        f"(has({labels}) && '{MANAGED_BY}' in {labels} && {labels}['{MANAGED_BY}'] == '{owner}' && "
        f"'{APP_NAME}' in {labels} && {labels}['{APP_NAME}'] in {cel_list(SERVING_APPS)})"
    )


def _template(root: str, path: str) -> str:
    """CEL: the pod template at `root.path` (whose parents are required fields) is serving's."""
    return f"(has({root}.{path}.metadata) && {serving(f'{root}.{path}.metadata')})"


def _by(creators: Sequence[str]) -> str:
    return f"request.userInfo.username in {cel_list(creators)}"


def _kept(judged: str) -> str:
    """CEL: an UPDATE of what was already serving's."""
    return f"(request.operation == 'UPDATE' && {judged.replace('object.', 'oldObject.')})"


def serving_validations(names: Mapping[str, Sequence[str]]) -> list[tuple[str, str, str]]:
    """(resource, CEL expression, message) of the serving policy; `names`: resource -> the names the stack declares
    (deployments, leaderworkersets)."""
    pod = serving("object.metadata")
    replica_set = _template("object.spec", "template")
    lws = (
        f"({_template('object.spec.leaderWorkerTemplate', 'workerTemplate')} || "
        f"(has(object.spec.leaderWorkerTemplate.leaderTemplate) && "
        f"{_template('object.spec.leaderWorkerTemplate', 'leaderTemplate')}))"
    )

    def rule(resource: str, judged: str, allowed: str) -> str:
        return f"request.resource.resource != '{resource}' || !{judged} || {allowed}"

    deployments, sets = (cel_list(names.get(r, ())) for r in ("deployments", "leaderworkersets"))
    table = (
        (
            "pods",
            pod,
            f"{_kept(pod)} || {_by(POD_CREATORS)}",
            "a pod with serving's labels is created only by the ReplicaSet or StatefulSet controller",
        ),
        (
            "replicasets",
            replica_set,
            f"{_kept(replica_set)} || {_by(REPLICA_SET_CREATORS)}",
            "a ReplicaSet of serving's pods is created only by the Deployment controller",
        ),
        (
            "statefulsets",
            replica_set,
            f"{_kept(replica_set)} || {_by(STATEFUL_SET_CREATORS)}",
            "a StatefulSet of serving's pods is created only by the LeaderWorkerSet controller",
        ),
        (
            "deployments",
            replica_set,
            f"object.metadata.name in {deployments}",
            "a Deployment of serving's pods is only one the stack declares",
        ),
        (
            "leaderworkersets",
            lws,
            f"object.metadata.name in {sets}",
            "a LeaderWorkerSet of serving's pods is only one the stack declares",
        ),
    )
    return [(resource, rule(resource, judged, allowed), message) for resource, judged, allowed, message in table]


SERVING_RESOURCES = (
    ("", "pods"),
    ("apps", "replicasets"),
    ("apps", "statefulsets"),
    ("apps", "deployments"),
    (multinode.LWS_API_VERSION.split("/")[0], "leaderworkersets"),
)


@dataclass(frozen=True)
class ServingPolicyArgs:
    provider: Provider
    namespaces: Sequence[str]
    """The namespaces the stack serves from."""
    names: Mapping[str, Sequence[str]]
    """Resource -> the names the stack declares there (serving_validations)."""
    depends_on: Sequence[pulumi.Resource] = ()


class ServingPolicy(pulumi.ComponentResource):
    """The serving policy and its binding to the serving namespaces."""

    def __init__(self, name: str, args: ServingPolicyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:workloads:ServingPolicy", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        groups: dict[str, list[str]] = {}
        for group, resource in SERVING_RESOURCES:
            groups.setdefault(group, []).append(resource)
        validations = [(expression, message) for _, expression, message in serving_validations(args.names)]
        self.policy = admission_policy(
            name, {group: sorted(resources) for group, resources in groups.items()}, validations, child
        )
        self.binding = bind(name, self.policy, args.namespaces, child, args.depends_on)
        self.register_outputs({"policy": self.policy.metadata.name})
