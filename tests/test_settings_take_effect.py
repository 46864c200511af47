"""No setting that silently does nothing (issue 36 item 6): each documented key of `monitoring` and `checks`, set to
another valid value in each committed stack (dev, prod), changes the plan (or the stack's alert rules), or the
program refuses it with a message that names the key and the line that makes it take effect."""

from __future__ import annotations

import copy
import logging
import subprocess
import sys
import json
from dataclasses import dataclass
from typing import Any

import pytest

import schema
from components.monitoring import declared_fleet
from conftest import refusal, stack_file
from test_config_stackfile import project as stack_project
from domain.alerts import rules_file_text
from schema import decode
from schema.stackfile import as_program_config
from tools.config_reference import rows
from tools.synth import ROOT, ProgramRefused, synthesize


@dataclass(frozen=True)
class ByStack:
    """A flip that differs by stack (the committed value of one is the other's flip)."""

    dev: Any
    prod: Any


RECEIVER = {"name": "ops", "webhook": {"url": "https://alerts.example.internal/hook"}}
# monitoring.<key> -> another valid value than the committed stacks' (a receivers[] key: a receiver with it).
FLIPS: dict[str, Any] = {
    "enabled": False,
    "thresholds.gpuTemperatureCelsius": 91,
    "thresholds.memoryTemperatureCelsius": 97,
    "thresholds.powerCapWatts": 640,
    "thresholds.powerCapFraction": 0.9,
    "thresholds.idleUtilizationPercent": 3,
    "thresholds.idleFor": "2h",
    "thresholds.idleVramInUseFraction": 0.2,
    "thresholds.vramFullFraction": 0.9,
    "thresholds.eccWindow": "2h",
    "thresholds.eccCorrectableMaxIncrease": 7,
    "thresholds.exporterDownFor": "7m",
    "thresholds.sustainedFor": "7m",
    "thresholds.filesystemFreeFraction": 0.2,
    "thresholds.containerRestarts": 9,
    "thresholds.containerRestartWindow": "2h",
    "thresholds.vllmWaitingRequests": 77,
    "thresholds.vllmTimeToFirstTokenSeconds": 7,
    "modelThresholds.<key>.gpuTemperatureCelsius": {"MI300X": {"gpuTemperatureCelsius": 91}},
    "modelThresholds.<key>.memoryTemperatureCelsius": {"MI300X": {"memoryTemperatureCelsius": 97}},
    "modelThresholds.<key>.powerCapWatts": {"MI300X": {"powerCapWatts": 640}},
    "exporterPort": 5055,
    "scrapeInterval": "20s",
    "kubePrometheusStack.install": ByStack(dev=False, prod=True),
    "kubePrometheusStack.timeoutSeconds": 1200,
    "grafanaDashboard": False,
    "prometheusSelectorLabels": {"release": "other"},
    "host": ByStack(dev=True, prod=False),
    "retention.time": "45d",
    "retention.size": "100GiB",
    "receivers": [RECEIVER],
    "receivers[].email.requireTls": [
        {
            "name": "mail",
            "email": {
                "to": ["a@example.com"],
                "from": "b@example.com",
                "smarthost": "smtp.example.com:25",
                "requireTls": False,
            },
        }
    ],
    "receivers[].severities": [{**RECEIVER, "severities": ["critical"]}],
}
# Keys whose change is another key's (a required field of a list item; a pinned version's fact is its own test).
COVERED = {
    "modelThresholds": "modelThresholds.<key>.gpuTemperatureCelsius",
    "receivers[].name": "receivers",
    "receivers[].webhook": "receivers",
    "receivers[].webhook.url": "receivers",
    "receivers[].email": "receivers[].email.requireTls",
    "receivers[].email.to": "receivers[].email.requireTls",
    "receivers[].email.from": "receivers[].email.requireTls",
    "receivers[].email.smarthost": "receivers[].email.requireTls",
    "exporterImage": "a pinned image: tests/test_monitoring.py",
    "kubePrometheusStack.chartVersion": "a pinned chart with its CRDs: tests/test_k8s_supply.py",
    "kubePrometheusStack.repository": "the chart's source: tests/test_k8s_mirror.py",
}


# checks.<key> -> another valid value than the committed stacks'.
CHECK_FLIPS: dict[str, Any] = {
    "enable": False,
    "floors": {"MI300X": {"minTflops": 100}},
    "floors.<key>.minTflops": {"MI300X": {"minTflops": 100}},
    "floors.<key>.minBusbw": {"MI300X": {"minBusbw": 10}},
    "enforceFloors": ByStack(dev=True, prod=False),
    "timeoutSeconds": 1200,
    "imageRocm": {"pytorch": "6.4"},
}


