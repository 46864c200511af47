"""Monitoring components under Pulumi's mock engine (tools.synth): the Docker exporters and their scrape
config, the Kubernetes PrometheusRule / dashboard ConfigMap / kube-prometheus-stack / standalone exporter with its
ServiceMonitor, and the Grafana dashboard, all checked against what upstream defines."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from domain import alerts, dashboard
from domain.gpus import MODELS
from schema.kubernetes import KubernetesConfig
from schema.monitoring import MonitoringConfig
from components.k8s import gpu_stack_workloads
from domain.fleet import DeclaredHost
from components.monitoring import (
    CADVISOR_PORT,
    EXPORTER_JOB,
    NODE_EXPORTER_PORT,
    device_config_service_monitor,
    exporter_address,
    exporter_relabelings,
    prometheus_scrape_config,
    vllm_metrics_token_file,
)
from tools.synth import Plan, docker_scripts, manifest_of, synthesize
from conftest import CONTAINER, REMOTE_IMAGE, committed_plan, refused, stack_file, stack_without_kubernetes
from k8s_validation import SERVICE_MONITOR_SUBSET, CrdSchemas, strict_structural_schema, validate_object
from monitoring_reference import PROMETHEUS_LABELS, PROMETHEUS_METRICS, exporter_labels, promql_names, support_matrix
from schema.project import ROOT

DATA = Path(__file__).parent / "data" / "monitoring"
P = "rocm-stack:"

DOCKER_EXPORTER = "rocm-stack:monitoring:DockerExporter"
K8S_MONITORING = "rocm-stack:monitoring:KubernetesMonitoring"
RELEASE = "kubernetes:helm.sh/v3:Release"
RULE = "kubernetes:monitoring.coreos.com/v1:PrometheusRule"
SERVICE_MONITOR = "kubernetes:monitoring.coreos.com/v1:ServiceMonitor"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
SERVICE = "kubernetes:core/v1:Service"
EXPORTER_IMAGE = "rocm/device-metrics-exporter:v1.5.2"

PROMETHEUS_RULE_CRD = CrdSchemas.from_files(DATA / "crds" / "monitoring.coreos.com_prometheusrules.yaml")


def synth(
    stack: str,
    monitoring: dict[str, Any] | None = None,
    kubernetes: dict[str, Any] | None = None,
    hosts: list[dict[str, Any]] | None = None,
) -> Plan:
    """The committed stack with these sections; without `kubernetes` a Docker-only stack."""
    config = stack_without_kubernetes(stack)
    for key, value in (("monitoring", monitoring), ("kubernetes", kubernetes), ("hosts", hosts)):
        if value is not None:
            config[P + key] = value
    return synthesize(stack, config)


def refusal(stack: str, monitoring: dict[str, Any]) -> str:
    return refused(lambda: synth(stack, monitoring))


def only(plan: Plan, type_token: str) -> dict[str, Any]:
    found = plan.of_type(type_token)
    assert len(found) == 1, f"{type_token}: {len(found)} declared"
    return found[0]


def kube_prometheus_stack(plan: Plan) -> list[dict[str, Any]]:
    return [r for r in plan.of_type(RELEASE) if r["inputs"]["chart"] == "kube-prometheus-stack"]


def by_urn(plan: Plan) -> dict[str, dict[str, Any]]:
    return {r["urn"]: r for r in plan.resources}


# --- Docker hosts -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def prod_docker() -> Plan:
    return synth("prod")


def exporters(plan: Plan) -> dict[str, dict[str, Any]]:
    """Exporter container per host name (its DockerExporter parent is named after the host)."""
    parents = {r["urn"]: r["name"] for r in plan.of_type(DOCKER_EXPORTER)}
    return {parents[c["parent"]]: c for c in plan.of_type(CONTAINER) if c["parent"] in parents}


def test_every_docker_host_runs_the_exporter_on_its_own_daemon(prod_docker: Plan) -> None:
    hosts = [h["name"] for h in stack_file("prod")[P + "hosts"]]
    running = exporters(prod_docker)
    assert sorted(running) == sorted(hosts)
    resources = by_urn(prod_docker)
    for host, container in running.items():
        provider = resources[container["provider"]]
        assert (provider["type"], provider["name"]) == ("pulumi:providers:docker", host)
        i = container["inputs"]
        # Upstream's `docker run --device=/dev/dri --device=/dev/kfd -p 5000:5000 rocm/device-metrics-exporter`.
        assert sorted(d["hostPath"] for d in i["devices"]) == ["/dev/dri", "/dev/kfd"]
        assert i["ports"] == [{"internal": 5000, "external": 5000, "ip": "0.0.0.0", "protocol": "tcp"}]
        assert i["hostname"] == host and i["restart"] == "unless-stopped"
    images = [r for r in prod_docker.of_type(REMOTE_IMAGE) if r["name"].endswith("-amd-device-metrics-exporter")]
    assert {r["inputs"]["name"] for r in images} == {EXPORTER_IMAGE} and len(images) == len(hosts)


def test_docker_script_shows_the_exporter_run_line(prod_docker: Plan) -> None:
    script = docker_scripts(prod_docker)["gpu-node-1"]
    assert f"docker pull {EXPORTER_IMAGE}" in script
    run = next(line for line in script.splitlines() if "--name=amd-device-metrics-exporter" in line)
    assert "--device=/dev/kfd:/dev/kfd:rwm" in run and "--device=/dev/dri:/dev/dri:rwm" in run
    assert "--publish=0.0.0.0:5000:5000/tcp" in run and run.endswith(EXPORTER_IMAGE)


def test_scrape_config_lists_every_host_with_a_host_label(prod_docker: Plan) -> None:
    scrape = yaml.safe_load(prod_docker.outputs["prometheusScrapeConfig"])
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    # No Docker workload in this stack: no vLLM job.
    assert list(jobs) == [EXPORTER_JOB, alerts.NODE_EXPORTER_JOB, alerts.CADVISOR_JOB]
    for job, port in zip(jobs.values(), (5000, NODE_EXPORTER_PORT, CADVISOR_PORT)):
        assert job["scrape_interval"] == "30s" and job["metrics_path"] == "/metrics"
        assert job["static_configs"] == [
            {
                "targets": [f"gpu-node-{n}.example.internal:{port}"],
                "labels": {"host": f"gpu-node-{n}", "gpu_model": "MI300X"},
            }
            for n in range(1, 5)
        ]


def test_prod_scrapes_each_docker_vllm_through_its_proxy_with_its_hosts_scrape_token() -> None:
    """The committed prod stack (vLLM partitions serve-b on gpu-node-3/4, an API key): one job per host (Prometheus
    sets credentials per job), each with its partition's target on its published API port (the proxy's),
    authenticated with that host's token file, never the API key, and relabelled to the job `vllm` the rules
    select."""
    plan = committed_plan("prod")
    jobs = {job["job_name"]: job for job in yaml.safe_load(plan.outputs["prometheusScrapeConfig"])["scrape_configs"]}
    assert alerts.VLLM_JOB not in jobs
    for n in (3, 4):
        vllm = jobs[f"{alerts.VLLM_JOB}-gpu-node-{n}"]
        assert vllm["authorization"] == {"type": "Bearer", "credentials_file": vllm_metrics_token_file(f"gpu-node-{n}")}
        assert vllm["relabel_configs"] == [{"target_label": "job", "replacement": alerts.VLLM_JOB}]
        assert vllm["static_configs"] == [
            {
                "targets": [f"gpu-node-{n}.example.internal:8000"],
                "labels": {"host": f"gpu-node-{n}", "gpu_model": "MI300X", "container": "serve-b"},
            }
        ]
    # Prometheus accepts it (promtool needs the credentials file to exist: a stand-in for it).


def test_a_mixed_mi250_and_mi300x_fleet_is_monitored_with_each_hosts_model() -> None:
    """The rules select a GPU's model by the gpu_model target label (tests/data/monitoring/promtool/mixed.test.yml
    runs them on both families); the scrape config gives every host's target its hosts[].gpuModel."""
    hosts = stack_file("prod")[P + "hosts"]
    mixed = [{**host, "gpuModel": "MI250" if n % 2 else "MI300X"} for n, host in enumerate(hosts)]
    plan = synth("prod", hosts=mixed)
    for job in yaml.safe_load(plan.outputs["prometheusScrapeConfig"])["scrape_configs"]:
        assert {c["labels"]["host"]: c["labels"]["gpu_model"] for c in job["static_configs"]} == {
            host["name"]: host["gpuModel"] for host in mixed
        }
    assert len(exporters(plan)) == len(hosts)


