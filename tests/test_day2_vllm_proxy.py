"""Day 2 of the authenticating proxy in front of vLLM (components/workloads/proxy.py).

The first `pulumi up` after this change, from a prod stack that ran vLLM without it, and a key rotation after it,
through synth and the change-impact preview (tools.impact.predict, the providers' rules in tools/impact_rules.py).
The stack before is the prod plan taken back to the previous shape: vLLM publishing its own port (Docker) or
listening on the pod's address (Kubernetes), no proxy, network, proxy image or nginx ConfigMap.
"""

from __future__ import annotations

import copy
from typing import Any

from tools.impact import ImpactReport, predict, to_markdown
from tools.impact_rules import Action
from tools.synth import Plan
from tools.synth_diff import SynthPlan
from conftest import CONTAINER

DEPLOYMENT = "kubernetes:apps/v1:Deployment"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
NETWORK = "docker:index/network:Network"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
SERVERS = ("gpu-node-3-serve-b", "gpu-node-4-serve-b")


def report_of(base: dict[str, Any], head: dict[str, Any]) -> ImpactReport:
    return predict(SynthPlan.model_validate(base), SynthPlan.model_validate(head))


def _is_proxy_part(resource: dict[str, Any]) -> bool:
    return (
        resource["type"] == NETWORK
        or (resource["type"] in (CONTAINER, REMOTE_IMAGE) and resource["name"].endswith("-proxy"))
        or (resource["type"] == CONFIG_MAP and resource["name"] == "llama-proxy")
    )


def without_proxy(plan: Plan) -> dict[str, Any]:
    """The prod plan as the stack declared it before the proxy."""
    before = copy.deepcopy(plan.to_json())
    by_name = {r["name"]: r for r in before["resources"]}
    for server in SERVERS:
        inputs = by_name[server]["inputs"]
        inputs["ports"] = by_name[f"{server}-proxy"]["inputs"]["ports"]
        del inputs["networkMode"]
    pod = by_name["llama"]["inputs"]["spec"]["template"]["spec"]
    vllm = pod["containers"][0]
    pod["containers"] = [vllm]
    pod["volumes"] = [v for v in pod["volumes"] if not v["name"].startswith("proxy-")]
    vllm["command"][vllm["command"].index("--host") + 1] = "0.0.0.0"
    vllm["ports"] = [{"name": "http", "containerPort": 8000}]
    for probe in ("startupProbe", "livenessProbe"):
        vllm[probe]["httpGet"]["port"] = "http"
    before["resources"] = [r for r in before["resources"] if not _is_proxy_part(r)]
    return before


def test_first_up_replaces_each_docker_vllm_and_rolls_the_pods_once(prod_plan):
    """Docker: the vLLM container stops publishing its port and joins its proxy's network namespace, both ForceNew in
    terraform-provider-docker v4.5.0 (`ports`, `network_mode`): it is deleted, then created (it keeps its
    name), and loads its model again (startupTimeoutSeconds at most); the API is down on that partition meanwhile.
    Its network, proxy image and proxy are created. Kubernetes: the Deployment's template changes (sidecar,
    `--host 127.0.0.1`, probe port), so the pods roll one at a time (maxSurge 0), once; the key's Secret gains
    the proxy's map file, which offline is `[secret]` on both sides: it is replaced under a new name, which the same
    roll picks up (k8s.autoname, tests/test_k8s_day2_secrets.py)."""
    report = report_of(without_proxy(prod_plan), prod_plan.to_json())
    impacts = {(i.type, i.name): i for i in report.impacts}
    for server in SERVERS:
        replaced = impacts.pop((CONTAINER, server))
        assert replaced.action is Action.DELETE_REPLACE
        assert {path.split("[")[0].split(".")[0] for path, _ in replaced.replaced_by} == {"ports", "networkMode"}
        assert impacts.pop((CONTAINER, f"{server}-proxy")).action is Action.CREATE
        # Its health check joins the replaced server's network namespace by ID: it is replaced, and runs again.
        check = impacts.pop((CONTAINER, f"{server}-health"))
        assert check.replaced_by == [("networkMode", "pulumi.unknown-output")] and check.runs_check
    roll = impacts.pop((DEPLOYMENT, "llama"))
    assert roll.action is Action.UPDATE and roll.meaning == "rolls the pods of Deployment `ml/llama`"
    created = {key for key, impact in impacts.items() if impact.action is Action.CREATE}
    assert created == set(impacts)  # nothing else changes but new resources
    assert {t for t, _ in created} == {NETWORK, REMOTE_IMAGE, CONFIG_MAP}
    assert sorted(i.name for i in report.containers_stopped) == sorted(SERVERS)
    markdown = to_markdown(report, 80)
    assert "`gpu-node-3-serve-b`" in markdown