def test_every_documented_checks_key_is_flipped():
    assert sorted(set(leaf_keys("checks")) - set(CHECK_FLIPS)) == []


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize("key", sorted(CHECK_FLIPS))
def test_a_checks_key_changes_the_plan_or_is_refused_saying_why(baselines, stack, key):
    value = getattr(CHECK_FLIPS[key], stack) if isinstance(CHECK_FLIPS[key], ByStack) else CHECK_FLIPS[key]
    config = stack_file(stack)
    config.setdefault("rocm-stack:checks", {})[key.split(".")[0]] = value
    try:
        effects = _effects(stack, config)
    except ProgramRefused as error:
        assert f"checks.{key.split('.')[0]}" in str(error), str(error)
        return
    assert effects != baselines[stack], f"checks.{key} = {value!r} changes nothing in {stack}"


def leaf_keys(section: str) -> list[str]:
    return [
        path[len(section) + 1 :]
        for path, kind, _, _ in rows(schema.StackConfig, "")
        if path.startswith(f"{section}.") and kind != "object"
    ]


def test_every_documented_monitoring_key_is_flipped():
    assert sorted(set(leaf_keys("monitoring")) - set(FLIPS) - set(COVERED)) == []


def _set(config: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    config = copy.deepcopy(config)
    monitoring = config.setdefault("rocm-stack:monitoring", {})
    head, *rest = key.replace("<key>.", "").replace("[].", ".").split(".")
    if head in ("modelThresholds", "receivers"):
        monitoring[head] = value
        return config
    for part in [head, *rest][:-1]:
        monitoring = monitoring.setdefault(part, {})
    monitoring[[head, *rest][-1]] = value
    return config


def _effects(stack: str, config: dict[str, Any]) -> str:
    """The plan, and the alert rules `rocm-stack alerts --stack` writes for a stack's Docker hosts (a setup without a
    monitoring host loads them into its own Prometheus)."""
    plan = json.dumps(synthesize(stack, config).to_json(), sort_keys=True, default=str)
    values, secret_keys = as_program_config(config)
    loaded = schema.load(stack, {k: decode(v) for k, v in values.items()}, secret_keys, place_unlocked=True)
    return plan + rules_file_text(loaded.monitoring, declared_fleet(loaded))


@pytest.fixture(scope="module")
def baselines() -> dict[str, str]:
    return {stack: _effects(stack, stack_file(stack)) for stack in ("dev", "prod")}


@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize("key", sorted(FLIPS))
def test_a_monitoring_key_changes_the_plan_or_is_refused_saying_why(baselines, stack, key):
    value = getattr(FLIPS[key], stack) if isinstance(FLIPS[key], ByStack) else FLIPS[key]
    config = _set(stack_file(stack), key, value)
    try:
        effects = _effects(stack, config)
    except ProgramRefused as error:
        message = str(error)
        assert f"monitoring.{key.split('<key>')[0].split('[]')[0].rstrip('.')}" in message, message
        return
    assert effects != baselines[stack], f"monitoring.{key} = {value!r} changes nothing in {stack}"


def kubernetes_only(**monitoring: Any) -> dict[str, Any]:
    """The dev stack's cluster alone: no Docker host."""
    config = {
        key: value
        for key, value in stack_file("dev").items()
        if key in ("rocm-stack:environment", "rocm-stack:kubernetes")
    }
    return {**config, "rocm-stack:monitoring": monitoring}


def test_the_issues_cases_are_refused_with_the_line_that_makes_them_work():
    """Alert receivers while no monitoring host runs (dev's default), `monitoring.host: true` on a stack without
    Docker hosts, a monitoring host with monitoring off: each once accepted and ignored."""
    config = stack_file("dev")
    config["rocm-stack:monitoring"] = {"receivers": [RECEIVER]}
    message = refusal("dev", config)
    assert "monitoring.receivers: does nothing: this stack runs no monitoring host" in message
    assert "set monitoring.host: workstation" in message
    config["rocm-stack:monitoring"] = {"receivers": [RECEIVER], "host": "workstation"}
    assert "workstation-alertmanager" in {r["name"] for r in synthesize("dev", config).to_json()["resources"]}
    message = refusal("dev", kubernetes_only(host=True))
    assert "monitoring.host: true names the first Docker host, but the stack declares none" in message
    message = refusal("dev", {**stack_file("dev"), "rocm-stack:monitoring": {"enabled": False, "host": True}})
    assert "monitoring.host: does nothing while monitoring.enabled is false" in message
    message = refusal("dev", kubernetes_only(kubePrometheusStack={"install": False, "timeoutSeconds": 600}))
    assert (
        "monitoring.kubePrometheusStack.timeoutSeconds: does nothing: this stack installs no kube-prometheus-stack"
        in message
    )


def docker_only(stack: str) -> dict[str, Any]:
    """A committed stack without its cluster: its Docker hosts and Docker workloads alone."""
    config = {k: v for k, v in stack_file(stack).items() if k not in ("rocm-stack:kubernetes", "rocm-stack:gpuFleet")}
    for section in ("rocm-stack:training", "rocm-stack:inference"):
        config[section] = [{k: v for k, v in w.items() if k not in ("kubernetes", "elastic")} for w in config[section]]
        config[section] = [w for w in config[section] if "docker" in w]
    return config


@pytest.mark.parametrize(
    ("stack", "config", "message"),
    [
        # Keys of a layer the stack does not have.
        (
            "dev",
            {**docker_only("dev"), "rocm-stack:gpuFleet": {"nodes": 2, "gpusPerNode": 8}},
            "gpuFleet: does nothing without a Kubernetes layer (rocm-stack:kubernetes); add the cluster, or remove it",
        ),
        (
            "dev",
            {**docker_only("dev"), "rocm-stack:monitoring": {"prometheusSelectorLabels": {"release": "x"}}},
            "monitoring.prometheusSelectorLabels: does nothing without a Kubernetes layer",
        ),
        (
            "dev",
            {**docker_only("dev"), "rocm-stack:monitoring": {"grafanaDashboard": False}},
            "monitoring.grafanaDashboard: does nothing: this stack runs neither a Kubernetes layer nor a monitoring host, "
            "whose Grafana would load it; set monitoring.host: workstation",
        ),
        (
            "dev",
            {**kubernetes_only(exporterPort=5055)},
            "monitoring.exporterPort: does nothing: this stack declares no Docker host (rocm-stack:hosts), whose GPU "
            "exporter publishes it",
        ),
        (
            "dev",
            {**kubernetes_only(), "rocm-stack:checks": {"imageRocm": {"pytorch": "6.4"}}},
            "checks.imageRocm: does nothing: this stack declares no Docker host",
        ),
        (
            "dev",
            {
                **kubernetes_only(),
                "rocm-stack:registry": {"server": "registry.example.internal", "username": "u"},
                "rocm-stack:registryPassword": {"secure": "v1:REPLACE-ME"},
            },
            "registry: does nothing: this stack declares no Docker host (rocm-stack:hosts), whose Docker daemons log in",
        ),
        # Keys another key switches off.
        (
            "dev",
            {**stack_file("dev"), "rocm-stack:kubernetes": {"devicePlugin": {"namespace": "gpu"}}},
            "kubernetes.devicePlugin.namespace: does nothing in kubernetes.mode operator",
        ),
        (
            "dev",
            {**stack_file("dev"), "rocm-stack:kubernetes": {"mode": "device-plugin", "gpuOperator": {"kmm": False}}},
            "kubernetes.gpuOperator.kmm: does nothing in kubernetes.mode device-plugin; set kubernetes.mode: operator",
        ),
        (
            "dev",
            {
                **stack_file("dev"),
                "rocm-stack:kubernetes": {
                    "gpuOperator": {
                        "deviceConfig": {"configManager": {"image": "docker.io/rocm/device-config-manager:v1.5.0"}}
                    }
                },
            },
            "kubernetes.gpuOperator.deviceConfig.configManager.image: does nothing while "
            "kubernetes.gpuOperator.deviceConfig.configManager.enable is false",
        ),
        # The operator reads them only for an enabled driver (ROCm/gpu-operator v1.5.1 internal/utils.go L494-504
        # ShouldUseKMM, internal/controllers/upgrademgr.go L122-125); the DeviceConfig carried them unread.
        (
            "dev",
            {
                **stack_file("dev"),
                "rocm-stack:kubernetes": {"gpuOperator": {"deviceConfig": {"driver": {"version": "30.20.1"}}}},
            },
            "kubernetes.gpuOperator.deviceConfig.driver.version: does nothing while "
            "kubernetes.gpuOperator.deviceConfig.driver.enable is false",
        ),
        # The stack's own ServiceMonitor replaces the configured one (components.monitoring.device_config_service_monitor).
        (
            "prod",
            {
                **stack_file("prod"),
                "rocm-stack:kubernetes": {
                    **stack_file("prod")["rocm-stack:kubernetes"],
                    "gpuOperator": {"deviceConfig": {"metricsExporter": {"serviceMonitor": {"enable": True}}}},
                },
            },
            "kubernetes.gpuOperator.deviceConfig.metricsExporter.serviceMonitor.enable: does nothing while "
            "monitoring.enabled is true: the stack's own ServiceMonitor replaces it",
        ),
        # Pod Security labels go on the namespaces the stack owns only (dev's workloads run in `default`).
        (
            "dev",
            {
                **stack_file("dev"),
                "rocm-stack:inference": [
                    {
                        **stack_file("dev")["rocm-stack:inference"][0],
                        "kubernetes": {"gpus": 1, "podSecurity": "privileged"},
                    }
                ],
            },
            "inference[0].kubernetes.podSecurity: does nothing: the stack labels only the namespaces it owns "
            "(kubernetes.namespaces) with their Pod Security level, and 'default' is not one",
        ),
        # schema.workloads KNOWN_GATED_MODEL_PREFIXES: meta-llama/* needs the token whatever `gated` says.
        (
            "prod",
            {
                **stack_file("prod"),
                "rocm-stack:inference": [{**stack_file("prod")["rocm-stack:inference"][0], "gated": False}],
            },
            "inference[0].gated: false does nothing: every model of 'meta-llama/' is gated",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and len(value) < 8 else "",
)
def test_a_setting_that_would_do_nothing_is_refused_with_the_line_that_makes_it_work(stack, config, message):
    """Each found by the flip test (tests/test_settings_take_effect_sections.py) accepted and ignored on main."""
    assert message in refusal(stack, config)


@pytest.mark.parametrize(
    ("stack", "change", "message"),
    [
        (
            "dev",
            {"rocm-stack:security": {"allowDebugInProd": True}},
            "rocm-stack:security.allowDebugInProd: does nothing in dev: it only lets prod run profile: debug",
        ),
        (
            "dev",
            {"rocm-stack:kubernetes": {"jobSet": {"install": False}}},
            "rocm-stack:kubernetes.jobSet.install: does nothing: no workload needs it",
        ),
        (
            "dev",
            {"rocm-stack:kubernetes": {"keda": {"namespace": "autoscaler"}}},
            "rocm-stack:kubernetes.keda.namespace: does nothing: KEDA is installed only while an inference autoscales",
        ),
        (
            "dev",
            {"rocm-stack:kubernetes": {"leaderWorkerSet": {"timeoutSeconds": 900}}},
            "rocm-stack:kubernetes.leaderWorkerSet.timeoutSeconds: does nothing: the stack installs no leaderWorkerSet",
        ),
        (
            "dev",
            {"rocm-stack:images": {"pytorch": "rocm/pytorch:latest", "spare": "rocm/pytorch:latest"}},
            "rocm-stack:images.spare: does nothing: no container or workload names this image",
        ),
    ],
)
def test_a_setting_a_person_may_keep_on_purpose_is_warned_about_in_the_preview(stack, change, message, caplog):
    """The preview shows it (pulumi.log.warn, which synth and `pulumi preview` print) and the plan is declared."""
    config = stack_file(stack)
    for key, value in change.items():
        config[key] = {**config.get(key, {}), **value} if isinstance(value, dict) else value
    with caplog.at_level(logging.WARNING):
        synthesize(stack, config)
    assert any(r.getMessage().startswith(message) for r in caplog.records if r.levelno == logging.WARNING)


def test_the_synth_command_prints_the_warning_and_writes_the_plan(tmp_path):
    """What a user sees: `rocm-stack synth` (the mock engine's pulumi.log.warn on stderr, as `pulumi preview` shows
    the engine's warnings) goes on and writes the plan."""
    text = (ROOT / "stacks" / "Pulumi.dev.yaml").read_text()
    project = stack_project(
        tmp_path,
        text.replace(
            "  rocm-stack:environment: dev\n",
            "  rocm-stack:environment: dev\n  rocm-stack:security: {allowDebugInProd: true}\n",
        ),
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.synth",
            "--stack",
            "dev",
            "--project-dir",
            str(project),
            "--out",
            str(tmp_path / "out"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert (
        "rocm-stack:security.allowDebugInProd: does nothing in dev: it only lets prod run profile: debug"
        in result.stderr
    )
    assert (tmp_path / "out" / "plan.json").is_file()
