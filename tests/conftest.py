"""Shared fixtures: the real program run under Pulumi's mock engine (tools.synth), and the real Docker
daemon of the end-to-end tests in tests/e2e (see tests/e2e/harness.py for what they start and why)."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness import Docker, Unavailable, docker_engine, import_standin_image
from suite_split import COLLECTED, DurationGuard, is_slow, mark_e2e

import rules
from schema import docker as schema_docker
from schema import types as schema_types
from tools.synth import Plan, ProgramRefused, stack_config, synthesize

CONTAINER = "docker:index/container:Container"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
DOCKER_PROVIDER = "pulumi:providers:docker"


# --- the fast set and the slow one (tests/suite_split.py) ---------------------------------------------------


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist: where the reports arrive
        config.pluginmanager.register(DurationGuard(), "duration-guard")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects (pytest's mark plugin, also in this hook)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_e2e(items)
    config.stash[COLLECTED] = {item.nodeid: is_slow(item) for item in items}


# The plans many tests read, synthesized once per test process (each xdist worker, or the one process without xdist)
# for each distinct config and shared: the committed stacks, the all-features stack in each environment, the base
# stacks of day-2 scenarios. Tests only read them; a test that changes a plan changes its own copy (copy.deepcopy),
# and one that patches the program calls synthesize itself.
_SYNTHESIZED: dict[str, Plan] = {}


def synthesized(stack: str, config: dict[str, Any] | None = None) -> Plan:
    """The shared plan of `stack` with `config` (default: its committed stack file)."""
    config = stack_config(stack) if config is None else config
    key = json.dumps([stack, config], sort_keys=True)
    if key not in _SYNTHESIZED:
        _SYNTHESIZED[key] = synthesize(stack, copy.deepcopy(config))
    return _SYNTHESIZED[key]


def committed_plan(stack: str) -> Plan:
    """The committed stack `stack` (stacks/Pulumi.<stack>.yaml) as synthesized."""
    return synthesized(stack)


ALL_FEATURES = Path(__file__).parent / "data" / "seams" / "all-features.yaml"


def all_features(environment: str) -> dict[str, Any]:
    """The all-features stack's config (`rocm-stack:` keys) for `environment`."""
    config: dict[str, Any] = yaml.safe_load(ALL_FEATURES.read_text())["config"]
    return {**config, "rocm-stack:environment": environment}


def all_features_plan(environment: str) -> Plan:
    """The all-features stack synthesized as `environment`."""
    return synthesized(environment, all_features(environment))


@pytest.fixture(scope="session")
def dev_plan() -> Plan:
    return committed_plan("dev")


@pytest.fixture(scope="session")
def prod_plan() -> Plan:
    return committed_plan("prod")


def stack_file(stack: str) -> dict[str, Any]:
    """A deep copy of a committed stack's config, for tests to vary."""
    return copy.deepcopy(stack_config(stack))


def cdi_stack() -> dict[str, Any]:
    """The dev stack with its workstation's GPUs reached as the AMD Container Toolkit's CDI devices."""
    config = stack_file("dev")
    for host in config["rocm-stack:hosts"]:
        host["gpuAccess"] = "cdi"
    return config


@pytest.fixture(scope="session")
def cdi_plan() -> Plan:
    return synthesize("dev", cdi_stack())


def solo_host_stack() -> dict[str, Any]:
    """A workstation with one partition, which keeps the host's IPC namespace (schema.docker.with_ipc_decided)."""
    config = stack_file("dev")
    for key in ("kubernetes", "training", "inference"):
        config.pop(f"rocm-stack:{key}")
    config["rocm-stack:hosts"] = [{"name": "solo", "gpus": 1}]
    return config


def stack_without_kubernetes(stack: str) -> dict[str, Any]:
    """A committed stack's config without its Kubernetes section and the workloads that need it."""
    config = stack_file(stack)
    for key in ("kubernetes", "training", "inference", "gpuFleet"):
        config.pop(f"rocm-stack:{key}", None)
    return config


def shell_partitions(stack: str) -> dict[str, Any]:
    """A committed stack's config with every partition a plain shell: its workloads on Kubernetes only."""
    config = stack_file(stack)
    for workload in config["rocm-stack:training"] + config["rocm-stack:inference"]:
        workload.pop("docker")
    return config


def swapped_partitions() -> dict[str, Any]:
    """The dev stack with its training and its vLLM server each on the other's partition."""
    config = stack_file("dev")
    config["rocm-stack:training"][0]["docker"]["partitions"] = ["workstation/serve"]
    config["rocm-stack:inference"][0]["docker"]["partitions"] = ["workstation/train"]
    return config


def synth_with(stack: str, secrets: dict[str, str] | None = None, **keys: Any) -> Plan:
    """Synth of a committed stack with some `rocm-stack:` keys set (camelCase names; None removes a key)."""
    config = stack_file(stack)
    for key, value in keys.items():
        config.pop(f"rocm-stack:{key}", None)
        if value is not None:
            config[f"rocm-stack:{key}"] = value
    return synthesize(stack, config, secrets=secrets)


