"""Every label, selector, taint and toleration the stack writes obeys the Kubernetes API server's own rules, checked
by one implementation (schema/types.py label_key_problem, label_value_problem; the Toleration and GpuNodeTaint models)
before anything is declared (issue 24 item 8). The rules, as the API server has them (kubernetes/kubernetes master):

- staging/src/k8s.io/apimachinery/pkg/api/validate/content/kube.go IsLabelKey (util/validation IsQualifiedName and
  meta/v1/validation ValidateLabelName are it): `parts := strings.Split(value, "/")`; one part is a name, two are a
  prefix that must pass IsDNS1123Subdomain (dns.go: at most 253 characters of
  `[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*`) and a name; more is refused. The name:
  `labelKeyMaxLength int = 63`, `labelKeyFmt = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"`.
- kube.go IsLabelValue: `LabelValueMaxLength int = 63`, `labelValueFmt = "(" + labelKeyFmt + ")?"` (empty allowed).
- pkg/apis/core/validation/validation.go ValidatePodSpec: `unversionedvalidation.ValidateLabels(spec.NodeSelector,
  ...)`; validateNodeTaints: key ValidateLabelName, value IsValidLabelValue, effect validateTaintEffect, "taints must
  be unique by key and effect pair"; ValidateTolerations: key ValidateLabelName when set, "operator must be Exists
  when `key` is empty", "effect must be 'NoExecute' when `tolerationSeconds` is set", value IsValidLabelValue for
  Equal, "value must be empty when `operator` is 'Exists'".
- staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go ValidateAnnotations: each key IsQualifiedName of
  `strings.ToLower(k)`, and `TotalAnnotationSizeLimitB int = 256 * (1 << 10)` for keys and values together.
"""

from __future__ import annotations

from typing import Any

import pytest

from conftest import refusal
from k8s_validation import TOTAL_ANNOTATION_SIZE_LIMIT, declared_metadata, metadata_problems
from schema.bounds import MAX_TEXT
from schema.types import label_key_problem, label_value_problem

P = "rocm-stack:"


@pytest.mark.parametrize(
    "key, problem",
    [
        ("amd.com/gpu", None),
        ("feature.node.kubernetes.io/amd-gpu", None),
        ("example.com/MyName", None),  # kube.go's own example
        ("my.name", None),
        ("123-abc", None),
        ("dcm.amd.com/gpu-config-profile", None),
        ("Amd.com/gpu", "has the prefix 'Amd.com', which is no lowercase DNS subdomain"),  # uppercase DNS prefix
        ("amd_com/gpu", "has the prefix 'amd_com'"),
        ("-amd.com/gpu", "has the prefix '-amd.com'"),
        ("/gpu", "has an empty prefix before '/'"),
        ("amd.com/", "has an empty name"),
        ("a/b/c", "has more than one '/'"),
        ("a" * 254 + "/x", "has a prefix longer than 253 characters"),
        ("x" * 64, "has a name longer than 63 characters"),
        ("gpu type", "has the name 'gpu type', which is not letters, digits"),
        ("amd.com/-gpu", "has the name '-gpu'"),
    ],
)
def test_label_keys_follow_is_label_key(key, problem):
    found = label_key_problem(key)
    assert found == problem if problem is None else (found or "").startswith(problem), found


@pytest.mark.parametrize(
    "value, problem",
    [
        ("", None),  # labelValueFmt is optional as a whole
        ("MyValue", None),
        ("my_value", None),
        ("12345", None),  # kube.go's own examples
        ("a" * 63, None),
        ("a" * 64, "is longer than 63 characters"),
        ("has space", "must be empty or letters, digits"),
        ("present:NoSchedule", "must be empty or letters, digits"),
        ("-x", "must be empty or letters"),
        ("x_", "must be empty or letters"),
    ],
)
def test_label_values_follow_is_label_value(value, problem):
    found = label_value_problem(value)
    assert found == problem if problem is None else (found or "").startswith(problem), found


def _k8s(**kubernetes: Any) -> dict[str, Any]:
    return {P + "hosts": [], P + "kubernetes": kubernetes}


