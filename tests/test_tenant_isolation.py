"""Issue 34 items 1, 2 and 10 (the Kubernetes side): what a training team, a tenant who may create pods and Jobs in
a workload namespace, can no longer reach of serving and of the nodes, and what KEDA may read.

Upstream facts, each cited where it is used: the keda chart's values and RBAC templates (kedacore/charts v2.20.2).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from components.k8s.keda import RESTRICTED_SECRETS
from tools.impact import predict
from tools.impact_rules import Action
from tools.synth import Plan
from tools.synth_diff import SynthPlan
from upstream_go import Upstream

KEDA_CHARTS = Upstream("kedacore/charts", "cbb9bb8ce0809dc9048f72302f7c09765d66ed56")  # tag v2.20.2
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
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
