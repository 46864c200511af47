"""Day 2: a rotated vLLM API key or Hugging Face token reaches the running servers.

Kubernetes resolves a secretKeyRef once, when the container starts: "If a container already consumes a Secret in
an environment variable, a Secret update will not be seen by the container unless it is restarted"
(https://kubernetes.io/docs/concepts/configuration/secret/#using-secrets-as-environment-variables). So the pods
must roll. The Secrets are auto-named (components/workloads/pods.auto_named_secret) and the Deployment refers to
them by their output name: a new value replaces the Secret (rule k8s.secret: pulumi-kubernetes diff.go L28-30,
`enableSecretMutable` off; pulumi/pulumi-kubernetes#1772, #3164), the replacement gets a new name, is created
first, and the Deployment is updated to it before the old Secret is deleted (rule k8s.autoname, checked against
pulumi-kubernetes and pulumi source in tests/test_impact_rules.py), so its pods roll onto the new value.

Each scenario is a before/after pair of the prod stack through synth and the change-impact preview
(tools.impact.predict). A secret's value is invisible offline (both plans show `[secret]`): the report's `secrets`
list says what a rotation does, and that is what is pinned here.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tools.impact import ImpactReport, SecretInput, predict, to_markdown
from components.docker.provider_schema import DOCKER_CONTAINER
from tools.impact_rules import Action
from tools.synth import Plan, autoname, synthesize
from tools.synth_diff import SynthPlan
from conftest import CONTAINER

P = "rocm-stack:"
SECRET = "kubernetes:core/v1:Secret"
DEPLOYMENT = "kubernetes:apps/v1:Deployment"
# The served model's environment variable -> (its Secret's resource name, the stack key holding the value).
ROTATIONS = {
    "VLLM_API_KEY": ("llama-api-key", "vllmApiKey"),
    "HF_TOKEN": ("llama-hf-token", "huggingfaceToken"),
}


def report_of(base: Plan | dict[str, Any], head: Plan | dict[str, Any]) -> ImpactReport:
    def plan(p: Plan | dict[str, Any]) -> SynthPlan:
        return SynthPlan.model_validate(p.to_json() if isinstance(p, Plan) else p)

    return predict(plan(base), plan(head))


def server_env(plan: dict[str, Any]) -> dict[str, Any]:
    [deployment] = [r for r in plan["resources"] if r["type"] == DEPLOYMENT and r["name"] == "llama"]
    server = deployment["inputs"]["spec"]["template"]["spec"]["containers"][0]  # beside it the proxy sidecar
    return {e["name"]: e for e in server["env"]}


@pytest.mark.parametrize("variable", sorted(ROTATIONS))
def test_a_rotated_secret_replaces_its_auto_named_secret_and_rolls_the_vllm_pods(prod_plan, variable):
    secret_name, key = ROTATIONS[variable]
    rotated = synthesize("prod", secrets={P + key: "rotated-value-0123456789abcdef0123"})  # prod's 32 characters
    # Offline the rotation is invisible: both plans are the same.
    assert json.dumps(rotated.to_json(), sort_keys=True) == json.dumps(prod_plan.to_json(), sort_keys=True)
    report = report_of(prod_plan, rotated)
    assert report.impacts == []

    secret = prod_plan.get(SECRET, secret_name)["inputs"]
    assert "name" not in secret["metadata"]  # auto-named by the provider
    # The pod spec refers to the Secret's output name (here the mock engine's stand-in for the provider's suffix).
    assert server_env(prod_plan.to_json())[variable]["valueFrom"]["secretKeyRef"]["name"] == autoname(secret_name)

    secrets = {s.name: s for s in report.secrets}
    rotation = secrets[secret_name]
    assert (rotation.type, rotation.paths, rotation.if_rotated) == (SECRET, ["stringData"], Action.REPLACE)
    rolls = {roll.name: roll for roll in rotation.then}
    # The key's Secret also gives the router its VLLM_API_KEY and key file (tests/test_router.py).
    assert set(rolls) == ({"llama", "llama-router"} if variable == "VLLM_API_KEY" else {"llama"})
    roll = rolls["llama"]
    assert (roll.type, roll.name, roll.action) == (DEPLOYMENT, "llama", Action.UPDATE)
    # The key's Secret also feeds the proxy sidecar's key file (a projected volume, components/workloads/proxy.py).
    env_path, *volume_paths = sorted(roll.updated, key=lambda u: not u[0].startswith("spec.template.spec.containers"))
    assert env_path[0].startswith("spec.template.spec.containers[0].env[") and env_path[0].endswith(
        ".secretKeyRef.name"
    )
    assert [p for p, _ in volume_paths] == (
        ["spec.template.spec.volumes[3].projected.sources[1].secret.name"] if variable == "VLLM_API_KEY" else []
    )
    assert {rule for _, rule in roll.updated} == {"k8s.update"} and "k8s.autoname" in roll.rules
    assert roll.meaning == "rolls the pods of Deployment `ml/llama`"
    markdown = to_markdown(report, 50)
    assert f"replace (create, then delete) `{secret_name}` (`stringData`), then update in place: rolls the pods" in (
        markdown
    )
    assert "`k8s.autoname`" in markdown


def test_the_roll_replaces_one_replica_at_a_time_and_pulumi_up_waits_for_it(prod_plan):
    """What the roll stops: maxSurge 0, maxUnavailable 1 (one of the 2 to 4 autoscaled prod replicas at a time, no
    extra GPUs needed); `pulumi up` waits for the rollout up to the update timeout (the most replicas there may be,
    maxReplicas 4, x (GPU check + startup + the old pod's drain grace) + 10 min, tests/test_workloads.py), and deletes
    the old Secret only after it (rule k8s.autoname), so an old pod restarting meanwhile still finds its Secret."""
    deployment = prod_plan.get(DEPLOYMENT, "llama")
    spec = deployment["inputs"]["spec"]
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert spec["replicas"] == 2 and deployment["custom_timeouts"]["update"] == "198m"


def test_docker_vllm_servers_are_replaced_on_rotation_the_key_being_an_uploaded_file(prod_plan):
    """On Docker the key is an uploaded file (`uploads`, ForceNew in terraform-provider-docker v4.5.0
    resource_docker_container.go), not an environment variable: a rotation replaces each server container (the
    provider deletes a container before replacing it), stopping it; and so is its proxy's key file
    (components/workloads/proxy.py), so the proxy is replaced too, and the monitoring host's scrape-token writer
    (its scrape token follows the key; tests/test_monitoring_host.py says why Prometheus itself is not replaced)."""
    report = report_of(prod_plan, prod_plan)
    served = {s.name: s for s in report.secrets if s.type == CONTAINER and s.name != "gpu-node-1-grafana"}
    assert sorted(served) == [
        "gpu-node-1-prometheus-token",
        "gpu-node-3-serve-b",
        "gpu-node-3-serve-b-proxy",
        "gpu-node-4-serve-b",
        "gpu-node-4-serve-b-proxy",
    ]
    assert DOCKER_CONTAINER["uploads"].force_new
    for name, rotation in served.items():
        assert rotation == SecretInput(type=CONTAINER, name=name, paths=["uploads"], if_rotated=Action.DELETE_REPLACE)
        envs = prod_plan.get(CONTAINER, name)["inputs"].get("envs") or []
        assert not any(e.startswith(("VLLM_API_KEY=", "HF_TOKEN=")) for e in envs)


def test_first_up_after_the_change_moves_the_fixed_name_secrets_to_auto_names_and_rolls_once(prod_plan):
    """The stack used to name the Secrets `llama-api-key` and `llama-hf-token`. On the first `pulumi up` of this
    version the name input disappears: pulumi-kubernetes' Check adopts an old name only when the old object was
    autonamed (naming.go AdoptOldAutonameIfUnnamed), so the name changes (rule k8s.identity), the engine checks
    again without the old inputs and the provider autonames the replacement (k8s.autoname): each Secret is
    created under its new name, the Deployment rolls once onto them, then the fixed-name Secrets are deleted."""
    before = copy.deepcopy(prod_plan.to_json())
    env = server_env(before)
    for variable, (secret_name, _) in ROTATIONS.items():
        [secret] = [r for r in before["resources"] if r["type"] == SECRET and r["name"] == secret_name]
        secret["inputs"]["metadata"]["name"] = secret_name
        env[variable]["valueFrom"]["secretKeyRef"]["name"] = secret_name
    impacts = {(i.type, i.name): i for i in report_of(before, prod_plan).impacts}
    assert sorted(impacts) == [(DEPLOYMENT, "llama"), (SECRET, "llama-api-key"), (SECRET, "llama-hf-token")]
    for secret_name, _ in ROTATIONS.values():
        moved = impacts[(SECRET, secret_name)]
        assert moved.action is Action.REPLACE and moved.replaced_by == [("metadata.name", "k8s.identity")]
    roll = impacts[(DEPLOYMENT, "llama")]
    assert roll.action is Action.UPDATE and roll.meaning == "rolls the pods of Deployment `ml/llama`"
    assert len(roll.updated) == 2


def test_first_up_after_per_host_scrape_tokens_rolls_the_kubernetes_vllm_pods_once(prod_plan):
    """Issue 34 item 9: the Kubernetes proxies leave /metrics open (the ServiceMonitor scrapes it), so their key map
    holds the key alone now, without the one fleet-wide scrape token it carried unused. The map is in the key's
    Secret (`api-key.map`): a new value, invisible offline, so the next `pulumi up` does what a key rotation does
    (the test above): the Secret is replaced under a new name and the Deployments roll once, one replica at a time."""
    import hashlib
    import hmac

    from components.workloads import proxy

    key = "prod-key-0123456789abcdef0123456789"
    fleet_token = hmac.new(key.encode(), b"rocm-stack vllm metrics scrape", hashlib.sha256).hexdigest()
    before = proxy.key_map(key) + f'"~^Bearer {fleet_token}$" 2;\n'  # the map of before, with its token entry
    assert proxy.key_map(key) != before and "Bearer" in proxy.key_map(key) and fleet_token not in proxy.key_map(key)
    assert prod_plan.get(SECRET, "llama-api-key")["inputs"]["stringData"] == "[secret]"  # the change is invisible
    rotation = {s.name: s for s in report_of(prod_plan, prod_plan).secrets}["llama-api-key"]
    assert rotation.if_rotated == Action.REPLACE
    assert {roll.name for roll in rotation.then} == {"llama", "llama-router"}
