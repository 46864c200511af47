"""The stack's ValidatingAdmissionPolicies evaluated as the API server evaluates them, on requests built as the API
server builds them (https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/): a request
is judged when a binding's namespaceSelector and the policy's matchConstraints match it; each validation's CEL
expression sees `object`, `oldObject` (null on CREATE) and `request` (operation, userInfo, resource, namespace); the
request is refused with the message of every expression that is false. CEL by cel-python (celpy): the policies use
CEL's core only (components/workloads/admission.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import celpy

_ENV = celpy.Environment()


def request(
    operation: str,
    group: str,
    resource: str,
    obj: Mapping[str, Any],
    username: str,
    namespace: str,
    old: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview's request and its objects."""
    return {
        "request": {
            "operation": operation,
            "userInfo": {"username": username},
            "resource": {"group": group, "version": "v1", "resource": resource},
            "namespace": namespace,
        },
        "object": obj,
        "oldObject": old,
    }


def _matches(policy: Mapping[str, Any], binding: Mapping[str, Any], review: Mapping[str, Any]) -> bool:
    req = review["request"]
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    matched = any(
        req["resource"]["group"] in r["apiGroups"]
        and req["resource"]["resource"] in r["resources"]
        and req["operation"] in r["operations"]
        for r in rules
    )
    selector = binding["spec"]["matchResources"].get("namespaceSelector", {})
    for expression in selector.get("matchExpressions", []):
        assert expression["key"] == "kubernetes.io/metadata.name" and expression["operator"] == "In"
        matched = matched and req["namespace"] in expression["values"]
    return matched


def refusals(policy: Mapping[str, Any], binding: Mapping[str, Any], review: Mapping[str, Any]) -> list[str]:
    """The messages the API server refuses `review` with (none: admitted)."""
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"] and policy["spec"]["failurePolicy"] == "Fail"
    if not _matches(policy, binding, review):
        return []
    activation = {key: celpy.json_to_cel(value) for key, value in review.items()}
    failed = []
    for validation in policy["spec"]["validations"]:
        result = _ENV.program(_ENV.compile(validation["expression"])).evaluate(activation)
        assert isinstance(result, celpy.celtypes.BoolType), (validation["expression"], result)
        if not result:
            failed.append(validation["message"])
    return failed
