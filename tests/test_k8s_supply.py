"""What the Kubernetes layer needs from outside, and where it puts it (issue 33 items 4 and 7): the kube-prometheus-stack
CRDs follow the chart version, and every release and namespaced object lands in a namespace that exists.

Upstream facts are read from the upstream sources `make upstream` fetches at the commits below (tests/upstream_go.py: skipped where a mirror
is absent; the citations still pin the facts).
"""

from __future__ import annotations

import re
import subprocess
from typing import Any

import pytest

from components.monitoring import MONITORING_NAMESPACE, MONITORING_NAMESPACE_CHECK
from schema.monitoring import (
    KUBE_PROMETHEUS_STACK_CHART_VERSION,
    KUBE_PROMETHEUS_STACK_CRD_FILES,
    KUBE_PROMETHEUS_STACK_CRD_MAJORS,
    KUBE_PROMETHEUS_STACK_CRD_URL,
)
from tools.impact import predict
from tools.impact_rules import Action
from tools.synth import Plan, synthesize
from tools.synth_diff import SynthPlan
from conftest import refusal, stack_file
from k8s_namespaces import namespace_problems
from test_k8s_day2_crds import CONFIG_FILE, RELEASE, lines
from upstream_go import Upstream, git_dir

KPS_88_5_3 = Upstream("prometheus-community/helm-charts", "ea930baeebeba39f56d6b44e351f23b2a072a600")  # tag
KPS_87_21_0 = Upstream("prometheus-community/helm-charts", "2017b1a385179833e2948de2c35625abde38b826")  # tag
HELM = Upstream("helm/helm", "8fb76d6ab555577e98e23b7500009537a471feee")  # tag v3.20.2, pulumi-kubernetes' Helm
PULUMI_K8S = Upstream("pulumi/pulumi-kubernetes", "94977969d64112b04e19945818a7d5d5f38f631d")  # after v4.32.0

CHART = "charts/kube-prometheus-stack"
CRDS = f"{CHART}/charts/crds/crds"
KPS = "monitoring-kube-prometheus-stack"
OLD = "87.21.0"


def with_kps(stack: str, **kps: Any) -> Plan:
    config = stack_file(stack)
    config.setdefault("rocm-stack:monitoring", {})["kubePrometheusStack"] = {"install": True, **kps}
    return synthesize(stack, config)


# --- item 4: kube-prometheus-stack's CRDs ----------------------------------------------------------------------------


def test_helm_never_upgrades_the_crds_of_kube_prometheus_stacks_crds_subchart():
    # The chart says so, and its own upgrade Job is off and "in preview" (values.yaml L33-43 @ 88.5.3) ...
    assert "CRDs created by this chart are not updated by default" in lines(KPS_88_5_3, f"{CHART}/README.md", 86, 86)
    job = lines(KPS_88_5_3, f"{CHART}/values.yaml", 33, 43)
    assert "crds:\n  enabled: true" in job and "upgradeJob:\n    enabled: false" in job
    assert "This feature is in preview, off by default and may change in the future." in job
    # ... its CRDs are the crds/ of the `crds` dependency (Chart.yaml L51-53) ...
    assert '- name: crds\n    version: "0.0.0"\n    condition: crds.enabled' in lines(
        KPS_88_5_3, f"{CHART}/Chart.yaml", 51, 53
    )
    # ... which Helm installs with the parent's on install only (CRDObjects walks the dependencies), skips with
    # SkipCRDs, and never applies on upgrade (upgrade.go has no CRD step but the flag it passes to an install).
    assert "// Get CRDs from dependencies, too." in lines(HELM, "pkg/chart/chart.go", 163, 163)
    assert "!i.SkipCRDs && len(crds) > 0" in lines(HELM, "pkg/action/install.go", 261, 261)
    assert [line for line in HELM.read("pkg/action/upgrade.go").decode().splitlines() if "CRD" in line] == [
        "\t// SkipCRDs skips installing CRDs when install flag is enabled during upgrade",
        "\tSkipCRDs bool",
    ]
    # The CRDs changed between the versions of the bump below: a bump that left them would be wrong.
    assert KPS_88_5_3.read(f"{CRDS}/crd-prometheuses.yaml") != KPS_87_21_0.read(f"{CRDS}/crd-prometheuses.yaml")


