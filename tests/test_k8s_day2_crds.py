"""Day 2 of the CRDs the GPU stack needs (issue 22 items 4 and 5): the JobSet CRD follows `jobSet.chartVersion`, and
the DeviceConfig's ServiceMonitor waits for the Prometheus Operator's CRD.

Each scenario runs before/after stacks through the real program (tools.synth) and the change-impact preview
(tools.impact.predict); each upstream fact they rest on is read from the upstream sources `make upstream` fetches at the commits below
(tests/upstream_go.py: skipped where a mirror is absent; the citations still pin the facts).
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from components.k8s.gpu_operator import SERVICE_MONITOR_CRD, SERVICE_MONITOR_CRD_CHECK
from components.monitoring import KubernetesMonitoring
from schema.kubernetes import JOBSET_CHART_VERSION, JOBSET_CRD, JOBSET_CRD_URL
from tools.impact import ImpactReport, predict
from tools.impact_rules import K8S_FORCE_NEW, Action
from tools.synth import Plan, synthesize
from tools.synth_diff import SynthPlan
from conftest import stack_file, synth_with
from upstream_go import Upstream

JOBSET_0_12_0 = Upstream("kubernetes-sigs/jobset", "f22e565ac3cc3265c7c45ef67ecffdc689af5d77")  # tag v0.12.0
JOBSET_0_11_1 = Upstream("kubernetes-sigs/jobset", "ecaf56ab2dffb6edce074beda10ea092e71f62e5")  # tag v0.11.1
GPU_OPERATOR = Upstream("ROCm/gpu-operator", "858cf255c7dd27cebf1cc5db400eee3aa06ecbbc")  # tag v1.5.1
PULUMI_K8S = Upstream("pulumi/pulumi-kubernetes", "94977969d64112b04e19945818a7d5d5f38f631d")  # after v4.32.0
PULUMI = Upstream("pulumi/pulumi", "1b5949891b3cefcb9974752b24a5ecef0acc86c8")  # July 2026, after v3.220.0

RELEASE = "kubernetes:helm.sh/v3:Release"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
K8S_PROVIDER = "pulumi:providers:kubernetes"
DEVICE_CONFIG = "kubernetes:amd.com/v1alpha1:DeviceConfig"
CRD_TYPE = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
OLD_JOBSET = "0.11.1"
CRD_FILE = "charts/jobset/crds/jobset.x-k8s.io_jobsets.yaml"


def lines(upstream: Upstream, path: str, first: int, last: int) -> str:
    return "\n".join(upstream.read(path).decode().splitlines()[first - 1 : last])


def report(base: Plan, head: Plan) -> ImpactReport:
    return predict(SynthPlan.model_validate(base.to_json()), SynthPlan.model_validate(head.to_json()))


def with_job_set(stack: str, **job_set: Any) -> Plan:
    config = stack_file(stack)
    config["rocm-stack:kubernetes"]["jobSet"] = job_set
    return synthesize(stack, config)


# --- item 5: the JobSet CRD follows the chart version --------------------------------------------------------------


def test_helm_never_upgrades_the_jobset_charts_crd_and_no_value_moves_it():
    # Helm installs crds/ on install only: "There is no support at this time for upgrading or deleting CRDs using
    # Helm" (https://helm.sh/docs/chart_best_practices/custom_resource_definitions/); "CRDs are never installed on
    # upgrade or rollback" (https://helm.sh/docs/topics/charts/#limitations-on-crds; helm pkg/action/upgrade.go has
    # no CRD step, pkg/action/install.go installCRDs runs unless SkipCRDs). The JobSet chart keeps its CRD there
    # and has no value to template it instead:
    assert JOBSET_0_12_0.read(CRD_FILE).startswith(b"---\napiVersion: apiextensions.k8s.io/v1\n")
    assert "crd" not in JOBSET_0_12_0.read("charts/jobset/values.yaml").decode().lower()
    # ... and the CRD changed between the two versions of the scenario: a bump that left it would be wrong.
    assert JOBSET_0_12_0.read(CRD_FILE) != JOBSET_0_11_1.read(CRD_FILE)


def test_the_declared_crd_is_the_one_chart_version_carries():
    # Chart <v> is charts/jobset packaged at tag v<v> (hack/helm-chart-package.sh L42 `chart_version="${GIT_TAG/#v/}"`,
    # L50 `helm package --version "${chart_version}" ... charts/jobset`); its crds/ file is the generated CRD
    # (Makefile L112 copies config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml there).
    script = lines(JOBSET_0_12_0, "hack/helm-chart-package.sh", 42, 50)
    assert 'chart_version="${GIT_TAG/#v/}"' in script and '--version "${chart_version}"' in script
    assert "./config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml ./charts/jobset/crds/" in lines(
        JOBSET_0_12_0, "Makefile", 112, 112
    )
    tag, path = re.fullmatch(
        r"https://raw\.githubusercontent\.com/kubernetes-sigs/jobset/(v[^/]+)/(.+)",
        JOBSET_CRD_URL.format(version=JOBSET_CHART_VERSION),
    ).groups()  # type: ignore[union-attr]
    assert (tag, path) == (f"v{JOBSET_CHART_VERSION}", CRD_FILE)
    # The same object name in both versions (the one top-level `metadata.name`; the file is too big to parse fast).
    names = {
        re.findall(rb"^  name: (\S+)$", upstream.read(path), re.M)[0] for upstream in (JOBSET_0_12_0, JOBSET_0_11_1)
    }
    assert names == {JOBSET_CRD.encode()}


def test_prod_applies_the_crd_itself_never_deletes_it_and_helm_skips_crds(prod_plan: Plan):
    (crds,) = prod_plan.of_type(CONFIG_FILE)
    assert crds["inputs"] == {"file": JOBSET_CRD_URL.format(version=JOBSET_CHART_VERSION)}
    assert crds["retain_on_delete"] and crds["protect"]
    release = prod_plan.get(RELEASE, "jobset")
    assert release["inputs"]["skipCrds"] is True and crds["urn"] in release["depends_on"]
    # The engine passes a component's protect and retainOnDelete on to each resource under it, here the CRD the
    # provider declares under the ConfigFile, and a retained resource's delete calls no provider Delete.
    inherit = PULUMI.read("pkg/resource/deploy/source_eval.go").decode()
    body = re.search(r"func inheritFromParent\(.*?\n}\n", inherit, re.S).group(0)  # type: ignore[union-attr]
    assert "child.Protect = parent.Protect" in body and "child.RetainOnDelete = parent.RetainOnDelete" in body
    assert "} else if s.old.RetainOnDelete {" in lines(PULUMI, "pkg/resource/deploy/step.go", 661, 661)


def test_day2_adopts_the_crd_helm_installed_and_takes_its_fields():
    """An existing install has the CRD Helm created from crds/: since pulumi-kubernetes 4.29 a create of an object
    that exists fails AlreadyExists unless the provider upserts (server-side apply); a later change of a field
    Helm's field manager owns conflicts unless forced. The CRD's own provider does both, on the same cluster."""
    plan = with_job_set("prod")
    (crds,) = plan.of_type(CONFIG_FILE)
    provider = plan.get(K8S_PROVIDER, "jobset-crds")
    assert crds["provider"] == provider["urn"]  # the engine hands it on to the CRD (inheritFromParent: Provider)
    assert provider["inputs"] == {"context": "gpu-prod", "upsertExistingObjects": "true", "enablePatchForce": "true"}
    assert provider["inputs"]["context"] == plan.get(K8S_PROVIDER, "k8s")["inputs"]["context"]
    create = lines(PULUMI_K8S, "provider/pkg/await/await.go", 190, 191)
    assert "c.UpsertExistingObjects ||" in create and "patchForce(c.Inputs, nil, c.EnablePatchForce" in create
    assert "apierrors.IsAlreadyExists(err)" in lines(PULUMI_K8S, "provider/pkg/await/await.go", 276, 276)
    assert "Use client-side create for new resources" in PULUMI_K8S.read("CHANGELOG.md").decode()


def test_scenario_chart_bump_updates_the_crd_and_the_release_in_place_and_nothing_else(prod_plan: Plan):
    before = with_job_set("prod", chartVersion=OLD_JOBSET)
    impacts = {(i.type, i.name): i for i in report(before, prod_plan).impacts}
    assert set(impacts) == {(RELEASE, "jobset"), (CONFIG_FILE, "jobset-crds")}  # no workload, no JobSet touched

    release = impacts[(RELEASE, "jobset")]
    assert release.action is Action.UPDATE and not release.replaced_by
    assert release.updated == [("values.image.tag", "k8s.update"), ("version", "k8s.update")]

    crd = impacts[(CONFIG_FILE, "jobset-crds")]
    assert crd.action is Action.UPDATE and crd.updated == [("file", "k8s.yaml-objects")]
    assert crd.rules == ["k8s.update", "k8s.yaml-objects", "pulumi.retain-on-delete"]
    assert JOBSET_CRD_URL.format(version=OLD_JOBSET) in crd.meaning and "no object of it is ever deleted" in crd.meaning
    # Why in place: the ConfigFile declares the CRD as `<ConfigFile>:<metadata.name>`, the same name in both
    # versions (above), so its URN stays; and pulumi-kubernetes lists no apiextensions.k8s.io kind among those a
    # spec change replaces (diff.go forceNew), so only a new metadata.name would replace it.
    register = lines(PULUMI_K8S, "provider/pkg/provider/yaml/v2/yaml.go", 346, 351)
    assert 'resourceName = fmt.Sprintf("%s:%s", opts.ResourcePrefix, resourceName)' in register
    force_new = re.search(
        r"var forceNew = _groups\{.*?\n}\n", PULUMI_K8S.read("provider/pkg/provider/diff.go").decode(), re.S
    )
    assert force_new and '"apps"' in force_new.group(0) and "apiextensions" not in force_new.group(0)
    assert not [key for key in K8S_FORCE_NEW if key[0] == "apiextensions.k8s.io"]


def test_a_cluster_with_its_own_jobset_gets_no_crd_from_the_stack():
    plan = with_job_set("prod", install=False)
    assert plan.of_type(CONFIG_FILE) == [] and [r for r in plan.of_type(RELEASE) if r["name"] == "jobset"] == []


# --- item 4: the DeviceConfig's ServiceMonitor needs the Prometheus Operator's CRD ---------------------------------


def test_the_operator_returns_on_the_service_monitor_error_before_the_test_runner_and_dcm():
    reconciler = "internal/controllers/device_config_reconciler.go"
    order = lines(GPU_OPERATOR, reconciler, 345, 357)
    assert order.index("handleMetricsExporter") < order.index("handleTestRunner") < order.index("handleConfigManager")
    assert order.count("return res, fmt.Errorf(") == 3
    # Asked for, the ServiceMonitor is created or patched and its error (no such kind without the CRD) returned ...
    create = lines(GPU_OPERATOR, reconciler, 1483, 1498)
    assert "utils.IsPrometheusServiceMonitorEnable(devConfig)" in create and "return err" in create
    # ... not asked for, a missing CRD is fine (NoMatch tolerated).
    assert "!meta.IsNoMatchError(err)" in lines(GPU_OPERATOR, reconciler, 1517, 1517)


def _check_urn(plan: Plan) -> str:
    return f"urn:pulumi:{plan.stack}::rocm-stack::rocm-stack:k8s:GpuOperator${CRD_TYPE}::{SERVICE_MONITOR_CRD_CHECK}"


def test_prod_reads_the_clusters_service_monitor_crd_before_the_device_config(prod_plan: Plan):
    """prod uses the cluster's Prometheus (no kube-prometheus-stack of its own): the DeviceConfig, the PrometheusRule
    and the vLLM ServiceMonitor wait for a read of the CRD, whose failure names the CRD and, by the resource's name,
    the fix. Offline synth cannot see the cluster: the read is declared, not performed."""
    assert [r for r in prod_plan.of_type(RELEASE) if r["inputs"]["chart"] == "kube-prometheus-stack"] == []
    check = _check_urn(prod_plan)
    assert check in prod_plan.get(DEVICE_CONFIG, "amd-gpu-operator-device-config")["depends_on"]
    for kind, name in (("PrometheusRule", "monitoring-rocm-gpu-alerts"), ("ServiceMonitor", "monitoring-rocm-vllm")):
        assert check in prod_plan.get(f"kubernetes:monitoring.coreos.com/v1:{kind}", name)["depends_on"]
    assert SERVICE_MONITOR_CRD in SERVICE_MONITOR_CRD_CHECK and "monitoring.kubePrometheusStack.install" in (
        SERVICE_MONITOR_CRD_CHECK
    )
    # A missing CRD: the provider's Read answers no object on a 404, and the engine fails the read with
    # "resource '<id>' does not exist", the id being the CRD's name.
    assert "statusErr.ErrStatus.Code == 404" in lines(PULUMI_K8S, "provider/pkg/provider/provider.go", 2060, 2063)
    assert "resource '%s' does not exist\", id)" in lines(PULUMI, "pkg/resource/deploy/step.go", 1368, 1368)


def test_dev_device_config_waits_for_the_kube_prometheus_stack_it_installs(dev_plan: Plan):
    (release,) = [r for r in dev_plan.of_type(RELEASE) if r["inputs"]["chart"] == "kube-prometheus-stack"]
    device_config = dev_plan.get(DEVICE_CONFIG, "amd-gpu-operator-device-config")
    assert release["urn"] in device_config["depends_on"] and _check_urn(dev_plan) not in device_config["depends_on"]
    # Declared before the GPU stack now, no longer under KubernetesMonitoring (which waits for the DeviceConfig):
    # the alias finds the state it was deployed under, so the move calls no provider (rule pulumi.urn).
    (alias,) = release["aliases"]
    assert alias["urn"] == (
        f"urn:pulumi:dev::rocm-stack::{KubernetesMonitoring.TYPE}${RELEASE}::monitoring-kube-prometheus-stack"
    )
    moved = dev_plan.to_json()
    moved["resources"] = [
        {**r, "urn": alias["urn"], "parent": alias["parent"], "aliases": []} if r["urn"] == release["urn"] else r
        for r in moved["resources"]
    ]
    impacts = predict(SynthPlan.model_validate(moved), SynthPlan.model_validate(dev_plan.to_json())).impacts
    assert [i for i in impacts if i.name == "monitoring-kube-prometheus-stack"] == []


@pytest.mark.parametrize(
    "monitoring, service_monitor, checked",
    [
        ({"enabled": False}, False, False),  # nothing asks for a ServiceMonitor
        ({"enabled": False}, True, True),  # the DeviceConfig's own serviceMonitor setting asks
    ],
)
def test_the_check_follows_what_the_device_config_asks_for(monitoring, service_monitor, checked):
    config = stack_file("prod")
    config["rocm-stack:monitoring"] = monitoring
    config["rocm-stack:inference"][0]["kubernetes"].pop("autoscaling")  # it reads vLLM's queue from Prometheus
    exporter = config["rocm-stack:kubernetes"]["gpuOperator"]["deviceConfig"].setdefault("metricsExporter", {})
    exporter["serviceMonitor"] = {"enable": service_monitor}
    plan = synthesize("prod", config)
    depends_on = plan.get(DEVICE_CONFIG, "amd-gpu-operator-device-config")["depends_on"]
    assert (_check_urn(plan) in depends_on) is checked


def test_without_kube_prometheus_stack_dev_checks_too_and_device_plugin_mode_has_nothing_to_check():
    plan = synth_with("dev", monitoring={"kubePrometheusStack": {"install": False}})
    assert _check_urn(plan) in plan.get(DEVICE_CONFIG, "amd-gpu-operator-device-config")["depends_on"]
    kubernetes = stack_file("dev")["rocm-stack:kubernetes"]
    plan = synth_with(
        "dev",
        monitoring={"kubePrometheusStack": {"install": False}},
        kubernetes={**kubernetes, "mode": "device-plugin"},
    )
    assert not plan.of_type(DEVICE_CONFIG)
    assert _check_urn(plan) not in {d for r in plan.resources for d in r["depends_on"]}
