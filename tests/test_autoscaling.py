"""Inference that scales (`inference[].kubernetes.autoscaling`, KEDA v2.20.2): what the committed prod stack declares,
validated against the vendored ScaledObject CRD (tests/data/kubernetes, kedacore/keda tag v2.20.2), the upstream
facts it relies on (read from the upstream sources `make upstream` fetches at pinned commits; skipped where a mirror is absent) and the config
refusals. What the query returns on a real Prometheus: tests/e2e/test_e2e_autoscaling.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from components.monitoring import VLLM_SERVICE_MONITOR, kube_prometheus_stack_url
from components.workloads.autoscaling import queue_query
from components.workloads.inference import PATCH_FORCE_ANNOTATION, REPLICAS_PATH
from schema.autoscaling import KEDA_API_VERSION, KEDA_CHART_VERSION
from tools.synth import Plan, manifest_of, synthesize
from conftest import committed_plan, refusal, stack_file
from k8s_validation import CrdSchemas, stack_crds, validate_all
from upstream_go import Upstream

P = "rocm-stack:"
CRD = Path(__file__).parent / "data" / "kubernetes" / "keda.sh_scaledobjects.yaml"
SCALED_OBJECT = "kubernetes:keda.sh/v1alpha1:ScaledObject"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
KEDA = Upstream("kedacore/keda", "68a5b5028f35b22d50597c69819ab32c4e92f21a")  # tag v2.20.2
KEDA_CHARTS = Upstream("kedacore/charts", "cbb9bb8ce0809dc9048f72302f7c09765d66ed56")  # tag v2.20.2
PRODUCTION_STACK = Upstream("vllm-project/production-stack", "a6c01db05f65f556235413ba8dbcfb0c01132fff")  # 2026-08
PULUMI_K8S = Upstream("pulumi/pulumi-kubernetes", "94977969d64112b04e19945818a7d5d5f38f631d")  # after v4.32.0
PULUMI = Upstream("pulumi/pulumi", "0ac56e876614aedf12771d73ef7e80959b8a6fd4")  # tag v3.259.0
PROMETHEUS_OPERATOR = Upstream("prometheus-operator/prometheus-operator", "6adcebc5076c34f4f55f8f5f7b1e528929373ac7")
HELM_CHARTS = Upstream("prometheus-community/helm-charts", "cf408a290aec489277a94450bb3511432477a53a")  # 88.5.3


@pytest.fixture(scope="module")
def prod() -> Plan:
    return committed_plan("prod")


def one(plan: Plan, type_token: str, name: str) -> dict[str, Any]:
    return manifest_of(plan.get(type_token, name))


def lines(text: bytes, first: int, last: int) -> str:
    """Lines first..last (1-based, inclusive) of an upstream file."""
    return "\n".join(text.decode().splitlines()[first - 1 : last])


# --- what prod declares, against the vendored CRD ---------------------------------------------------------------


def test_the_scaled_object_and_its_deployment_validate_against_the_vendored_crd(prod):
    """keda.sh/v1alpha1 ScaledObject against the CRD of KEDA v2.20.2 made strict (unknown fields fail: the API server
    would prune them and KEDA would never see them); its CEL rule minReplicaCount <= maxReplicaCount, which the
    validator does not run, is checked by hand; the Deployment against the built-in apps/v1 schema."""
    scaled = one(prod, SCALED_OBJECT, "llama-scaler")
    deployment = one(prod, DEPLOYMENT, "llama")
    assert validate_all([scaled, deployment], stack_crds()) == 2
    crd = yaml.safe_load(CRD.read_text())
    [served] = [v for v in crd["spec"]["versions"] if v["served"]]
    rules = served["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"]
    assert any("self.minReplicaCount <= (has(self.maxReplicaCount)" in r["rule"] for r in rules)
    assert scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]


def test_a_misspelled_scaled_object_field_is_caught():
    """The strict CRD schema is no rubber stamp: a field KEDA does not know fails."""
    crds = CrdSchemas.from_files(CRD)
    wrong = {
        "apiVersion": KEDA_API_VERSION,
        "kind": "ScaledObject",
        "metadata": {"name": "x", "namespace": "ml"},
        "spec": {"scaleTargetRef": {"name": "x"}, "minReplicas": 1, "triggers": []},
    }
    with pytest.raises(AssertionError, match="minReplicas"):
        validate_all([wrong], crds)


def test_the_vendored_crd_is_the_schema_the_pinned_chart_installs():
    """The chart renders the ScaledObject CRD from keda/templates/crds/ with the same schema as kedacore/keda's
    config/crd/bases at the same tag, adding only the HPA's bounds of stabilizationWindowSeconds (0..3600), which
    schema.autoscaling.MAX_STABILIZATION_SECONDS keeps to."""
    vendored = CRD.read_text().splitlines()
    assert "\n".join(vendored) == KEDA.read("config/crd/bases/keda.sh_scaledobjects.yaml").decode().rstrip("\n")
    chart = KEDA_CHARTS.read("keda/templates/crds/crd-scaledobjects.yaml").decode().splitlines()
    body = chart[chart.index("spec:") :]
    added = [line for line in body if line not in vendored]
    assert sorted({a.strip() for a in added}) == ["maximum: 3600", "minimum: 0", "{{- end -}}"]
    assert "version: 2.20.2" in KEDA_CHARTS.read("keda/Chart.yaml").decode().splitlines()


def test_keda_is_a_pinned_release_whose_chart_upgrades_its_crds(prod):
    """The production stack's install (docs/source/use_cases/autoscaling-keda.rst: `helm repo add kedacore
    https://kedacore.github.io/charts`, `helm install keda kedacore/keda --namespace keda`), pinned; the CRDs are
    templates (`{{- if .Values.crds.install }}`, default true), so every chart upgrade applies them."""
    inputs = prod.get("kubernetes:helm.sh/v3:Release", "keda")["inputs"]
    assert {k: inputs[k] for k in ("name", "chart", "version", "namespace", "createNamespace")} == {
        "name": "keda",
        "chart": "keda",
        "version": KEDA_CHART_VERSION,
        "namespace": "keda",
        "createNamespace": True,
    }
    assert inputs["repositoryOpts"] == {"repo": "https://kedacore.github.io/charts"}
    assert "skipCrds" not in inputs
    assert prod.get("kubernetes:helm.sh/v3:Release", "keda")["protect"]
    doc = PRODUCTION_STACK.read("docs/source/use_cases/autoscaling-keda.rst").decode()
    assert "helm repo add kedacore https://kedacore.github.io/charts" in doc
    assert "helm install keda kedacore/keda --namespace keda" in doc
    template = KEDA_CHARTS.read("keda/templates/crds/crd-scaledobjects.yaml").decode().splitlines()
    assert template[0] == "{{- if .Values.crds.install }}"
    values = KEDA_CHARTS.read("keda/values.yaml").decode().splitlines()
    assert values[values.index("crds:") + 2] == "  install: true"


def test_the_scaled_object_waits_for_keda_and_targets_the_deployment(prod):
    scaled = prod.get(SCALED_OBJECT, "llama-scaler")
    release = prod.get("kubernetes:helm.sh/v3:Release", "keda")
    deployment = prod.get(DEPLOYMENT, "llama")
    assert {release["urn"], deployment["urn"]} <= set(scaled["depends_on"])
    assert manifest_of(scaled)["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": manifest_of(deployment)["metadata"]["name"],
    }


def test_the_trigger_is_the_production_stacks_prometheus_queue_trigger_summed_over_the_workload(prod):
    """The production stack's default trigger (helm/templates/scaledobject-vllm.yaml): `type: prometheus`,
    `metricName: vllm:num_requests_waiting`, a `threshold`. Ours sums the series of the workload's Service (KEDA's
    scaler refuses a result of several elements: prometheus_scaler.go L273-274 @ v2.20.2), selected by the labels
    prometheus-operator gives a ServiceMonitor's targets (`namespace`, `service`: promcfg.go L2134-2141)."""
    [trigger] = one(prod, SCALED_OBJECT, "llama-scaler")["spec"]["triggers"]
    service = one(prod, "kubernetes:core/v1:Service", "llama-service")
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"] == {
        "serverAddress": "http://prometheus-operated.monitoring.svc:9090",
        "query": 'sum(vllm:num_requests_waiting{namespace="ml",service="llama"})',
        "threshold": "5",
        "ignoreNullValues": "false",
    }
    assert trigger["metadata"]["query"] == queue_query(service["metadata"]["namespace"], service["metadata"]["name"])
    template = PRODUCTION_STACK.read("helm/templates/scaledobject-vllm.yaml").decode()
    assert "- type: prometheus" in template and "metricName: vllm:num_requests_waiting" in template
    scaler = KEDA.read("pkg/scalers/prometheus_scaler.go")
    assert 'fmt.Errorf("prometheus query %s returned multiple elements"' in lines(scaler, 273, 274)
    assert "if s.metadata.IgnoreNullValues {\n\t\t\treturn 0, nil" in lines(scaler, 267, 272)
    assert "// Use AverageValue if no metric type was provided" in lines(KEDA.read("pkg/scalers/scaler.go"), 95, 104)
    promcfg = lines(PROMETHEUS_OPERATOR.read("pkg/prometheus/promcfg.go"), 2134, 2149)
    for meta, label in (("namespace", "namespace"), ("service_name", "service"), ("pod_name", "pod")):
        assert (
            f'{{Key: "source_labels", Value: []string{{"__meta_kubernetes_{meta}"}}}},\n\t\t\t{{Key: "target_label", Value: "{label}"}}'
            in promcfg
        )