def refused(run: Callable[[], object]) -> str:
    """The message the program stops with when `run` synthesizes it; fails the test if the program runs."""
    with pytest.raises(ProgramRefused) as stopped:
        run()
    return str(stopped.value)


def refusal(stack: str, config: dict[str, Any], secrets: dict[str, str] | None = None) -> str:
    """The message the program stops with for this stack config; fails the test if the program accepts it."""
    return refused(lambda: synthesize(stack, config, secrets=secrets))


def on_gpu_hosts(plan: Plan, type_token: str) -> list[dict[str, Any]]:
    """Resources of a type declared by the GpuHost components (not by monitoring or workloads: a workload's container
    is a GpuHost's child too, aliased to its workload), one-shot checks left out (check_containers)."""
    hosts = {r["urn"] for r in plan.of_type("rocm-stack:docker:GpuHost")}
    return [
        r
        for r in plan.of_type(type_token)
        if r["parent"] in hosts and not r["aliases"] and not r["inputs"].get("attach")
    ]


PARTITION_LABEL = "rocm-stack.partition"


def partition_of(container: dict[str, Any]) -> str | None:
    """`host/container` from the partition label, or None for a container that is no GPU partition (the exporter)."""
    return labels_of(container).get(PARTITION_LABEL)


def gpu_containers(plan: Plan) -> list[dict[str, Any]]:
    """Every partition's container (its shell or a workload): it carries the partition label and is not a one-shot
    check (those carry it too: they get the partition's device access)."""
    return [c for c in plan.of_type(CONTAINER) if partition_of(c) is not None and not c["inputs"].get("attach")]


def labels_of(container: dict[str, Any]) -> dict[str, str]:
    return {label["label"]: label["value"] for label in container["inputs"].get("labels", [])}


def one_shot_containers(plan: Plan) -> list[dict[str, Any]]:
    """The one-shot containers the provider waits for (`attach`): the host checks and the vLLM servers' health checks."""
    return [c for c in plan.of_type(CONTAINER) if c["inputs"].get("attach")]


def check_containers(plan: Plan) -> list[dict[str, Any]]:
    """The host checks (`rocm-stack.check`): a preflight per host, a GPU check per partition."""
    return [c for c in one_shot_containers(plan) if "rocm-stack.check" in labels_of(c)]


def health_checks(plan: Plan) -> list[dict[str, Any]]:
    """The Docker vLLM servers' health checks (`rocm-stack.health`: the server's partition)."""
    return [c for c in one_shot_containers(plan) if "rocm-stack.health" in labels_of(c)]


def render_nodes_of(container: dict[str, Any]) -> list[str]:
    """The container paths of the render nodes a container maps."""
    return [
        d["containerPath"]
        for d in container["inputs"].get("devices", [])
        if d["containerPath"].startswith("/dev/dri/renderD")
    ]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in container["inputs"].get("envs", []))


# --- e2e: the real Docker daemon ------------------------------------------------------------------------
# Each e2e file runs on one xdist worker (`--dist loadfile`, set in pyproject.toml); a worker that runs any starts
# one private daemon for them (this session fixture). Where no daemon can be used they skip with the reason, except
# under CI=1, where that is a failure: CI must prove the Docker layer on a real engine, never report it skipped.


@pytest.fixture(scope="session")
def docker() -> Iterator[Docker]:
    started = time.monotonic()
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(docker_engine())
        except Unavailable as reason:
            if os.environ.get("CI"):
                pytest.fail(f"CI=1 needs a real Docker engine for the e2e tests: {reason}", pytrace=False)
            pytest.skip(str(reason))
        print(f"\ne2e: Docker engine {client.host} ready in {time.monotonic() - started:.2f}s")
        yield client


@pytest.fixture(scope="session")
def standin_image(docker: Docker) -> str:
    """The stand-in image's id, tagged with the schema's default image references."""
    from schema.docker import DEFAULT_IMAGES
    from schema.monitoring import DEFAULT_EXPORTER_IMAGE

    started = time.monotonic()
    image = import_standin_image(docker, [*DEFAULT_IMAGES.values(), DEFAULT_EXPORTER_IMAGE])
    print(f"\ne2e: stand-in image imported in {time.monotonic() - started:.2f}s")
    return image


def bypassed_plan(config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the program declares for this config when its checks are bypassed, as a tampered program would: synthesized
    as a dev stack (which skips the prod-only checks), without the checks of every environment that stand in the way
    (a credential flag, --trust-remote-code, a password in an ssh:// endpoint, a chart version range). The pack calls
    none of the functions bypassed (it judges a declared command line by `credential_flag_problem` and
    `is_remote_code_flag`, an endpoint by `docker_endpoint_problems`; schema.types' name of `chart_version_problem`
    is the loader's alone), so its rules stay as they are."""
    with monkeypatch.context() as patched:
        patched.setattr(rules, "credential_flags", lambda values: [])
        patched.setattr(rules, "remote_code_flags", lambda values: [])
        patched.setattr(schema_docker, "ssh_password_problem", lambda endpoint: None)
        patched.setattr(schema_types, "chart_version_problem", lambda version: None)
        return synthesize("dev", {**config, "rocm-stack:environment": "dev"}).to_json()