def test_exporter_port_setting_moves_the_published_port_and_the_targets() -> None:
    cfg = MonitoringConfig(exporter_port=9400, scrape_interval="15s")
    fleet = [DeclaredHost("b", "10.0.0.2", "MI250", 8), DeclaredHost("a", "localhost", "other", 1)]
    job = prometheus_scrape_config(cfg, fleet, keyed=False)["scrape_configs"][0]
    assert job["static_configs"][0] == {"targets": ["localhost:9400"], "labels": {"host": "a", "gpu_model": "other"}}
    assert job["scrape_interval"] == "15s"
    plan = synth("dev", {"exporterPort": 9400})
    (container,) = exporters(plan).values()
    assert [(p["internal"], p["external"]) for p in container["inputs"]["ports"]] == [(5000, 9400)]


@pytest.mark.parametrize(
    ("endpoint", "address"),
    [
        ("unix:///var/run/docker.sock", "localhost"),
        ("ssh://deploy@gpu-node-1.example.internal", "gpu-node-1.example.internal"),
        ("ssh://gpu-node-2:2222", "gpu-node-2"),
        ("tcp://10.1.2.3:2376", "10.1.2.3"),
    ],
)
def test_exporter_address_from_the_docker_endpoint(endpoint: str, address: str) -> None:
    assert exporter_address(endpoint) == address