def test_the_queried_series_are_those_the_stacks_service_monitor_scrapes(prod):
    """The ServiceMonitor `rocm-vllm` selects the workload's Service by its app labels and scrapes its `http` port:
    the series the query selects exist (the e2e test proves the query on them)."""
    monitor = one(prod, "kubernetes:monitoring.coreos.com/v1:ServiceMonitor", f"monitoring-{VLLM_SERVICE_MONITOR}")
    service = one(prod, "kubernetes:core/v1:Service", "llama-service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}


def test_scale_down_is_the_hpas_behaviour_and_keda_cooldown_does_not_apply(prod):
    """KEDA applies cooldownPeriod only when scaling to zero or to idleReplicaCount (scale_scaledobjects.go L98-101
    @ v2.20.2); with minReplicas >= 1 the HPA scales down, after its stabilization window, one pod a minute."""
    spec = one(prod, SCALED_OBJECT, "llama-scaler")["spec"]
    assert "cooldownPeriod" not in spec and "idleReplicaCount" not in spec and spec["minReplicaCount"] >= 1
    assert spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"] == {
        "scaleDown": {
            "stabilizationWindowSeconds": 300,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
        }
    }
    executor = lines(KEDA.read("pkg/scaling/executor/scale_scaledobjects.go"), 98, 101)
    assert "currentReplicas > 0 && minReplicas == 0:" in executor and "e.scaleToZeroOrIdle(" in executor