def test_the_crd_files_are_those_of_every_chart_version_the_stack_accepts():
    """Every tag of majors 84 to 88 (91 tags, 84.0.0 to 88.5.3) carries exactly these files."""
    repository = git_dir(
        "prometheus-community/helm-charts", f"kube-prometheus-stack-{KUBE_PROMETHEUS_STACK_CHART_VERSION}"
    )
    git = ["git", f"--git-dir={repository}", "ls-tree", "--name-only"]
    found = subprocess.run(
        ["git", f"--git-dir={repository}", "tag", "--list", "kube-prometheus-stack-8*"],
        capture_output=True,
        text=True,
        check=True,
    )
    tags = [t for t in found.stdout.split() if t.count(".") == 2]
    checked = [t for t in tags if int(t.rsplit("-", 1)[1].split(".")[0]) in KUBE_PROMETHEUS_STACK_CRD_MAJORS]
    assert f"kube-prometheus-stack-{KUBE_PROMETHEUS_STACK_CHART_VERSION}" in checked and len(checked) == 91
    for tag in checked:
        listed = subprocess.run([*git, tag, f"{CRDS}/"], capture_output=True, text=True, check=True).stdout.split()
        assert tuple(path.rsplit("/", 1)[1] for path in listed) == KUBE_PROMETHEUS_STACK_CRD_FILES, tag
    # The URL is that file at the tag (the repository's tags are kube-prometheus-stack-<version>).
    url = KUBE_PROMETHEUS_STACK_CRD_URL.format(version="88.5.3", file="crd-probes.yaml")
    assert url == (
        "https://raw.githubusercontent.com/prometheus-community/helm-charts/kube-prometheus-stack-88.5.3/"
        f"{CRDS}/crd-probes.yaml"
    )


def test_dev_applies_the_crds_itself_never_deletes_them_and_helm_skips_them(dev_plan: Plan):
    release = dev_plan.get(RELEASE, KPS)
    crds = [r for r in dev_plan.of_type(CONFIG_FILE) if r["name"].startswith(f"{KPS}-crds-")]
    assert sorted(r["inputs"]["file"] for r in crds) == sorted(
        KUBE_PROMETHEUS_STACK_CRD_URL.format(version=KUBE_PROMETHEUS_STACK_CHART_VERSION, file=file)
        for file in KUBE_PROMETHEUS_STACK_CRD_FILES
    )
    assert all(r["retain_on_delete"] for r in crds)
    assert release["inputs"]["skipCrds"] is True and {r["urn"] for r in crds} <= set(release["depends_on"])
    # Their provider adopts the CRDs an earlier install's Helm created, and takes over Helm's fields.
    (provider,) = {r["provider"] for r in crds}
    assert provider.endswith(f"::{KPS}-crds")
    assert dev_plan.get("pulumi:providers:kubernetes", f"{KPS}-crds")["inputs"] == {
        "upsertExistingObjects": "true",
        "enablePatchForce": "true",
    }


