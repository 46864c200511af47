"""How long-running Docker containers stop: a grace period per role from the config, the same for `pulumi up`'s
replace, an operator's `docker stop` and a daemon shutdown.

Upstream facts this pins (components/docker/stop.py has the whole chain):
- Pulumi deletes a container before creating its replacement: pulumi/pulumi-docker provider/resources.go L112-114
  @ 237b7899 (`"docker_container": {... DeleteBeforeReplace: true}`).
- The provider's delete stops it with `destroy_grace_seconds` as the timeout, 0 when unset, and not at all for an
  `attach` container: kreuzwerker/terraform-provider-docker v4.5.0
  internal/provider/resource_docker_container_funcs.go L1085-1093.
- The daemon sends the stop signal, waits the timeout, then SIGKILLs: moby/moby v28.5.2 daemon/stop.go L55-57, L84,
  L98, L113-116; `docker stop` without `-t` and a daemon shutdown use the container's StopTimeout/StopSignal
  (container/container.go L584-602, daemon/daemon.go L1222-1234), Docker's default being 10 s
  (container/container_unix.go L26).
- `stop_signal` and `stop_timeout` are ForceNew and Read stores the daemon's values back (resource_docker_container.go
  L314-327, funcs.go L977-978); tests/e2e/deployment.py checks on the real daemon that they come back as declared.
- torchrun waits TORCH_ELASTIC_SHUTDOWN_TIMEOUT for its workers after forwarding SIGTERM (pytorch/pytorch#172596):
  checked below against the installed torch.
"""

from __future__ import annotations

from typing import Any

import pytest

from components.monitoring import EXPORTER_STOP_GRACE_SECONDS
from conftest import CONTAINER, env_of, one_shot_containers, partition_of, refusal, stack_file, synth_with
from schema.types import MAX_STOP_GRACE_SECONDS
from schema.workloads import TORCHRUN_EXIT_MARGIN_S, TORCHRUN_FIXED_SHUTDOWN_S, TORCHRUN_SHUTDOWN_ENV
from tools.synth import Plan, docker_scripts

P = "rocm-stack:"
GRACE_INPUTS = ("destroyGraceSeconds", "stopSignal", "stopTimeout")


def _graces(plan: Plan) -> dict[str, tuple[Any, ...]]:
    """Every long-running container (not an `attach` check) by partition (or resource name): its three inputs."""
    return {
        partition_of(c) or c["name"]: tuple(c["inputs"].get(key) for key in GRACE_INPUTS)
        for c in plan.of_type(CONTAINER)
        if not c["inputs"].get("attach")
    }


def _grace(seconds: int) -> tuple[int, str, int]:
    return (seconds, "SIGTERM", seconds)


def test_the_default_graces_of_each_role(dev_plan: Plan, prod_plan: Plan):
    """Training 300 s (a step and a checkpoint write), vLLM 120 s (in-flight requests), a partition's own shell
    30 s, the metrics exporter Docker's default 10 s; every one also as the stop timeout `docker stop` uses."""
    assert _graces(dev_plan) == {
        "workstation/train": _grace(300),
        "workstation/serve": _grace(120),
        "workstation-amd-device-metrics-exporter": _grace(EXPORTER_STOP_GRACE_SECONDS),
        # node-exporter and cAdvisor keep no state: Docker's default.
        "workstation-node-exporter": _grace(10),
        "workstation-cadvisor": _grace(10),
    }
    # Training on gpu-node-1/2's train-a, vLLM on gpu-node-3/4's serve-b; the other two partitions keep their shells.
    assert _graces(prod_plan) == {
        **{f"gpu-node-{n}/train-a": _grace(300) for n in (1, 2)},
        **{f"gpu-node-{n}/serve-b": _grace(120) for n in (3, 4)},
        **{f"gpu-node-{n}/serve-b": _grace(30) for n in (1, 2)},
        **{f"gpu-node-{n}/train-a": _grace(30) for n in (3, 4)},
        **{f"gpu-node-{n}-amd-device-metrics-exporter": _grace(10) for n in (1, 2, 3, 4)},
        # vLLM's proxy (nginx) finishes its requests in flight on SIGQUIT, within vLLM's grace.
        **{f"gpu-node-{n}-serve-b-proxy": (120, "SIGQUIT", 120) for n in (3, 4)},
        **{f"gpu-node-{n}-{e}": _grace(10) for n in (1, 2, 3, 4) for e in ("node-exporter", "cadvisor")},
        # Prometheus writes its head block and closes its TSDB on SIGTERM; Alertmanager and Grafana keep little.
        "gpu-node-1-prometheus": _grace(120),
        "gpu-node-1-alertmanager": _grace(10),
        "gpu-node-1-grafana": _grace(10),
        # The scrape token's writer and the rules and targets' writer exit at once.
        "gpu-node-1-prometheus-token": _grace(10),
        "gpu-node-1-prometheus-files": _grace(10),
    }
    assert EXPORTER_STOP_GRACE_SECONDS == 10