def test_the_deployment_leaves_its_replicas_to_the_autoscaler(prod):
    """Created with minReplicas; ignoreChanges on spec.replicas: the engine resets the path to the state's value
    before the provider's diff (pulumi/pulumi step_generator.go L1267, processIgnoreChanges L3028-3046 @ v3.259.0),
    and the provider's server-side apply drops a field another manager owns and Pulumi does not, else sends the
    live value (pulumi-kubernetes await.go handleSSAIgnoreFields L716-800). After autoscaling is turned off the HPA's
    manager ("kube-controller-manager", subresource scale; pulumi/pulumi-kubernetes#2491) still owns spec.replicas:
    the patchForce annotation makes Pulumi's apply take it back instead of failing with a conflict (patchForce
    L1031-1034)."""
    resource = prod.get(DEPLOYMENT, "llama")
    deployment = manifest_of(resource)
    assert deployment["spec"]["replicas"] == 2
    assert resource["ignore_changes"] == [REPLICAS_PATH]
    assert deployment["metadata"]["annotations"][PATCH_FORCE_ANNOTATION] == "true"
    steps = PULUMI.read("pkg/resource/deploy/step_generator.go")
    assert "processIgnoreChanges(sg.deployment.Diag(), urn, inputs, old.Inputs, goal.IgnoreChanges)" in lines(
        steps, 1267, 1267
    )
    assert "ok := path.Reset(oldInputs, ignoredInputs)" in lines(steps, 3038, 3038)
    await_go = PULUMI_K8S.read("provider/pkg/await/await.go")
    assert "err = handleSSAIgnoreFields(c, liveOldObj)" in lines(await_go, 653, 653)
    assert "if theirFields.Has(pe) && !ourFields.Has(pe) {\n\t\t\tunstructured.RemoveNestedField(" in lines(
        await_go, 763, 764
    )
    assert "lastLiveVal, found, err := unstructured.NestedFieldCopy(liveOldObj.Object, pathComponents...)" in lines(
        await_go, 786, 786
    )
    assert "if metadata.IsAnnotationTrue(inputs, metadata.AnnotationPatchForce) {\n\t\treturn true" in lines(
        await_go, 1032, 1033
    )
    annotations = PULUMI_K8S.read("provider/pkg/metadata/annotations.go")
    assert 'AnnotationPatchForce        = AnnotationPrefix + "patchForce"' in lines(annotations, 38, 38)