def test_scenario_chart_bump_updates_the_release_and_the_crds_in_place_and_no_custom_resource(dev_plan: Plan):
    before = with_kps("dev", chartVersion=OLD)
    after = with_kps("dev")
    impacts = {
        (i.type, i.name): i
        for i in predict(SynthPlan.model_validate(before.to_json()), SynthPlan.model_validate(after.to_json())).impacts
    }
    crds = {(CONFIG_FILE, f"{KPS}-crds-{file[4:-5]}") for file in KUBE_PROMETHEUS_STACK_CRD_FILES}
    assert set(impacts) == {(RELEASE, KPS), *crds}  # no PrometheusRule, ServiceMonitor or workload touched
    release = impacts[(RELEASE, KPS)]
    assert (
        release.action is Action.UPDATE and not release.replaced_by and release.updated == [("version", "k8s.update")]
    )
    for key in crds:
        crd = impacts[key]
        assert crd.action is Action.UPDATE and crd.updated == [("file", "k8s.yaml-objects")]
        assert "no object of it is ever deleted" in crd.meaning
    # In place: each file holds one CRD of the same metadata.name in both versions (the ConfigFile names its object
    # `<ConfigFile>:<metadata.name>`, provider/pkg/provider/yaml/v2/yaml.go L346-351).
    for file in KUBE_PROMETHEUS_STACK_CRD_FILES:
        names = {
            tuple(re.findall(rb"^  name: (\S+)$", upstream.read(f"{CRDS}/{file}"), re.M))
            for upstream in (KPS_88_5_3, KPS_87_21_0)
        }
        assert len(names) == 1 and len(next(iter(names))) == 1, file
    assert 'resourceName = fmt.Sprintf("%s:%s", opts.ResourcePrefix, resourceName)' in lines(
        PULUMI_K8S, "provider/pkg/provider/yaml/v2/yaml.go", 346, 351
    )


def test_a_version_whose_crd_files_the_stack_does_not_know_is_refused():
    config = stack_file("dev")
    config["rocm-stack:monitoring"] = {"kubePrometheusStack": {"chartVersion": "91.4.1"}}
    message = refusal("dev", config)
    assert "rocm-stack:monitoring.kubePrometheusStack.chartVersion" in message
    assert "KUBE_PROMETHEUS_STACK_CRD_FILES" in message and "84.x to 88.x" in message


# --- item 7: namespaces that exist ------------------------------------------------------------------------------------


def test_helm_creates_a_missing_namespace_only_when_asked():
    # Without createNamespace the release's objects go into a namespace nobody made ("namespaces ... not found");
    # with it Helm creates it first and accepts an existing one.
    create = lines(HELM, "pkg/action/install.go", 367, 388)
    assert create.startswith("\tif i.CreateNamespace {") and "!apierrors.IsAlreadyExists(err)" in create


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_release_and_namespaced_object_lands_in_a_namespace_that_exists(stack):
    assert namespace_problems(synthesize(stack)) == []


def test_kube_prometheus_stack_without_an_owned_namespace_creates_it_and_the_monitoring_objects_wait():
    """Issue 33 item 7: prod with `kubePrometheusStack.install: true` and no `monitoring` in kubernetes.namespaces
    sent the release to a namespace nobody created."""
    plan = with_kps("prod")
    assert MONITORING_NAMESPACE not in stack_file("prod")["rocm-stack:kubernetes"]["namespaces"]
    release = plan.get(RELEASE, KPS)
    assert release["inputs"]["namespace"] == MONITORING_NAMESPACE and release["inputs"]["createNamespace"] is True
    monitoring = [
        r for r in plan.kubernetes_objects() if r["inputs"].get("metadata", {}).get("namespace") == "monitoring"
    ]
    assert len(monitoring) >= 4 and all(release["urn"] in r["depends_on"] for r in monitoring)
    assert namespace_problems(plan) == []


def test_prod_reads_the_clusters_monitoring_namespace_before_putting_anything_there(prod_plan: Plan):
    check = f"urn:pulumi:prod::rocm-stack::rocm-stack:k8s:Cluster$kubernetes:core/v1:Namespace::{MONITORING_NAMESPACE_CHECK}"
    monitoring = [
        r for r in prod_plan.kubernetes_objects() if r["inputs"].get("metadata", {}).get("namespace") == "monitoring"
    ]
    assert len(monitoring) >= 4 and all(check in r["depends_on"] for r in monitoring)
    assert "kubernetes.namespaces" in MONITORING_NAMESPACE_CHECK
    assert "monitoring.kubePrometheusStack.install: true" in MONITORING_NAMESPACE_CHECK
