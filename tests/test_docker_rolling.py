"""A Docker vLLM workload's servers roll (inference[].docker.maxUnavailable; issue 35 item 7).

An image bump or an API-key rotation replaces every vLLM container. Each server's containers depend on those of the
server `maxUnavailable` places before it in `partitions`, and the engine registers a resource only once its
dependsOn resources' steps are done (a replacement: delete, create, the provider's health wait), so at most that many
servers are down at a time; the impact preview says which servers stop together and for how long. The engine's
facts are pinned below (the installed SDK; pulumi/pulumi from the upstream source `make upstream` fetches where present);
tests/e2e/test_e2e_rolling.py runs such a roll on a real daemon with two servers, one answering throughout.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

import pulumi.runtime.resource
import pulumi.runtime.rpc

from conftest import CONTAINER, refusal, stack_file, synth_with
from test_impact import by_name, report_of
from tools.impact import to_markdown
from tools.impact_rules import RULES, Action
from tools.synth import Plan
from upstream_go import Upstream

P = "rocm-stack:"
PULUMI = Upstream("pulumi/pulumi", "1b5949891b3cefcb9974752b24a5ecef0acc86c8")  # v3.259.0 + 14
NEW_VLLM = "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210"
SERVERS = ("gpu-node-3-serve-b", "gpu-node-4-serve-b")  # prod's `llama`, in the order of its partitions


def inference_with(**docker: Any) -> list[dict[str, Any]]:
    inference = stack_file("prod")[P + "inference"]
    inference[0]["docker"].update(docker)
    return inference


def depends_on(plan: Plan, name: str) -> set[str]:
    return {urn.rsplit("::", 1)[-1] for urn in plan.get(CONTAINER, name)["depends_on"]}


def test_each_server_waits_for_the_one_max_unavailable_places_before_it(prod_plan: Plan):
    first, second = SERVERS
    # The second server's vLLM and proxy wait for both containers of the first; the first waits for no server.
    for name in (second, f"{second}-proxy"):
        assert {first, f"{first}-proxy"} <= depends_on(prod_plan, name)
    for name in (first, f"{first}-proxy"):
        assert not depends_on(prod_plan, name) & {second, f"{second}-proxy"}
    # maxUnavailable 2 (the number of servers): no order, all at once, as before.
    unordered = synth_with("prod", inference=inference_with(maxUnavailable=2))
    assert not depends_on(unordered, second) & {first, f"{first}-proxy"}


def test_max_unavailable_below_one_is_refused():
    config = stack_file("prod")
    config[P + "inference"] = inference_with(maxUnavailable=0)
    message = refusal("prod", config)
    assert message == "rocm-stack:inference[0].docker.maxUnavailable: must be at least 1 (got 0)"


def test_an_image_bump_rolls_the_servers_one_at_a_time(prod_plan: Plan):
    """Before (maxUnavailable 2, what every earlier version did): both servers stop in one step. Now: one, then the
    other once the first is healthy again; the comment names them and the time each step is down."""
    images = {**stack_file("prod")[P + "images"], "vllm": NEW_VLLM}
    base_all = synth_with("prod", inference=inference_with(maxUnavailable=2))
    head_all = synth_with("prod", inference=inference_with(maxUnavailable=2), images=images)
    (at_once,) = [r for r in report_of(base_all, head_all).rolls if not r.if_rotated]
    assert at_once.steps == [["gpu-node-3/serve-b", "gpu-node-4/serve-b"]]

    report = report_of(prod_plan, synth_with("prod", images=images))
    impacts = by_name(report)
    for name in SERVERS:
        assert impacts[(CONTAINER, name)].action is Action.DELETE_REPLACE and impacts[(CONTAINER, name)].stops_container
    (roll,) = [r for r in report.rolls if not r.if_rotated]
    wait = prod_plan.get(CONTAINER, SERVERS[0])["inputs"]["waitTimeout"]
    assert (roll.workload, roll.steps, roll.grace_seconds, roll.wait_seconds) == (
        "llama",
        [["gpu-node-3/serve-b"], ["gpu-node-4/serve-b"]],
        120,
        wait,
    )
    markdown = to_markdown(report, max_rows=50)
    assert (
        "vLLM `llama` stops in 2 steps: `gpu-node-3/serve-b`; then `gpu-node-4/serve-b`. Each step is down from its "
        f"SIGTERM (grace up to 120 s) until its new containers are healthy (up to {wait} s)"
    ) in markdown
    assert f"`pulumi.depends-on-order`: {RULES['pulumi.depends-on-order'].says}" in markdown


def test_a_key_rotation_would_roll_them_too(prod_plan: Plan):
    """Offline plans cannot see a rotated key (synth.secret); the comment says how the rotation would roll."""
    report = report_of(prod_plan, prod_plan)
    assert not report.impacts
    (roll,) = report.rolls
    assert roll.if_rotated and roll.steps == [["gpu-node-3/serve-b"], ["gpu-node-4/serve-b"]]
    assert "If rotated: vLLM `llama` would stop in 2 steps" in to_markdown(report, max_rows=50)


def test_day2_adding_the_order_changes_no_running_container(prod_plan: Plan):
    """The first `pulumi up` with the order: only dependsOn edges are new, the engine's bookkeeping (no provider
    call, no rename: every resource keeps its name)."""
    before = synth_with("prod", inference=inference_with(maxUnavailable=2))
    report = report_of(before, prod_plan)
    assert not report.impacts
    assert {(r["type"], r["name"]) for r in before.resources} == {(r["type"], r["name"]) for r in prod_plan.resources}


# --- the engine's facts ----------------------------------------------------------------------------------------


def test_the_sdk_registers_a_resource_only_once_its_depends_on_urns_resolved():
    """pulumi 3.272.0 (requirements.txt): prepare_resource awaits the dependsOn resources' URNs before it builds the
    RegisterResource request; a URN resolves from the engine's answer to that resource's own registration."""
    prepare = inspect.getsource(pulumi.runtime.resource.prepare_resource)
    assert prepare.index("# Before we can proceed, all our dependencies must be finished.") < prepare.index(
        "await _resolve_depends_on_urns("
    )
    assert "urn = await res.urn.future()" in inspect.getsource(pulumi.runtime.rpc._add_dependency)
    register = inspect.getsource(pulumi.runtime.resource.register_resource)
    assert "resolve_urn(resp.urn, True, False, None)" in register


def test_the_engine_answers_a_registration_once_its_step_is_done_and_depends_on_replaces_nothing():
    source_eval = PULUMI.read("pkg/resource/deploy/source_eval.go").decode().splitlines()
    assert source_eval[3038].strip() == "// Now block waiting for the operation to finish."  # L3039
    assert source_eval[3040].strip() == "case result = <-step.done:"  # L3041
    generator = PULUMI.read("pkg/resource/deploy/step_generator.go").decode().splitlines()
    comment = " ".join(line.strip().lstrip("/ ") for line in generator[3283:3291])  # L3284-3291
    assert "the edge from B to A may be a simple `dependsOn` edge" in comment
    assert "neither B nor D would need to be deleted before A could be deleted" in comment
    # Only a property that reads a replaced resource's output makes a dependent a candidate (L3327-3341).
    assert re.search(r"for _, propertyDep := range r\.PropertyDependencies\[pk\]", "\n".join(generator[3320:3335]))
