"""Monitoring config and GPU alert rules: thresholds, exporter metric names, `promtool check/test rules`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from domain import alerts
from domain.fleet import DeclaredHost, DeclaredPartition
from tools import cli
from domain.gpus import MODELS
from schema.monitoring import MODEL_DEFAULTS, MonitoringConfig, problems
from monitoring_reference import (
    PROMETHEUS_LABELS,
    PROMETHEUS_METRICS,
    exporter_labels,
    kube_state_metrics,
    promql_names,
    support_matrix,
)
from schema.kubernetes import KubernetesConfig
from components.k8s import gpu_stack_workloads
import upstream_go

# The GPU stack of the default operator mode, as the PrometheusRule watches it.
OPERATOR_STACK = gpu_stack_workloads(KubernetesConfig())

DATA = Path(__file__).parent / "data" / "monitoring"
PROMTOOL_TESTS = DATA / "promtool"
ALL_MODELS = sorted(MODEL_DEFAULTS)
ALL_MODELS_IN_ORDER = list(MODELS)


@pytest.fixture(scope="session")
def promtool() -> str:
    path = shutil.which("promtool")
    if path:
        return path
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail("promtool is missing in CI: `apt-get install -y --no-install-recommends prometheus` (Debian)")
    pytest.skip("promtool not installed (apt-get install prometheus); CI runs these tests")


def _run_promtool(promtool: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool, *map(str, args)], capture_output=True, text=True, timeout=60)


def _unit_test(promtool: str, tmp_path: Path, rules_text: str, test_file: str) -> subprocess.CompletedProcess[str]:
    """promtool resolves `rule_files` next to the test file, so both go into one folder."""
    (tmp_path / "rules.yml").write_text(rules_text, encoding="utf-8")
    shutil.copy(PROMTOOL_TESTS / test_file, tmp_path / test_file)
    return _run_promtool(promtool, "test", "rules", tmp_path / test_file)


# --- configuration --------------------------------------------------------------------------------------------


def test_model_defaults_differ_by_family_and_overrides_win() -> None:
    cfg = MonitoringConfig()
    assert (cfg.effective_thresholds("MI300X").power_cap_watts, cfg.effective_thresholds("MI250").power_cap_watts) == (
        750,
        500,
    )
    tuned = MonitoringConfig.model_validate(
        {
            "thresholds": {"gpuTemperatureCelsius": 90, "idleFor": "1h"},
            "modelThresholds": {"MI250": {"gpuTemperatureCelsius": 75, "powerCapWatts": 450}},
        }
    )
    mi300x, mi250 = tuned.effective_thresholds("MI300X"), tuned.effective_thresholds("MI250")
    assert (mi300x.gpu_temperature_celsius, mi300x.idle_for, mi300x.power_cap_watts) == (90, "1h", 750)
    # A model's own overrides win over the fleet-wide ones.
    assert (mi250.gpu_temperature_celsius, mi250.idle_for, mi250.power_cap_watts) == (75, "1h", 450)


def test_each_model_has_its_board_power_and_mi308x_none() -> None:
    # Board TBP: AMD product pages amd.com/en/products/accelerators/instinct/mi350/mi355x.html (1400 W) and
    # .../mi350x.html (1000 W), the figures AMD gave at ISC/Hot Chips 2025 (tomshardware.com "AMD's Instinct MI355X
    # accelerator will consume 1,400 watts": "MI350X module with a 1000W power consumption ... MI355X that will
    # consume up to 1400W"); MI300X 750 W as rocm-smi shows its default cap ("PwrCap 750.0W", ROCm issue #5231).
    caps = {model: MODEL_DEFAULTS[model].power_cap_watts for model in ("MI355X", "MI350X", "MI325X", "MI300X")}
    assert caps == {"MI355X": 1400, "MI350X": 1000, "MI325X": 1000, "MI300X": 750}
    # MI308X: AMD publishes no TBP; it must not silently take MI300X's 750 W. A fleet with MI308X hosts must say.
    assert MODEL_DEFAULTS["MI308X"].power_cap_watts is None
    found = dict(problems(MonitoringConfig(), [("cn-1", "MI308X"), ("cn-2", "MI308X")]))
    assert "'cn-1' has MI308X" in found["monitoring.modelThresholds.MI308X.powerCapWatts"]
    assert "GpuPowerAtCap" not in {rule["alert"] for rule in alerts.alert_rules(MonitoringConfig(), "MI308X")}
    tuned = MonitoringConfig.model_validate({"modelThresholds": {"MI308X": {"powerCapWatts": 650}}})
    assert list(problems(tuned, [("cn-1", "MI308X")])) == []
    exprs = {rule["alert"]: rule["expr"] for rule in alerts.alert_rules(tuned, "MI308X")}
    assert exprs["GpuPowerAtCap"] == 'gpu_package_power{gpu_model="MI308X"} >= 617.5'


@pytest.mark.parametrize(
    ("stack_value", "key"),
    [
        ({"thresholds": {"gpuTemperatureCelsius": 300}}, "thresholds.gpuTemperatureCelsius"),
        ({"thresholds": {"vramFullFraction": 1}}, "thresholds.vramFullFraction"),
        ({"thresholds": {"powerCapFraction": 0.2}}, "thresholds.powerCapFraction"),
        ({"thresholds": {"idleUtilizationPercent": 0}}, "thresholds.idleUtilizationPercent"),
        ({"thresholds": {"idleFor": "half an hour"}}, "thresholds.idleFor"),
        ({"thresholds": {"eccWindow": "0s"}}, "thresholds.eccWindow"),
        ({"thresholds": {"eccCorrectableMaxIncrease": -1}}, "thresholds.eccCorrectableMaxIncrease"),
        ({"thresholds": {"junctionTemp": 90}}, "thresholds.junctionTemp"),
        ({"modelThresholds": {"MI100": {"powerCapWatts": 300}}}, "modelThresholds.MI100.[key]"),
        ({"modelThresholds": {"MI250": {"idleFor": "1h"}}}, "modelThresholds.MI250.idleFor"),
        ({"exporterImage": "rocm/device-metrics-exporter:latest"}, "exporterImage"),
        ({"exporterImage": "rocm/device-metrics-exporter"}, "exporterImage"),
        ({"exporterPort": 70000}, "exporterPort"),
        ({"scrapeInterval": "1m30s"}, "scrapeInterval"),
        ({"kubePrometheusStack": {"chartVersion": "^91.0"}}, "kubePrometheusStack.chartVersion"),
    ],
)
def test_bad_values_are_rejected_with_their_key(stack_value: dict, key: str) -> None:
    with pytest.raises(ValidationError) as error:
        MonitoringConfig.model_validate(stack_value)
    locations = {".".join(map(str, e["loc"])) for e in error.value.errors(include_url=False)}
    assert key in locations


def test_cross_field_problems() -> None:
    # A mixed fleet (MI2xx and MI3xx hosts) is fine: each model has its own rules.
    fleet = [("gpu-1", "MI300X"), ("old-box", "MI250"), ("new-box", "MI355X"), ("odd", "other")]
    assert list(problems(MonitoringConfig(), fleet)) == []
    cfg = MonitoringConfig.model_validate({"scrapeInterval": "1m", "thresholds": {"eccWindow": "90s"}})
    found = dict(problems(cfg, [("old-box", "MI250X")]))
    assert "two scrape intervals" in found["monitoring.thresholds.eccWindow"]


def test_the_single_gpu_model_key_is_refused_with_what_replaced_it() -> None:
    with pytest.raises(ValidationError) as error:
        MonitoringConfig.model_validate({"gpuModel": "MI250"})
    assert "modelThresholds" in str(error.value) and "every GPU model" in str(error.value)


def test_kube_prometheus_stack_defaults_by_environment() -> None:
    assert MonitoringConfig().installs_kube_prometheus_stack("dev")
    assert not MonitoringConfig().installs_kube_prometheus_stack("prod")
    forced = MonitoringConfig.model_validate({"kubePrometheusStack": {"install": True}})
    assert forced.installs_kube_prometheus_stack("prod")


# --- rules: content and names -----------------------------------------------------------------------------


def test_committed_rules_file_is_the_generated_default() -> None:
    assert alerts.RULES_FILE.read_text(encoding="utf-8") == alerts.rules_file_text(MonitoringConfig(), ()), (
        "monitoring/rules/gpu-alerts.rules.yml is stale: run `rocm-stack alerts --write`"
    )


def test_cli_writes_the_rules_of_a_stack(tmp_path: Path) -> None:
    out = tmp_path / "rules" / "gpu.yml"
    assert cli.run(["alerts", "--stack", "prod", "--out", str(out)]) == 0
    # The committed prod stack sets no monitoring section: its rules are the defaults, and the series of what it
    # declares of its four 8-GPU hosts and their training/vLLM partitions.
    written = yaml.safe_load(out.read_text(encoding="utf-8"))["groups"]
    assert written[:-1] == yaml.safe_load(alerts.RULES_FILE.read_text(encoding="utf-8"))["groups"]
    declared = written[-1]["rules"]
    assert written[-1]["name"] == "rocm-stack-declared"
    assert {r["labels"]["host"]: r["expr"] for r in declared if r["record"] == alerts.DECLARED_GPUS} == {
        f"gpu-node-{n}": "vector(8)" for n in range(1, 5)
    }
    assert [
        (r["labels"]["host"], r["labels"]["name"], r["expr"])
        for r in declared
        if r["record"] == alerts.DECLARED_PARTITION
    ] == [
        ("gpu-node-1", "train-a", "vector(0)"),
        ("gpu-node-2", "train-a", "vector(0)"),
        ("gpu-node-3", "serve-b", "vector(1800)"),
        ("gpu-node-4", "serve-b", "vector(1800)"),
    ]


def test_cli_never_overwrites_a_file_unasked_and_a_missing_stack_is_exit_2(tmp_path: Path, capsys) -> None:
    assert cli.run(["alerts", "--out", str(alerts.RULES_FILE)]) == 2
    assert capsys.readouterr().err == f"{alerts.RULES_FILE} exists: pass --write to overwrite it\n"
    assert cli.run(["alerts", "--stack", "staging"]) == 2
    assert capsys.readouterr().err == "stacks/Pulumi.staging.yaml: no such stack file; the stacks are: dev, prod\n"


def test_thresholds_reach_the_expressions() -> None:
    cfg = MonitoringConfig.model_validate({"thresholds": {"gpuTemperatureCelsius": 91, "powerCapWatts": 600}})
    exprs = {rule["alert"]: rule["expr"] for rule in alerts.alert_rules(cfg, "MI300X")}
    assert exprs["GpuJunctionTemperatureHigh"] == 'gpu_junction_temperature{gpu_model="MI300X"} > 91'
    assert exprs["GpuPowerAtCap"] == 'gpu_package_power{gpu_model="MI300X"} >= 570'


def test_every_model_has_its_group_selecting_its_gpus() -> None:
    groups = alerts.rule_groups(MonitoringConfig())
    assert [g["name"] for g in groups] == [f"rocm-gpu-{m.lower()}" for m in ALL_MODELS_IN_ORDER] + [
        "rocm-gpu-exporter",
        "rocm-vllm",
        "rocm-docker-hosts",
    ]
    for group in groups[:-3]:
        model = group["name"].removeprefix("rocm-gpu-").upper()
        for rule in group["rules"]:
            # Every exporter metric of the rule is restricted to the group's model.
            metrics, _ = promql_names(rule["expr"])
            selected = re.findall(r"\b(gpu_\w+)\{[^}]*gpu_model=\"" + model + '"', rule["expr"])
            assert {m for m in metrics if m.startswith("gpu_")} == set(selected), rule["alert"]
            assert rule["labels"]["gpu_model"] == model


@pytest.mark.parametrize("model", ALL_MODELS)
def test_rules_use_only_metrics_the_exporter_emits_for_the_family(model: str) -> None:
    family = MODELS[model].line
    matrix = support_matrix()
    ksm = kube_state_metrics()
    for rule in alerts.alert_rules(MonitoringConfig(), model) + alerts.exporter_alert_rules(MonitoringConfig()):
        metrics, labels = promql_names(rule["expr"])
        allowed_labels = exporter_labels() | PROMETHEUS_LABELS
        for metric in metrics - PROMETHEUS_METRICS:
            if metric in ksm:  # kube-state-metrics (Kubernetes only; an empty match elsewhere)
                allowed_labels |= ksm[metric]
                continue
            assert metric in matrix, f"{rule['alert']}: {metric} is not an exporter metric"
            assert family in matrix[metric], f"{rule['alert']}: {metric} is not emitted on {family}"
        # gpu_model is our target label (Docker scrape config, Kubernetes relabeling), not the exporter's.
        assert labels <= allowed_labels | {alerts.MODEL_LABEL}, rule["alert"]
        templated = {part.split("}}")[0].strip() for part in rule["annotations"]["description"].split("$labels.")[1:]}
        assert templated <= allowed_labels, rule["alert"]


def test_kubernetes_rules_use_kube_state_metrics_names_and_labels() -> None:
    """Metric and label names as kube-state-metrics documents them (vendored docs/metrics tables)."""
    ksm = kube_state_metrics()
    rules = alerts.kubernetes_alert_rules(MonitoringConfig(), OPERATOR_STACK)
    assert [r["alert"] for r in rules] == ["GpuOperatorDown", "GpuStackDaemonSetUnavailable", "GpuAllocatableDropped"]
    for rule in rules:
        metrics, labels = promql_names(rule["expr"])
        assert metrics <= set(ksm), rule["alert"]
        assert labels <= set().union(*(ksm[m] for m in metrics)), rule["alert"]


def test_gpu_resource_label_value_is_the_one_kube_state_metrics_writes() -> None:
    """kube-state-metrics internal/store/node.go: an extended resource's label value is
    SanitizeLabelName(resourceName), which replaces `invalidLabelCharRE = regexp.MustCompile(`[^a-zA-Z0-9_]`)`
    with `_` (internal/store/utils.go L38, L148-149), unit `integer`."""
    assert alerts.KSM_GPU_RESOURCE == "amd_com_gpu"
    assert (
        'resource="amd_com_gpu", unit="integer"'
        in alerts.kubernetes_alert_rules(MonitoringConfig(), OPERATOR_STACK)[-1]["expr"]
    )


def test_operator_stack_names_follow_the_chart_and_the_operator() -> None:
    """Chart templates/deployment.yaml: `{{ include "helm-charts-k8s.fullname" . }}-controller-manager`, fullname =
    "<release>-<chart>" unless the release name contains the chart name (_helpers.tpl); operands are
    `<DeviceConfig>-device-plugin`, `-node-labeller` (internal/utils.go L77-79) and `-metrics-exporter`
    (metricsexporter.go L61, device_config_reconciler.go L763) @ v1.5.1."""
    assert OPERATOR_STACK.deployments == (("kube-amd-gpu", "amd-gpu-operator-gpu-operator-charts-controller-manager"),)
    assert OPERATOR_STACK.daemon_sets == tuple(
        ("kube-amd-gpu", f"gpu-operator-{s}") for s in ("device-plugin", "node-labeller", "metrics-exporter")
    )
    renamed = gpu_stack_workloads(
        KubernetesConfig.model_validate(
            {"gpuOperator": {"releaseName": "gpu-operator-charts", "deviceConfig": {"name": "mi300x"}}}
        )
    )
    assert renamed.deployments == (("kube-amd-gpu", "gpu-operator-charts-controller-manager"),)
    assert renamed.daemon_sets[0] == ("kube-amd-gpu", "mi300x-device-plugin")


def test_promql_names_sees_every_name() -> None:
    """The name checks above are only as good as this extraction."""
    metrics, labels = promql_names(
        '(avg without (xcc_index) (a{pod!=""}) < 5) and on (hostname) (b or absent(up{job="x"}))'
    )
    assert (metrics, labels) == ({"a", "b", "up"}, {"xcc_index", "pod", "hostname", "job"})


def test_prometheus_rule_spec_has_the_rules_file_groups() -> None:
    cfg = MonitoringConfig.model_validate({"modelThresholds": {"MI250": {"powerCapWatts": 450}}})
    assert alerts.prometheus_rule_spec(cfg) == yaml.safe_load(alerts.rules_file_text(cfg, ()))


# --- promtool -------------------------------------------------------------------------------------------------


def test_promtool_check_rules(promtool: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yml"
    rules.write_text(alerts.rules_file_text(MonitoringConfig(), ()), encoding="utf-8")
    result = _run_promtool(promtool, "check", "rules", rules)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(group["rules"]) for group in alerts.rule_groups(MonitoringConfig()))
    assert f"SUCCESS: {count} rules found" in result.stdout


@pytest.mark.parametrize("test_file", ["mi3xx.test.yml", "mi2xx.test.yml", "mixed.test.yml"])
def test_promtool_unit_tests_of_the_committed_rules(promtool: str, tmp_path: Path, test_file: str) -> None:
    """mi3xx: MI300X GPUs, mi2xx: MI250 GPUs, mixed: MI250 + MI300X + MI355X + MI308X hosts in one fleet."""
    result = _unit_test(promtool, tmp_path, alerts.RULES_FILE.read_text(encoding="utf-8"), test_file)
    assert result.returncode == 0, result.stdout + result.stderr


def test_promtool_mixed_fleet_case_fails_without_the_model_split(promtool: str, tmp_path: Path) -> None:
    """The mixed-fleet unit test pins the split: rules that ignore the model label (the MI300X thresholds for every
    GPU) page the MI355X at 1000 W and fail it."""
    text = alerts.RULES_FILE.read_text(encoding="utf-8").replace('{gpu_model="MI300X"}', "")
    result = _unit_test(promtool, tmp_path, text, "mixed.test.yml")
    assert result.returncode != 0 and 'hostname="node-x"' in result.stdout + result.stderr


def test_promtool_unit_tests_of_the_kubernetes_rules(promtool: str, tmp_path: Path) -> None:
    rules = yaml.safe_dump({"groups": alerts.rule_groups(MonitoringConfig(), OPERATOR_STACK)[-1:]})
    result = _unit_test(promtool, tmp_path, rules, "kubernetes.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_idle_alert_skips_serving_replicas_only_through_kube_pod_owner(promtool: str, tmp_path: Path) -> None:
    """Without the ReplicaSet exclusion the idle vLLM replica (GPU 5 of the test) would page: the rule without it
    fails the unit test."""
    text = alerts.RULES_FILE.read_text(encoding="utf-8")
    unless = ' unless on (namespace, pod) kube_pod_owner{owner_kind="ReplicaSet"}'
    assert unless in text
    result = _unit_test(promtool, tmp_path, text.replace(unless, ""), "mi3xx.test.yml")
    assert result.returncode != 0 and 'gpu_id="5"' in result.stdout + result.stderr


def test_promtool_unit_tests_catch_a_wrong_threshold(promtool: str, tmp_path: Path) -> None:
    """The unit tests pin behaviour: rules with another threshold must fail them."""
    shifted = MonitoringConfig.model_validate({"thresholds": {"gpuTemperatureCelsius": 97}})
    result = _unit_test(promtool, tmp_path, alerts.rules_file_text(shifted, ()), "mi3xx.test.yml")
    assert result.returncode != 0
    assert "GpuJunctionTemperatureHigh" in result.stdout + result.stderr


def _eval_cases(test_file: str) -> dict[str, set[bool]]:
    """alertname -> {True if some eval expects it firing, False if some eval expects it quiet}."""
    cases: dict[str, set[bool]] = {}
    for group in yaml.safe_load((PROMTOOL_TESTS / test_file).read_text(encoding="utf-8"))["tests"]:
        for case in group["alert_rule_test"]:
            cases.setdefault(case["alertname"], set()).add(bool(case["exp_alerts"]))
    return cases


def test_every_alert_has_a_firing_and_a_quiet_promtool_case() -> None:
    mi3xx = _eval_cases("mi3xx.test.yml")
    for rule in alerts.alert_rules(MonitoringConfig(), "MI300X") + alerts.exporter_alert_rules(MonitoringConfig())[1:]:
        assert mi3xx.get(rule["alert"]) == {True, False}, rule["alert"]
    assert _eval_cases("mixed.test.yml")["GpuModelUnknown"] == {True, False}
    # MI250 rules that differ from the MI300X ones (beyond the model matcher) need their own cases.
    mi300x_exprs = {
        rule["expr"].replace("MI300X", "MI250") for rule in alerts.alert_rules(MonitoringConfig(), "MI300X")
    }
    mi2xx = _eval_cases("mi2xx.test.yml")
    mi250_rules = alerts.alert_rules(MonitoringConfig(), "MI250")
    specific = [rule["alert"] for rule in mi250_rules if rule["expr"] not in mi300x_exprs]
    assert specific == ["GpuEdgeTemperatureHigh", "GpuPowerAtCap", "GpuIdleWhileAllocated"]
    for name in specific:
        assert mi2xx.get(name) == {True, False}, name
    kubernetes = _eval_cases("kubernetes.test.yml")
    for rule in alerts.kubernetes_alert_rules(MonitoringConfig(), OPERATOR_STACK):
        assert kubernetes.get(rule["alert"]) is not None and True in kubernetes[rule["alert"]], rule["alert"]
    assert {name for name, cases in kubernetes.items() if False in cases} == {
        "GpuOperatorDown",
        "GpuStackDaemonSetUnavailable",
        "GpuAllocatableDropped",
    }


# --- Docker hosts and vLLM ------------------------------------------------------------------------------------

# The fleet of docker-hosts.test.yml.
FLEET = (
    DeclaredHost(
        "node-a",
        "node-a",
        "MI300X",
        8,
        (DeclaredPartition("train-a", "training", 0), DeclaredPartition("serve-b", "inference", 600, 8000)),
    ),
    DeclaredHost("node-b", "node-b", "MI300X", 8),
)
CADVISOR_TAG = "v0.60.5"


def test_promtool_unit_tests_of_the_docker_host_and_vllm_rules(promtool: str, tmp_path: Path) -> None:
    """A GPU gone (7 of 8, and 0 of 8), a training exited, a vLLM crash-looping, unhealthy past its start grace,
    a checkpoint filesystem full, cAdvisor down, vLLM down, its queue growing, its first tokens slow."""
    result = _unit_test(promtool, tmp_path, alerts.rules_file_text(MonitoringConfig(), FLEET), "docker-hosts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    cases = _eval_cases("docker-hosts.test.yml")
    for rule in alerts.docker_host_alert_rules(MonitoringConfig()) + alerts.vllm_alert_rules(MonitoringConfig()):
        assert cases.get(rule["alert"]) == {True, False}, rule["alert"]


def test_without_the_declared_series_the_missing_gpu_goes_unseen(promtool: str, tmp_path: Path) -> None:
    """The committed rules (no fleet) cannot know a host's GPU count: the declared series are what the alert needs."""
    result = _unit_test(promtool, tmp_path, alerts.rules_file_text(MonitoringConfig(), ()), "docker-hosts.test.yml")
    assert result.returncode != 0 and "alertname: GpuCountBelowDeclared" in result.stdout + result.stderr