def test_reordering_hosts_renames_no_exporter_resource(prod_docker: Plan) -> None:
    hosts = stack_file("prod")[P + "hosts"]
    reordered = synth("prod", hosts=list(reversed(hosts)))

    def names(plan: Plan) -> set[tuple[str, str]]:
        return {
            (r["type"], r["name"])
            for r in plan.resources
            if "monitoring" in r["type"] or r["name"].endswith("amd-device-metrics-exporter")
        }

    # Per host: the GPU exporter's component, image and container, and the HostExporters component; the
    # MonitoringHost component (their children are named after their hosts too: tests/test_docker_hosts.py).
    assert names(reordered) == names(prod_docker) and len(names(prod_docker)) == 4 * len(hosts) + 1


def test_disabled_monitoring_declares_nothing() -> None:
    plan = synth("dev", {"enabled": False}, kubernetes={})
    assert not [r for r in plan.resources if "monitoring" in r["type"] or "exporter" in r["name"]]


def test_bad_monitoring_config_stops_with_the_key() -> None:
    message = refusal("dev", {"thresholds": {"vramFullFraction": 2}})
    assert "rocm-stack:monitoring.thresholds.vramFullFraction" in message
    # One model for the whole fleet is gone: the message says what replaced it.
    assert "modelThresholds" in refusal("prod", {"gpuModel": "MI250"})


# --- Kubernetes ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dev_operator() -> Plan:
    return synth("dev", kubernetes={"namespaces": ["monitoring"]})


@pytest.fixture(scope="module")
def dev_device_plugin() -> Plan:
    return synth("dev", kubernetes={"mode": "device-plugin", "namespaces": ["monitoring"]})