def test_a_stopping_replica_drains_before_vllm_gets_sigterm(prod):
    """vLLM 0.11.2 cancels its server task on SIGTERM (vllm/entrypoints/launcher.py L84-95 of the vllm==0.11.2 wheel:
    `signal_handler` -> `server_task.cancel()` for SIGINT and SIGTERM), cutting requests in flight; so the vLLM
    container's preStop waits for vLLM's own gauges to reach 0 within the grace less the exit margin, and the proxy
    sidecar's preStop waits for vLLM to stop answering (the hooks run for real: tests/e2e/test_e2e_autoscaling.py).
    The kubelet counts the hook against the pod's grace (core/v1 Lifecycle.preStop: "The Pod's termination grace
    period countdown begins before the PreStop hook is executed")."""
    pod = one(prod, DEPLOYMENT, "llama")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 120
    containers = {c["name"]: c for c in pod["containers"]}
    python, flag, script = containers["vllm"]["lifecycle"]["preStop"]["exec"]["command"]
    assert (python, flag) == ("python3", "-c")
    assert "end = time.monotonic() + 110" in script and 'urlopen("http://127.0.0.1:8000/metrics"' in script
    assert containers["proxy"]["lifecycle"]["preStop"]["exec"]["command"] == [
        "/bin/sh",
        "-c",
        "while wget -q -O /dev/null http://127.0.0.1:8000/health; do sleep 1; done",
    ]
    compile(script, "preStop", "exec")


def test_a_deployment_without_autoscaling_keeps_its_replicas_declared(prod):
    config = stack_file("prod")
    config[P + "inference"][0]["kubernetes"].pop("autoscaling")
    plan = synthesize("prod", config)
    resource = plan.get(DEPLOYMENT, "llama")
    assert resource["ignore_changes"] == [] and manifest_of(resource)["spec"]["replicas"] == 2
    assert not plan.of_type(SCALED_OBJECT) and not [
        r for r in plan.of_type("kubernetes:helm.sh/v3:Release") if r["name"] == "keda"
    ]