def test_a_key_rotation_still_replaces_the_proxies_and_rolls_the_sidecars(prod_plan):
    """After the change the key is in each proxy's uploaded map file (ForceNew `uploads`: the proxy is replaced,
    nginx reads the new key at start) and in the pod's auto-named Secret, which the sidecar mounts: its new name
    rolls the pods (tests/test_k8s_day2_secrets.py): the replicas' and the router's, whose sidecar and
    VLLM_API_KEY read the same Secret."""
    report = report_of(prod_plan.to_json(), prod_plan.to_json())
    rotations = {s.name: s for s in report.secrets}
    for server in SERVERS:
        assert rotations[f"{server}-proxy"].paths == ["uploads"]
        assert rotations[f"{server}-proxy"].if_rotated is Action.DELETE_REPLACE
    rolls = {roll.name: roll for roll in rotations["llama-api-key"].then}
    assert set(rolls) == {"llama", "llama-router"}
    for roll in rolls.values():
        assert any(".projected.sources[1].secret.name" in path for path, _ in roll.updated)


def on_its_own_network(plan: Plan) -> dict[str, Any]:
    """The prod plan as the stack declared it before issue 34: vLLM on its server's network, listening on every
    address there, and the proxy reaching it by name through Docker's DNS on vLLM's own port."""
    before = copy.deepcopy(plan.to_json())
    by_name = {r["name"]: r for r in before["resources"]}
    for server in SERVERS:
        vllm, proxy_ = by_name[server]["inputs"], by_name[f"{server}-proxy"]["inputs"]
        del vllm["networkMode"]
        vllm["networksAdvanced"] = proxy_["networksAdvanced"]
        vllm["command"] = [part.replace("--host 127.0.0.1", "--host 0.0.0.0") for part in vllm["command"]]
        vllm["command"][vllm["command"].index("--host") + 1] = "0.0.0.0"
        proxy_["ports"] = [{**port, "internal": 8000} for port in proxy_["ports"]]
    return before


def test_first_up_after_issue_34_moves_each_vllm_into_its_proxys_namespace(prod_plan):
    """vLLM leaves its network for the proxy's network namespace (`networkMode` container:<proxy ID>, on its
    loopback: `--host` in the command) and the proxy listens on 8080 (its `ports` and uploaded nginx.conf): all
    ForceNew in terraform-provider-docker v4.5.0, so both are deleted and created again, each server once, in the
    rolling order (maxUnavailable); the network, images and everything else stay."""
    report = report_of(on_its_own_network(prod_plan), prod_plan.to_json())
    impacts = {(i.type, i.name): i for i in report.impacts}
    for server in SERVERS:
        vllm = impacts.pop((CONTAINER, server))
        assert vllm.action is Action.DELETE_REPLACE
        assert {path.split("[")[0].split(".")[0] for path, _ in vllm.replaced_by} >= {
            "networkMode",
            "networksAdvanced",
            "command",
        }
        proxy_ = impacts.pop((CONTAINER, f"{server}-proxy"))
        assert proxy_.action is Action.DELETE_REPLACE
        assert {path.split("[")[0].split(".")[0] for path, _ in proxy_.replaced_by} == {"ports"}
        # The server's health check joins the replaced server's namespace by its ID: replaced, and it runs again.
        check = impacts.pop((CONTAINER, f"{server}-health"))
        assert check.replaced_by == [("networkMode", "pulumi.unknown-output")] and check.runs_check
    assert not impacts
    (roll,) = [r for r in report.rolls if not r.if_rotated]
    assert roll.steps == [["gpu-node-3/serve-b"], ["gpu-node-4/serve-b"]]


def test_a_replaced_proxy_replaces_its_vllm(prod_plan):
    """vLLM names its proxy's ID in `networkMode`, which a replaced proxy's new container changes (unknown in the
    preview, then another ID; ForceNew): an nginx change restarts vLLM too, which then loads its model again."""
    before = copy.deepcopy(prod_plan.to_json())
    for resource in before["resources"]:
        if resource["name"] in {f"{s}-proxy" for s in SERVERS}:
            resource["inputs"]["stopTimeout"] = resource["inputs"]["stopTimeout"] + 1
    report = report_of(before, prod_plan.to_json())
    impacts = {i.name: i for i in report.impacts}
    for server in SERVERS:
        assert impacts[f"{server}-proxy"].action is Action.DELETE_REPLACE
        assert impacts[server].action is Action.DELETE_REPLACE
        assert ("networkMode", "pulumi.unknown-output") in impacts[server].replaced_by