def test_prometheus_rule_is_valid_and_carries_the_alert_rules(dev_operator: Plan) -> None:
    rule = manifest_of(only(dev_operator, RULE))
    validate_object(rule, PROMETHEUS_RULE_CRD)
    watched = gpu_stack_workloads(KubernetesConfig(namespaces=["monitoring"]))
    assert rule["spec"] == alerts.prometheus_rule_spec(MonitoringConfig(), watched)
    assert [g["name"] for g in rule["spec"]["groups"]] == [
        *(f"rocm-gpu-{model.lower()}" for model in MODELS),
        "rocm-gpu-exporter",
        "rocm-vllm",
        "rocm-gpu-kubernetes",
    ]
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_prometheus_rule_crd_check_catches_a_misspelled_field(dev_operator: Plan) -> None:
    rule = copy.deepcopy(manifest_of(only(dev_operator, RULE)))
    rule["spec"]["groups"][0]["rules"][0]["for_"] = rule["spec"]["groups"][0]["rules"][0].pop("for")
    with pytest.raises(AssertionError, match="for_"):
        validate_object(rule, PROMETHEUS_RULE_CRD)


def test_dashboard_configmap_is_valid_and_labelled_for_the_sidecar(dev_operator: Plan) -> None:
    config_map = manifest_of(only(dev_operator, CONFIG_MAP))
    validate_object(config_map)  # kubernetes-validate, strict
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"] == {"rocm-gpus.json": dashboard.dashboard_json_text()}


def test_dev_installs_a_pinned_kube_prometheus_stack_and_orders_the_crs_after_it(dev_operator: Plan) -> None:
    (release,) = kube_prometheus_stack(dev_operator)
    i = release["inputs"]
    assert (i["name"], i["chart"], i["version"]) == ("kube-prometheus-stack", "kube-prometheus-stack", "88.5.3")
    assert i["repositoryOpts"]["repo"] == "https://prometheus-community.github.io/helm-charts"
    assert i["namespace"] == "monitoring" and i["atomic"] and i["cleanupOnFail"] and i["timeout"] == 900
    spec = i["values"]["prometheus"]["prometheusSpec"]
    assert spec["serviceMonitorSelectorNilUsesHelmValues"] is False and spec["ruleSelectorNilUsesHelmValues"] is False
    assert i["values"]["grafana"]["sidecar"]["dashboards"]["label"] == "grafana_dashboard"
    assert release["urn"] in only(dev_operator, RULE)["depends_on"]
    assert not release["protect"]


def test_prod_uses_the_clusters_prometheus_unless_told_otherwise() -> None:
    prod = synth("prod", kubernetes={"namespaces": ["monitoring"], "provider": {"context": "gpu-prod"}})
    assert kube_prometheus_stack(prod) == []
    assert not [d for d in only(prod, RULE)["depends_on"] if RELEASE in d]
    owned = synth(
        "prod",
        {"kubePrometheusStack": {"install": True}},
        kubernetes={"namespaces": ["monitoring"], "provider": {"context": "gpu-prod"}},
    )
    (release,) = kube_prometheus_stack(owned)
    assert release["protect"]


def test_operator_mode_leaves_the_exporter_to_the_device_config(dev_operator: Plan) -> None:
    assert [m["name"] for m in dev_operator.of_type(SERVICE_MONITOR)] == [
        "monitoring-rocm-vllm",
        "monitoring-rocm-vllm-router",
    ]
    assert not [d for d in dev_operator.of_type(DAEMON_SET) if "metrics-exporter" in d["name"]]


def test_device_config_service_monitor_block_fits_the_gpu_operator_crd() -> None:
    crd = yaml.safe_load((Path(__file__).parent / "data" / "kubernetes" / "deviceconfig-crd.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema = strict_structural_schema(
        spec["properties"]["metricsExporter"]["properties"]["prometheus"]["properties"]["serviceMonitor"]
    )
    block = device_config_service_monitor(MonitoringConfig())
    jsonschema.validate(block, schema)
    assert {"targetLabel": "job", "replacement": EXPORTER_JOB, "action": "replace"} in block["relabelings"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**block, "honourLabels": True}, schema)


