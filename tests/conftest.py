"""Shared fixtures: the real program run under Pulumi's mock engine (tools.synth)."""
from __future__ import annotations

import copy
from typing import Any

import pytest

from tools.synth import Plan, ProgramRefused, stack_config, synthesize

CONTAINER = "docker:index/container:Container"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
DOCKER_PROVIDER = "pulumi:providers:docker"


@pytest.fixture(scope="session")
def dev_plan() -> Plan:
    return synthesize("dev")


@pytest.fixture(scope="session")
def prod_plan() -> Plan:
    return synthesize("prod")


def stack_file(stack: str) -> dict[str, Any]:
    """A deep copy of a committed stack's config, for tests to vary."""
    return copy.deepcopy(stack_config(stack))


def stack_without_kubernetes(stack: str) -> dict[str, Any]:
    """A committed stack's config without its Kubernetes section and the workloads that need it."""
    config = stack_file(stack)
    for key in ("kubernetes", "training", "inference", "gpuFleet"):
        config.pop(f"rocm-stack:{key}", None)
    return config


def refusal(stack: str, config: dict[str, Any], secrets: dict[str, str] | None = None) -> str:
    """The message the program stops with; fails the test if the program accepts the config."""
    with pytest.raises(ProgramRefused) as refused:
        synthesize(stack, config, secrets=secrets)
    return str(refused.value)


def on_gpu_hosts(plan: Plan, type_token: str) -> list[dict[str, Any]]:
    """Resources of a type declared by the GpuHost components (not by monitoring or workloads)."""
    hosts = {r["urn"] for r in plan.of_type("rocm-stack:docker:GpuHost")}
    return [r for r in plan.of_type(type_token) if r["parent"] in hosts]


def gpu_containers(plan: Plan) -> list[dict[str, Any]]:
    """Every Docker container that runs GPU work (a partition's shell or a workload): it selects its GPUs."""
    return [c for c in plan.of_type(CONTAINER) if "HIP_VISIBLE_DEVICES" in env_of(c)]


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return dict(e.split("=", 1) for e in container["inputs"].get("envs", []))
