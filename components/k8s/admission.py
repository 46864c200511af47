"""What the stack's ValidatingAdmissionPolicies share (admissionregistration.k8s.io/v1, stable since Kubernetes 1.30:
KEP-3488, https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/), and the pod policy of
a privileged workload namespace: Pod Security Admission enforces nothing there
(https://kubernetes.io/docs/concepts/security/pod-security-standards/, privileged: "Unrestricted policy"), so the
API server evaluates this CEL instead, admitting baseline plus exactly the stack's own exceptions in that namespace.
The expressions use CEL's core only (no Kubernetes library), so tests evaluate them as written (tests/admission_cel.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.admissionregistration import v1 as admission_v1
from pulumi_kubernetes.meta import v1 as meta_v1

import rules

# Set by the API server on every namespace (since 1.22).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"
MANAGED_BY = "app.kubernetes.io/managed-by"


def cel_list(values: Iterable[str]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def bind(
    name: str,
    policy: admission_v1.ValidatingAdmissionPolicy,
    namespaces: Sequence[str],
    opts: pulumi.ResourceOptions,
    depends_on: Sequence[pulumi.Resource],
) -> admission_v1.ValidatingAdmissionPolicyBinding:
    """`policy` enforced (Deny) in `namespaces`, by the name label the API server sets on every namespace."""
    return admission_v1.ValidatingAdmissionPolicyBinding(
        f"{name}-binding",
        metadata=meta_v1.ObjectMetaArgs(name=name, labels={MANAGED_BY: "rocm-stack"}),
        spec=admission_v1.ValidatingAdmissionPolicyBindingSpecArgs(
            policy_name=policy.metadata.name,
            validation_actions=["Deny"],
            match_resources=admission_v1.MatchResourcesArgs(
                namespace_selector=meta_v1.LabelSelectorArgs(
                    match_expressions=[
                        meta_v1.LabelSelectorRequirementArgs(
                            key=NAMESPACE_NAME_LABEL, operator="In", values=sorted(namespaces)
                        )
                    ]
                )
            ),
        ),
        opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=list(depends_on))),
    )


# --- Pod Security beyond baseline: exactly the stack's exceptions ---------------------------------------------------

_CONTAINERS = (
    "(object.spec.containers"
    " + (has(object.spec.initContainers) ? object.spec.initContainers : [])"
    " + (has(object.spec.ephemeralContainers) ? object.spec.ephemeralContainers : []))"
)


def pod_validations(needs: rules.PodNeeds) -> list[tuple[str, str]]:
    """(CEL expression, message) admitting a pod of a privileged workload namespace only within Pod Security's
    baseline plus exactly the stack's own needs there (`needs`: its workloads' capabilities, hostPath directories,
    hostNetwork): no privileged container, no other capability, hostPath, host namespace or host port."""
    capabilities = sorted(rules.BASELINE_CAPABILITIES | needs.capabilities)
    host_network = "" if needs.host_network else " && (!has(object.spec.hostNetwork) || !object.spec.hostNetwork)"
    return [
        (
            f"{_CONTAINERS}.all(c, !has(c.securityContext) || !has(c.securityContext.privileged)"
            " || !c.securityContext.privileged)",
            "no privileged container",
        ),
        (
            f"{_CONTAINERS}.all(c, !has(c.securityContext) || !has(c.securityContext.capabilities)"
            " || !has(c.securityContext.capabilities.add)"
            f" || c.securityContext.capabilities.add.all(a, a in {cel_list(capabilities)}))",
            f"capabilities added only from {', '.join(capabilities)}",
        ),
        (
            "!has(object.spec.volumes) || object.spec.volumes.all(v, !has(v.hostPath)"
            f" || v.hostPath.path in {cel_list(sorted(needs.host_paths))})",
            f"hostPath volumes only of {', '.join(sorted(needs.host_paths)) or 'none'}",
        ),
        (
            "(!has(object.spec.hostPID) || !object.spec.hostPID) && (!has(object.spec.hostIPC) || !object.spec.hostIPC)"
            + host_network,
            "no host namespace" + ("" if needs.host_network else "s (hostNetwork, hostPID, hostIPC)"),
        ),
        (
            f"{_CONTAINERS}.all(c, !has(c.ports) || c.ports.all(p, !has(p.hostPort) || p.hostPort == 0))",
            "no hostPort",
        ),
    ]


@dataclass(frozen=True)
class PodPolicyArgs:
    provider: Provider
    namespace: str
    needs: rules.PodNeeds
    depends_on: Sequence[pulumi.Resource] = ()


def admission_policy(
    name: str,
    resources: Mapping[str, Sequence[str]],
    validations: Sequence[tuple[str, str]],
    opts: pulumi.ResourceOptions,
) -> admission_v1.ValidatingAdmissionPolicy:
    """A policy judging CREATE and UPDATE of `resources` (API group -> resources) by `validations` ((CEL, message),
    every one must hold), failing closed."""
    return admission_v1.ValidatingAdmissionPolicy(
        name,
        metadata=meta_v1.ObjectMetaArgs(name=name, labels={MANAGED_BY: "rocm-stack"}),
        spec=admission_v1.ValidatingAdmissionPolicySpecArgs(
            failure_policy="Fail",
            match_constraints=admission_v1.MatchResourcesArgs(
                resource_rules=[
                    admission_v1.NamedRuleWithOperationsArgs(
                        api_groups=[group], api_versions=["*"], resources=list(names), operations=["CREATE", "UPDATE"]
                    )
                    for group, names in sorted(resources.items())
                ]
            ),
            validations=[
                admission_v1.ValidationArgs(expression=expression, message=message, reason="Forbidden")
                for expression, message in validations
            ],
        ),
        opts=opts,
    )


class PodPolicy(pulumi.ComponentResource):
    """A privileged workload namespace's policy and binding: Pod Security admits everything there, this admits
    baseline and the stack's exceptions."""

    def __init__(self, name: str, args: PodPolicyArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:PodPolicy", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        self.policy = admission_policy(
            name, {"": ["pods", "pods/ephemeralcontainers"]}, pod_validations(args.needs), child
        )
        bind(name, self.policy, [args.namespace], child, args.depends_on)
        self.register_outputs({"policy": self.policy.metadata.name})