def test_device_plugin_mode_runs_the_exporter_and_a_matching_service_monitor(dev_device_plugin: Plan) -> None:
    ours = [r for r in dev_device_plugin.kubernetes_objects() if r["parent"] and K8S_MONITORING in r["parent"]]
    manifests = {(m["kind"], m["metadata"]["name"]): m for m in map(manifest_of, ours)}
    for (kind, _), manifest in manifests.items():
        if kind == "ServiceMonitor":
            jsonschema.validate(manifest, SERVICE_MONITOR_SUBSET)
        elif kind == "PrometheusRule":
            validate_object(manifest, PROMETHEUS_RULE_CRD)
        else:
            validate_object(manifest)
    daemon_set = manifests[("DaemonSet", "amd-device-metrics-exporter")]
    service = manifests[("Service", "amd-device-metrics-exporter")]
    monitor = manifests[("ServiceMonitor", "amd-device-metrics-exporter")]
    pod = daemon_set["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == EXPORTER_IMAGE and container["securityContext"]["privileged"] is True
    assert {v["hostPath"]["path"] for v in pod["spec"]["volumes"]} == {"/dev", "/sys", "/var/lib/kubelet/pod-resources"}
    # The chain Prometheus follows: ServiceMonitor -> Service (labels, port name) -> pods (selector, port).
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (port,) = service["spec"]["ports"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == port["name"] and port["targetPort"] in {p["name"] for p in container["ports"]}
    assert endpoint["honorLabels"] is True
    assert {r.get("targetLabel") for r in endpoint["relabelings"]} == {"job", "host", "gpu_model", None}
    # The GPU model comes from the node's labeller label, which Prometheus only sees with node metadata attached.
    assert monitor["spec"]["attachMetadata"] == {"node": True}
    # The exporter pod's own pod/container target labels are dropped: with honorLabels they would fill in for
    # GPUs without a workload, and the idle-while-allocated alert would take every idle GPU for a held one.
    assert {"action": "labeldrop", "regex": "pod|container"} in endpoint["relabelings"]
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": [service["metadata"]["namespace"]]}
    binding = manifests[("ClusterRoleBinding", "amd-device-metrics-exporter")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "amd-device-metrics-exporter", "namespace": service["metadata"]["namespace"]}
    ]


def test_service_monitor_subset_schema_rejects_a_misspelled_field(dev_device_plugin: Plan) -> None:
    monitor = copy.deepcopy(
        manifest_of(dev_device_plugin.get(SERVICE_MONITOR, "monitoring-amd-device-metrics-exporter"))
    )
    monitor["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(monitor, SERVICE_MONITOR_SUBSET)


# --- Grafana dashboard --------------------------------------------------------------------------------------


def test_committed_dashboard_is_the_generated_one() -> None:
    assert dashboard.DASHBOARD_FILE.read_text(encoding="utf-8") == dashboard.dashboard_json_text(), (
        "monitoring/dashboards/rocm-gpus.json is stale: run `rocm-stack dashboard --write`"
    )


def _rows(board: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Panels under each row (the SDK lays expanded rows out flat: a row panel, then its panels)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    current: list[dict[str, Any]] = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            current = rows.setdefault(panel["title"], [])
        else:
            current.append(panel)
    return rows


def test_dashboard_is_built_with_the_pinned_grafana_foundation_sdk() -> None:
    """grafana-foundation-sdk's PyPI versions are `<epoch>!<Grafana version>`; unpinned, pip picks the highest
    epoch, the Grafana 10.1 build (its METADATA: "types and builders generated for Grafana v10.1.x"). Pinned to
    the 11.6 build, whose dashboards carry schemaVersion 41."""
    from importlib.metadata import version

    pin = next(
        line
        for line in (ROOT / "requirements.txt").read_text().splitlines()
        if line.startswith("grafana-foundation-sdk==")
    )
    assert (
        pin
        == f"grafana-foundation-sdk=={version('grafana-foundation-sdk')}"
        == "grafana-foundation-sdk==1769699379!11.6.0"
    )
    board = json.loads(dashboard.DASHBOARD_FILE.read_text(encoding="utf-8"))
    assert board["schemaVersion"] == 41 and board["uid"] == dashboard.DASHBOARD_UID
    assert "grafana_foundation_sdk" in Path(dashboard.__file__).read_text()


def test_dashboard_has_host_and_gpu_variables_and_the_panels() -> None:
    board = json.loads(dashboard.DASHBOARD_FILE.read_text(encoding="utf-8"))
    variables = {v["name"]: v for v in board["templating"]["list"]}
    # A mixed fleet is viewed one GPU model at a time (the gpu_model target label the alert rules select by); "All"
    # is `.*` so GPUs without that label still show.
    assert variables["model"]["query"] == "label_values(gpu_total_vram, gpu_model)"
    assert variables["model"]["allValue"] == ".*"
    assert variables["host"]["query"] == 'label_values(gpu_total_vram{gpu_model=~"$model"}, hostname)'
    assert variables["gpu"]["query"] == 'label_values(gpu_total_vram{hostname=~"$host"}, gpu_id)'
    rows = _rows(board)
    assert list(rows) == ["Fleet", "GPUs", "Docker hosts", "vLLM"]
    # Every Docker-host panel follows the host variable (the e2e evaluates them on a real server).
    assert all('host=~"$host"' in t["expr"] for p in rows["Docker hosts"] for t in p["targets"])
    titles = " | ".join(p["title"] for p in rows["GPUs"])
    for topic in ("temperature", "power", "utilisation", "VRAM", "ECC", "health"):
        assert topic in titles
    # Ids 1..N, the fleet row's last: it came later, above panels whose ids Grafana links already address.
    ids = [p["id"] for p in board["panels"]]
    assert sorted(ids) == list(range(1, len(ids) + 1)) and ids[:2] == [len(ids) - 1, len(ids)]
    assert ids[2:] == list(range(1, len(ids) - 1))
    # The fleet table: one instant table query per column, by host, merged on host.
    (fleet,) = rows["Fleet"]
    assert [t["format"] for t in fleet["targets"]] == ["table"] * len(dashboard.FLEET_COLUMNS)
    assert all(t["instant"] and "by (host)" in t["expr"] and 'host=~"$host"' in t["expr"] for t in fleet["targets"])
    assert [t["id"] for t in fleet["transformations"]] == ["merge", "organize"]
    for panel in rows["GPUs"][:-1]:  # per-GPU panels filter by both variables (not the exporter targets)
        assert all(
            'hostname=~"$host"' in t["expr"] and 'gpu_id=~"$gpu"' in t["expr"] and 'gpu_model=~"$model"' in t["expr"]
            for t in panel["targets"]
        )


def _vllm_metrics() -> tuple[set[str], set[str]]:
    """vLLM 0.11.2's Prometheus metric names (vllm/v1/metrics/loggers.py, vendored), and those defined only
    for `--show-hidden-metrics-for-version` (preceded by a "Deprecated in" comment)."""
    lines = (DATA / "reference" / "vllm-0.11.2-metrics-loggers.py.txt").read_text(encoding="utf-8").splitlines()
    names, hidden = set(), set()
    for index, line in enumerate(lines):
        if match := re.search(r'name="(vllm:[a-z_]+)"', line):
            names.add(match.group(1))
            if any("Deprecated in" in earlier for earlier in lines[max(0, index - 6) : index]):
                hidden.add(match.group(1))
    return names, hidden


def test_vllm_row_queries_metrics_vllm_exports() -> None:
    """vllm/v1/metrics/loggers.py @ 0.11.2: `vllm:num_requests_running` (L398), `vllm:num_requests_waiting`
    (L408), `vllm:kv_cache_usage_perc` "KV-cache usage. 1 means 100 percent usage." (L495), the histogram
    `vllm:time_to_first_token_seconds` (L705), labels ["model_name", "engine"] (L379). `vllm:gpu_cache_usage_perc`
    is "Deprecated in 0.9.2 - Renamed as vllm:kv_cache_usage_perc" and only shown with
    --show-hidden-metrics-for-version (L445-450): a dashboard on it would be empty."""
    names, hidden = _vllm_metrics()
    assert "vllm:gpu_cache_usage_perc" in hidden and "vllm:kv_cache_usage_perc" in names - hidden
    panels = _rows(json.loads(dashboard.DASHBOARD_FILE.read_text(encoding="utf-8")))["vLLM"]
    used = set()
    for panel in panels:
        for target in panel["targets"]:
            metrics, labels = promql_names(target["expr"].replace("$__rate_interval", "5m"))
            metrics = {m.removesuffix("_bucket") for m in metrics}
            assert metrics <= names - hidden, target["expr"]
            assert labels <= {"model_name", "engine", "le"}, target["expr"]
            used |= metrics
    assert used == {
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:time_to_first_token_seconds",
        "vllm:kv_cache_usage_perc",
    }


def test_vllm_is_scraped_where_the_dashboard_reads_it(dev_operator: Plan) -> None:
    """The vLLM Services (labels app.kubernetes.io/name=vllm, port `http`) of any namespace; /metrics is outside
    the API key's /v1 paths."""
    monitor = manifest_of(dev_operator.get(SERVICE_MONITOR, "monitoring-rocm-vllm"))
    jsonschema.validate(monitor, SERVICE_MONITOR_SUBSET)
    assert monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/managed-by": "rocm-stack",
    }
    assert monitor["spec"]["namespaceSelector"] == {"any": True}
    assert monitor["spec"]["endpoints"][0]["port"] == "http" and monitor["spec"]["endpoints"][0]["path"] == "/metrics"


def test_dashboard_queries_use_only_exporter_metrics_and_labels() -> None:
    board = json.loads(dashboard.DASHBOARD_FILE.read_text(encoding="utf-8"))
    matrix = support_matrix()
    allowed_labels = exporter_labels() | PROMETHEUS_LABELS
    exprs = [t["expr"] for p in _rows(board)["GPUs"] for t in p["targets"]]
    exprs += [
        v["query"].replace("label_values(", "").rsplit(",", 1)[0]
        for v in board["templating"]["list"]
        if v["type"] == "query"
    ]
    seen = set()
    for expr in exprs:
        concrete = (
            expr.replace("$__rate_interval", "5m").replace("$host", ".*").replace("$gpu", ".*").replace("$model", ".*")
        )
        metrics, labels = promql_names(concrete)
        seen |= metrics
        assert metrics - PROMETHEUS_METRICS <= set(matrix), expr
        # gpu_model is the stack's own target label (scrape config, Kubernetes relabeling), not the exporter's.
        assert labels <= allowed_labels | {alerts.MODEL_LABEL}, expr
    assert {
        "gpu_junction_temperature",
        "gpu_package_power",
        "gpu_used_vram",
        "gpu_ecc_uncorrect_total",
        "gpu_health",
    } <= seen


def test_operator_mode_device_config_scrapes_with_the_alerts_labels(dev_plan) -> None:
    """The GPU Operator's ServiceMonitor is the monitoring section's (job/host relabelings the rules select on)."""
    from schema import load
    from components.monitoring import device_config_service_monitor

    [device_config] = dev_plan.of_type("kubernetes:amd.com/v1alpha1:DeviceConfig")
    cfg = load("dev", stack_file("dev"))
    assert device_config["inputs"]["spec"]["metricsExporter"]["prometheus"][
        "serviceMonitor"
    ] == device_config_service_monitor(cfg.monitoring)


def test_device_plugin_exporter_runs_on_the_device_plugins_nodes() -> None:
    selector = {"amd.com/gpu": "true"}
    plan = synth(
        "dev",
        kubernetes={"mode": "device-plugin", "namespaces": ["monitoring"], "devicePlugin": {"nodeSelector": selector}},
    )
    node_selectors = {
        r["name"]: r["inputs"]["spec"]["template"]["spec"]["nodeSelector"] for r in plan.of_type(DAEMON_SET)
    }
    assert node_selectors == {
        "amdgpu-device-plugin-daemonset": selector,
        "amdgpu-device-plugin-labeller": selector,
        "monitoring-amd-device-metrics-exporter": selector,
    }


def test_device_plugin_exporter_tolerates_the_gpu_node_taints() -> None:
    """Like the device plugin: a NoSchedule taint on the GPU nodes would otherwise keep the exporter off them."""
    taint = {"key": "amd.com/gpu", "value": "present", "effect": "NoSchedule"}
    plan = synth("dev", kubernetes={"mode": "device-plugin", "namespaces": ["monitoring"], "gpuNodeTaints": [taint]})
    exporter = plan.get(DAEMON_SET, "monitoring-amd-device-metrics-exporter")
    assert exporter["inputs"]["spec"]["template"]["spec"]["tolerations"] == [{**taint, "operator": "Equal"}]


def test_device_plugin_mode_alerts_watch_its_daemon_sets_and_the_exporter(dev_device_plugin: Plan) -> None:
    rule = manifest_of(only(dev_device_plugin, RULE))
    [group] = [g for g in rule["spec"]["groups"] if g["name"] == "rocm-gpu-kubernetes"]
    rules = {r["alert"]: r["expr"] for r in group["rules"]}
    assert "GpuOperatorDown" not in rules
    assert rules["GpuStackDaemonSetUnavailable"] == (
        'kube_daemonset_status_number_unavailable{namespace="kube-system", '
        'daemonset=~"amdgpu-device-plugin-daemonset|amdgpu-labeller-daemonset"} > 0 '
        'or kube_daemonset_status_number_unavailable{daemonset="amd-device-metrics-exporter"} > 0'
    )


def test_kubernetes_targets_get_the_model_of_their_nodes_device_id() -> None:
    """The node labeller writes the PCI device ID in lower-case hex: "Example labels for an AMD MI300X GPU:
    amd.com/gpu.device-id=74a1" (ROCm/k8s-device-plugin installation guide, "Install Node Labeler"). Prometheus
    relabeling matches the regex anchored (^(?:regex)$) and leaves the target alone when it does not match."""
    rules = [r for r in exporter_relabelings() if r.get("targetLabel") == "gpu_model"]

    def model_of(device_id: str) -> str | None:
        for rule in rules:
            if re.fullmatch(rule["regex"], device_id):
                return rule["replacement"]
        return None

    assert model_of("74a1") == "MI300X" and model_of("75a3") == "MI355X" and model_of("75A0") == "MI350X"
    assert model_of("740f") == "MI210" and model_of("740c") in {"MI250X", "MI250"} and model_of("1586") is None
    assert {r["sourceLabels"][0] for r in rules} == {"__meta_kubernetes_node_label_amd_com_gpu_device_id"}
    # Both operator mode (the DeviceConfig's serviceMonitor) and device-plugin mode attach node metadata.
    assert device_config_service_monitor(MonitoringConfig())["attachMetadata"] == {"node": True}


def test_kubernetes_vllm_targets_get_the_job_the_vllm_rules_select(dev_operator: Plan) -> None:
    """A ServiceMonitor's job is the Service name unless relabelled (Prometheus Operator docs, ServiceMonitor
    `jobLabel`); the vLLM rules select job="vllm" on Kubernetes and Docker alike."""
    monitor = next(
        manifest_of(r) for r in dev_operator.of_type(SERVICE_MONITOR) if r["inputs"]["metadata"]["name"] == "rocm-vllm"
    )
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["relabelings"] == [{"action": "replace", "targetLabel": "job", "replacement": alerts.VLLM_JOB}]
