"""How long `pulumi up` lets each Docker create take (components/docker/deadlines.py), from the config.

Upstream facts: terraform-provider-docker v4.5.0 (pulumi_docker 5.2.0) cuts a create at 20 minutes unless the
program sets a timeout (internal/provider/resource_docker_container.go L12-14: `dockerContainerCreateDefaultTimeout
= 20 * time.Minute`; resource_docker_image.go L10-12 the same for the RemoteImage), and the whole create runs under
it: `wait` polls the health check for up to wait_timeout s, `attach` waits for the container's exit with no bound of
its own (resource_docker_container_funcs.go L590-671); a RemoteImage's create pulls (resource_docker_image_funcs.go
L34-56). Pulumi passes `customTimeouts` to the provider as the operation's timeout (pulumi-terraform-bridge
pkg/tfbridge/provider.go L1352 newTimeoutOverrides(shim.TimeoutCreate, req.Timeout) @ 59de6c661).
"""

from __future__ import annotations

from typing import Any

import pytest

from components.docker.deadlines import MARGIN_SECONDS
from components.docker.readback import parse_go_duration
from components.workloads.inference import HEALTH_WAIT
from schema.docker import DockerEndpoint
from conftest import CONTAINER, REMOTE_IMAGE, refused, stack_file, synth_with
from tools.synth import Plan, synthesize

PROVIDER_DEFAULT_CREATE_S = 20 * 60  # resource_docker_container.go L12, resource_docker_image.go L10


def _create_s(resource: dict[str, Any]) -> int:
    return parse_go_duration(resource["custom_timeouts"]["create"]) // 10**9


def _longest_wait(inputs: dict[str, Any]) -> int:
    """What the provider's create waits for: `wait` up to waitTimeout (default 60, schema), or an attached
    program's own limit (gpucheck's --timeout; a vLLM health check's last argument, HEALTH_WAIT's seconds, as long
    as its server's wait; the preflight has none and reads files for seconds)."""
    if inputs.get("wait"):
        return int(inputs.get("waitTimeout", 60))
    command = inputs.get("command", [])
    if inputs.get("attach") and command[2:3] == [HEALTH_WAIT]:
        return int(command[-1])
    if inputs.get("attach") and "--timeout" in command:
        return int(command[command.index("--timeout") + 1])
    return 0


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_every_create_outlasts_its_longest_wait(stack, request):
    plan: Plan = request.getfixturevalue(f"{stack}_plan")
    containers = plan.of_type(CONTAINER)
    assert containers
    for container in containers:
        assert _create_s(container) == _longest_wait(container["inputs"]) + MARGIN_SECONDS, container["name"]
        assert set(container["custom_timeouts"]) == {"create"}, "update and delete keep the provider's 20 min"
    # The committed stacks keep the default pull timeout; creating and updating an image both pull.
    pull = f"{DockerEndpoint().pull_timeout_seconds + MARGIN_SECONDS}s"
    assert all(i["custom_timeouts"] == {"create": pull, "update": pull} for i in plan.of_type(REMOTE_IMAGE))


def test_the_vllm_server_is_no_longer_cut_at_20_minutes(dev_plan: Plan):
    """The dev vLLM server is awaited 1,840 s (startupTimeoutSeconds 1800 + interval 30 + probe timeout 10)."""
    (server,) = [c for c in dev_plan.of_type(CONTAINER) if c["inputs"]["name"] == "serve"]
    assert server["inputs"]["waitTimeout"] == 1840 > PROVIDER_DEFAULT_CREATE_S
    assert _create_s(server) == 1840 + MARGIN_SECONDS


def test_the_longest_check_and_pull_the_config_accepts_are_awaited():
    """checks.timeoutSeconds up to 7,200 s and a slow host's pull could never pass under the 20-minute default."""
    config = stack_file("dev")
    config["rocm-stack:checks"] = {"timeoutSeconds": 7200}
    config["rocm-stack:hosts"][0]["docker"] = {"pullTimeoutSeconds": 14400}
    config["rocm-stack:inference"][0]["startupTimeoutSeconds"] = 5400
    plan = synthesize("dev", config)
    by_name = {c["inputs"]["name"]: c for c in plan.of_type(CONTAINER)}
    checks = [c for name, c in by_name.items() if name.startswith("gpucheck-")]
    assert checks and all(_create_s(c) == 7200 + MARGIN_SECONDS for c in checks)
    assert _create_s(by_name["serve"]) == 5400 + 40 + MARGIN_SECONDS
    assert {_create_s(i) for i in plan.of_type(REMOTE_IMAGE)} == {14400 + MARGIN_SECONDS}


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hosts", [{"name": "a", "docker": {"pullTimeoutSeconds": 30}}], "pullTimeoutSeconds: must be at least 60"),
        (
            "hosts",
            [{"name": "a", "docker": {"pullTimeoutSeconds": 90000}}],
            "pullTimeoutSeconds: must be at most 86400",
        ),
    ],
)
def test_deadlines_out_of_bounds_are_refused(key, value, message):
    assert message in refused(lambda: synth_with("dev", **{key: value, "training": None, "inference": None}))


def test_a_startup_timeout_beyond_a_day_is_refused():
    config = stack_file("dev")
    config["rocm-stack:inference"][0]["startupTimeoutSeconds"] = 90000
    assert "inference[0].startupTimeoutSeconds: must be at most 86400" in refused(lambda: synthesize("dev", config))