def test_kube_prometheus_stacks_prometheus_is_the_default_address():
    """Dev installs kube-prometheus-stack: its Prometheus Service is `<fullname>-prometheus` (templates/prometheus/
    service.yaml L6), fullname the release name when it contains the chart's name (_helpers.tpl L19-20), port 9090
    (values.yaml L3780)."""
    assert kube_prometheus_stack_url() == "http://kube-prometheus-stack-prometheus.monitoring.svc:9090"
    chart = "charts/kube-prometheus-stack/"
    service = HELM_CHARTS.read(chart + "templates/prometheus/service.yaml")
    assert '  name: {{ template "kube-prometheus-stack.fullname" . }}-prometheus' in lines(service, 6, 6)
    helpers = lines(HELM_CHARTS.read(chart + "templates/_helpers.tpl"), 19, 20)
    assert "{{- if contains $name .Release.Name -}}\n{{- .Release.Name | trunc 26" in helpers
    assert "    port: 9090" in lines(HELM_CHARTS.read(chart + "values.yaml"), 3780, 3780)
    config = stack_file("dev")
    config[P + "inference"][0]["kubernetes"]["autoscaling"] = {"maxReplicas": 2}
    plan = synthesize("dev", config)
    [scaled] = [manifest_of(r) for r in plan.of_type(SCALED_OBJECT)]
    assert scaled["spec"]["triggers"][0]["metadata"]["serverAddress"] == kube_prometheus_stack_url()
    assert scaled["spec"]["minReplicaCount"] == 1  # dev's default minimum


# --- refusals -----------------------------------------------------------------------------------------------------


def autoscaling(config: dict[str, Any]) -> dict[str, Any]:
    return config[P + "inference"][0]["kubernetes"]["autoscaling"]


@pytest.mark.parametrize(
    "change, message",
    [
        (
            lambda c: autoscaling(c).update(minReplicas=5),
            "inference[0].kubernetes.autoscaling.minReplicas: 5 exceeds maxReplicas 4",
        ),
        (
            lambda c: autoscaling(c).update(maxReplicas=1, minReplicas=None),
            "autoscaling.minReplicas: 2 (prod's default) exceeds maxReplicas 1",
        ),
        (
            lambda c: c[P + "inference"][0]["kubernetes"].update(replicas=3),
            "inference[0].kubernetes.replicas: the autoscaler sets the replica count",
        ),
        (
            lambda c: c[P + "inference"][0]["kubernetes"].update(minAvailable=2),
            "inference[0].kubernetes.minAvailable: 2 of 2 replica(s) must stay up",
        ),
        (
            lambda c: autoscaling(c).update(maxReplicas=5),
            "inference[0].kubernetes.autoscaling.maxReplicas: 5 replicas are spread one per node, but gpuFleet has 4",
        ),
        (
            lambda c: c[P + "kubernetes"].pop("keda"),
            "kubernetes.keda.prometheusUrl: inference autoscaling queries the cluster's Prometheus, and prod does not "
            "install kube-prometheus-stack",
        ),
        (
            lambda c: c[P + "monitoring"].update(enabled=False),
            "monitoring.enabled: inference autoscaling reads vLLM's queue from the cluster's Prometheus",
        ),
        (lambda c: autoscaling(c).update(targetQueueLength=0), "autoscaling.targetQueueLength: must be at least 1"),
        (
            lambda c: c[P + "inference"][0]["kubernetes"].update(terminationGracePeriodSeconds=20),
            "kubernetes.terminationGracePeriodSeconds: must be at least 30",
        ),
        (
            lambda c: autoscaling(c).update(scaleDownStabilizationSeconds=3601),
            "scaleDownStabilizationSeconds: must be at most 3600",
        ),
        (
            lambda c: c[P + "kubernetes"]["keda"].update(prometheusUrl="prometheus:9090"),
            "expected an http:// or https:// URL",
        ),
    ],
)
def test_bad_autoscaling_settings_are_refused_naming_the_key(change, message):
    config = stack_file("prod")
    change(config)
    assert message in refusal("prod", config)


def test_a_burst_beyond_the_fleet_is_refused_without_a_budget():
    """Without a disruption budget replicas may share nodes, but more than the fleet's GPUs can never run."""
    config = stack_file("dev")
    config[P + "inference"][0]["kubernetes"]["autoscaling"] = {"maxReplicas": 9}
    config[P + "gpuFleet"] = {"nodes": 1, "gpusPerNode": 8}
    assert "autoscaling.maxReplicas: 9 replicas x 1 GPUs exceed the 8 GPUs of gpuFleet" in refusal("dev", config)