def test_every_long_running_container_takes_its_grace_from_the_config():
    config = stack_file("dev")
    config[P + "hosts"][0]["gpus"] = 3
    config[P + "hosts"][0]["containers"].append({"name": "shell", "gpus": [2], "stopGraceSeconds": 45})
    config[P + "training"][0]["docker"]["stopGraceSeconds"] = 600
    config[P + "inference"][0]["docker"]["stopGraceSeconds"] = 90
    plan = synth_with("dev", **{key.removeprefix(P): value for key, value in config.items()})
    graces = _graces(plan)
    assert graces["workstation/train"] == _grace(600)
    assert graces["workstation/serve"] == _grace(90)
    assert graces["workstation/shell"] == _grace(45)
    (train,) = [
        c for c in plan.of_type(CONTAINER) if partition_of(c) == "workstation/train" and "attach" not in c["inputs"]
    ]
    assert env_of(train)[TORCHRUN_SHUTDOWN_ENV] == str(600 - TORCHRUN_EXIT_MARGIN_S)


def test_checks_declare_no_grace(dev_plan: Plan):
    """The provider never stops an `attach` container on delete (funcs.go L1085 `if !d.Get("attach")`), and a
    check has exited long before: a grace would be an input with no effect."""
    checks = one_shot_containers(dev_plan)  # the host checks and the vLLM server's health check
    assert checks and all(not set(GRACE_INPUTS) & set(c["inputs"]) for c in checks)


def test_host_script_stops_and_replaces_with_the_grace(dev_plan: Plan):
    """HOST.sh creates with the same stop signal and timeout (docker/cli --stop-signal/--stop-timeout, checked flag
    by flag in test_host_script.py) and tells the operator to `docker stop` before replacing, as the provider does."""
    script = docker_scripts(dev_plan)["workstation"]
    assert "first `docker stop` them" in script
    create = next(line for line in script.splitlines() if line.startswith('by "$deadline" docker create --name=train '))
    assert "--stop-signal=SIGTERM --stop-timeout=300" in create


def test_the_installed_torchrun_waits_the_variable_the_training_container_sets(monkeypatch):
    """torch 2.13 launcher/api.py L145-149: LaunchConfig.shutdown_timeout from TORCH_ELASTIC_SHUTDOWN_TIMEOUT (30
    when unset, the value an older torchrun has fixed), which the agent passes to `_shutdown` on a signal
    (agent/server/api.py L752-756) and that to `close(death_sig, timeout)` (multiprocessing/api.py L1023-1053)."""
    from torch.distributed.launcher.api import LaunchConfig

    monkeypatch.delenv(TORCHRUN_SHUTDOWN_ENV, raising=False)
    assert LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1).shutdown_timeout == TORCHRUN_FIXED_SHUTDOWN_S
    monkeypatch.setenv(TORCHRUN_SHUTDOWN_ENV, "290")
    assert LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=1).shutdown_timeout == 290


def _training_docker(**docker: Any) -> dict[str, Any]:
    config = stack_file("dev")
    config[P + "training"][0]["docker"].update(docker)
    return config


@pytest.mark.parametrize(
    "config, key, expected",
    [
        (
            _training_docker(stopGraceSeconds=30),
            "training[0].docker.stopGraceSeconds",
            f"must be at least {TORCHRUN_FIXED_SHUTDOWN_S + TORCHRUN_EXIT_MARGIN_S}",
        ),
        (
            _training_docker(stopGraceSeconds=MAX_STOP_GRACE_SECONDS + 1),
            "training[0].docker.stopGraceSeconds",
            f"must be at most {MAX_STOP_GRACE_SECONDS}",
        ),
    ],
)
def test_a_grace_out_of_bounds_is_refused(config: dict[str, Any], key: str, expected: str):
    message = refusal("dev", config)
    assert f"rocm-stack:{key}: {expected}" in message, message


def test_a_grace_on_a_partition_a_workload_runs_is_refused():
    config = stack_file("dev")
    config[P + "hosts"][0]["containers"][0]["stopGraceSeconds"] = 60
    message = refusal("dev", config)
    assert "rocm-stack:hosts[0].containers[0].stopGraceSeconds: partition 'workstation/train' runs training" in message


def test_the_torchrun_shutdown_variable_is_the_stacks_own():
    config = stack_file("dev")
    config[P + "training"][0]["env"] = {TORCHRUN_SHUTDOWN_ENV: "999"}
    message = refusal("dev", config)
    assert f"rocm-stack:training[0].env.{TORCHRUN_SHUTDOWN_ENV}: is set by rocm-stack" in message, message