def test_vllm_rules_use_the_metric_names_of_the_pinned_vllm() -> None:
    """vllm/v1/metrics/loggers.py of vllm==0.11.2 (the pinned rocm/vllm image's): a Gauge
    `vllm:num_requests_waiting` and a Histogram `vllm:time_to_first_token_seconds`, labels model_name, engine."""
    source = (
        Path(__file__).parent / "data" / "monitoring" / "reference" / "vllm-0.11.2-metrics-loggers.py.txt"
    ).read_text(encoding="utf-8")
    names = set(re.findall(r'name="(vllm:[a-z_]+)"', source))
    for rule in alerts.vllm_alert_rules(MonitoringConfig()):
        metrics, labels = promql_names(rule["expr"])
        vllm = {m.removesuffix("_bucket") for m in metrics if m.startswith("vllm:")}
        assert vllm <= names, rule["alert"]
        assert labels <= {"job", "instance", "host", "le", "model_name"}, rule["alert"]
    assert 'labelnames = ["model_name", "engine"]' in source


def test_docker_host_rules_use_the_cadvisor_metric_names() -> None:
    """google/cadvisor lib/metrics/prometheus.go @ v0.60.5, read from the mirror: the metric names the rules use,
    the health values (1 healthy, 0 starting/unhealthy, -1 none) and the `name` label (the container's alias)."""
    source = upstream_go.show("google/cadvisor", CADVISOR_TAG, "lib/metrics/prometheus.go")
    exported = set(re.findall(r'"(container_[a-z_]+)"', source))
    used = set()
    for rule in alerts.docker_host_alert_rules(MonitoringConfig()):
        metrics, _ = promql_names(rule["expr"])
        used |= {m for m in metrics if m.startswith("container_")}
    assert used == {"container_last_seen", "container_start_time_seconds", "container_health_state"}
    assert used <= exported
    assert 'case "healthy":\n\t\tvalue = 1' in source and 'LabelName = "name"' in source
    assert "set[LabelName] = container.Aliases[0]" in source