@pytest.mark.parametrize(
    "config, expected",
    [
        # The issue's case: a taint value with a space passed and the API server refused the DaemonSets' tolerations.
        (
            _k8s(gpuNodeTaints=[{"key": "amd.com/gpu", "value": "GPU node", "effect": "NoSchedule"}]),
            "kubernetes.gpuNodeTaints[0].value: 'GPU node' is no Kubernetes label value: it must be empty or letters",
        ),
        (
            _k8s(gpuNodeTaints=[{"key": "amd.com/gpu", "value": "x" * 64, "effect": "NoSchedule"}]),
            "kubernetes.gpuNodeTaints[0].value: '" + "x" * 64 + "' is no Kubernetes label value: it is longer than 63",
        ),
        (
            _k8s(gpuNodeTaints=[{"key": "AMD.com/gpu", "effect": "NoSchedule"}]),
            "kubernetes.gpuNodeTaints[0].key: 'AMD.com/gpu' is no Kubernetes label key: it has the prefix 'AMD.com'",
        ),
        (
            _k8s(
                gpuNodeTaints=[
                    {"key": "amd.com/gpu", "value": "a", "effect": "NoSchedule"},
                    {"key": "amd.com/gpu", "value": "b", "effect": "NoSchedule"},
                ]
            ),
            "kubernetes.gpuNodeTaints: amd.com/gpu:NoSchedule is given twice; Kubernetes keeps one taint per key and "
            "effect (validateNodeTaints)",
        ),
        (
            _k8s(mode="device-plugin", devicePlugin={"nodeSelector": {"kubernetes.io/arch": "amd 64"}}),
            "kubernetes.devicePlugin.nodeSelector.kubernetes.io/arch: 'amd 64' is no Kubernetes label value",
        ),
        (
            _k8s(gpuOperator={"deviceConfig": {"selector": {"Feature.node.kubernetes.io/amd-gpu": "true"}}}),
            "'Feature.node.kubernetes.io/amd-gpu' is no Kubernetes label key: it has the prefix",
        ),
        (
            _k8s(gpuOperator={"deviceConfig": {"configManager": {"selector": {"a/b/c": "x"}}}}),
            "'a/b/c' is no Kubernetes label key: it has more than one '/'",
        ),
        (
            _k8s(
                gpuOperator={"deviceConfig": {"metricsExporter": {"serviceMonitor": {"labels": {"release": "-kps"}}}}}
            ),
            "serviceMonitor.labels.release: '-kps' is no Kubernetes label value",
        ),
    ],
)
def test_kubernetes_values_the_api_server_would_refuse_are_refused_naming_key_and_rule(config, expected):
    message = refusal("dev", config)
    assert f"{P}{expected}" in message if expected.startswith("kubernetes") else expected in message, message


@pytest.mark.parametrize(
    "toleration, expected",
    [
        (
            {"key": "amd.com/gpu", "operator": "Exists", "value": "present"},
            "value must be empty when operator is Exists",
        ),
        ({"operator": "Equal", "value": "x"}, "operator must be Exists when `key` is empty"),
        (
            {"key": "amd.com/gpu", "effect": "NoSchedule", "tolerationSeconds": 60},
            "tolerationSeconds needs effect NoExecute",
        ),
        ({"key": "amd.com/gpu", "operator": "Equal", "value": "has space"}, "'has space' is no Kubernetes label value"),
        ({"key": "amd.com/GPU type"}, "'amd.com/GPU type' is no Kubernetes label key"),
    ],
)
def test_tolerations_follow_validate_tolerations(toleration, expected):
    training = {"name": "t", "kubernetes": {"nodes": 1, "tolerations": [toleration]}}
    message = refusal("dev", {P + "hosts": [], P + "kubernetes": {}, P + "training": [training]})
    assert f"{P}training[0].kubernetes.tolerations[0]" in message and expected in message, message


def test_node_selectors_and_pod_selectors_of_workloads_follow_validate_labels():
    inference = {
        "name": "s",
        "model": "m/m",
        "kubernetes": {"nodeSelector": {"amd.com/gpu.family": "AI "}, "clients": [{"app.kubernetes.io/name": "a b"}]},
    }
    message = refusal("dev", {P + "hosts": [], P + "kubernetes": {}, P + "inference": [inference]})
    assert f"{P}inference[0].kubernetes.nodeSelector.amd.com/gpu.family: 'AI ' is no Kubernetes label value" in message
    assert (
        f"{P}inference[0].kubernetes.clients[0].app.kubernetes.io/name: 'a b' is no Kubernetes label value" in message
    )


@pytest.mark.parametrize("plan", ["dev_plan", "prod_plan"])
def test_every_label_selector_annotation_and_toleration_the_plan_declares_passes_the_api_servers_rules(plan, request):
    resources = request.getfixturevalue(plan).resources
    found = declared_metadata([r["inputs"] for r in resources if r["type"].startswith("kubernetes:")])
    assert found["labels"] and found["tolerations"] and found["annotations"]
    assert metadata_problems(found) == []


def test_an_annotation_value_from_the_config_stays_under_the_total_annotation_size():
    """The one annotation whose value the config gives (Multus `k8s.v1.cni.cncf.io/networks`) is one text of at most
    MAX_TEXT characters, and the stack adds a sha256 beside it: together under TotalAnnotationSizeLimitB."""
    assert MAX_TEXT + len("k8s.v1.cni.cncf.io/networks") + 200 < TOTAL_ANNOTATION_SIZE_LIMIT
