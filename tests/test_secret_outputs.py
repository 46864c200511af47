"""No secret in plain text in anything a stack's run shows: every stack output, every declared input (what the state
and `pulumi preview` hold: plan.json), every file synth writes (HOST.sh, manifests, Helm values, prometheus.yml) and
the change-impact comment a pull request gets (issue 34 item 5).

The prod stack runs with every secret set to a recognisable value, as the Pulumi CLI hands them to the program
(decrypted, the key listed as secret: schema.stackfile.as_program_config): the four credential keys, a receiver's
webhook URL and a container's environment value each stored the way the docs advise, `pulumi config set --path
--secret 'monitoring.receivers[0].webhook.url'` and `... 'hosts[0].containers[0].env.API_KEY'`, which makes the whole
top-level key a secret (pulumi/pulumi sdk/go/common/resource/config/map.go SecureKeys). A value counts as leaked where
it appears in clear; synth shows a secret as `[secret]`, which the engine encrypts in the state.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from conftest import committed_plan, stack_file
from tools.impact import predict, to_markdown
from tools.synth import Plan, rendered_files, synthesize
from tools.synth_diff import SynthPlan

P = "rocm-stack:"
MARK = "RECOGNISABLE"
WEBHOOK = f"https://alerts.example.internal/hooks/{MARK}-webhook-token"
HOST_ENV = f"{MARK}-host-env-value"


def _secret_config() -> tuple[dict[str, Any], dict[str, str]]:
    config = stack_file("prod")
    secrets = {
        P + "vllmApiKey": f"{MARK}-vllm-key-0123456789abcdef",
        P + "grafanaAdminPassword": f"{MARK}-grafana-password",
        P + "huggingfaceToken": f"hf_{MARK}token",
        P + "registryPassword": f"{MARK}-registry-password",
    }
    config[P + "registry"] = {"server": "registry.example.internal", "username": "deploy"}
    monitoring = copy.deepcopy(config.pop(P + "monitoring"))
    monitoring["receivers"][0]["webhook"]["url"] = WEBHOOK
    hosts = copy.deepcopy(config.pop(P + "hosts"))
    hosts[0]["containers"][0].setdefault("env", {})["API_KEY"] = HOST_ENV
    # Whole top-level keys, as the CLI marks a key with a `secure:` value nested inside.
    secrets[P + "monitoring"] = json.dumps(monitoring)
    secrets[P + "hosts"] = json.dumps(hosts)
    return config, secrets


@pytest.fixture(scope="module")
def secret_plan() -> Plan:
    config, secrets = _secret_config()
    return synthesize("prod", config, secrets=secrets)


def _leaks(text: str) -> list[str]:
    return [text[max(0, i - 80) : i + 40] for i in range(len(text)) if text.startswith(MARK, i)]


def test_no_output_holds_a_secret(secret_plan: Plan):
    assert secret_plan.outputs["alertDestinations"] == "[secret]"
    assert _leaks(json.dumps(secret_plan.outputs)) == []


def test_no_declared_input_holds_a_secret(secret_plan: Plan):
    """What the state and the preview hold: the Alertmanager upload among them."""
    alertmanager = secret_plan.get("docker:index/container:Container", "gpu-node-1-alertmanager")
    assert alertmanager["inputs"]["uploads"] == "[secret]"
    assert _leaks(json.dumps(secret_plan.to_json())) == []


def test_no_written_file_holds_a_secret(secret_plan: Plan):
    files = rendered_files(secret_plan)
    assert "plan.json" in files and any(name.startswith("docker/") for name in files)
    assert {name: leaks for name, text in files.items() if (leaks := _leaks(text))} == {}


def test_the_pull_request_comment_holds_no_secret(secret_plan: Plan):
    """The comment of a change from the committed prod stack (receivers in plain text) to the secret one."""
    base = committed_plan("prod")
    markdown = to_markdown(predict(*(SynthPlan.model_validate(p.to_json()) for p in (base, secret_plan))), 500)
    assert "alertmanager" in markdown and _leaks(markdown) == []


def test_plain_receivers_stay_readable_in_the_preview():
    """Only a secret `monitoring` hides alertmanager.yml: plain receivers keep their changes visible."""
    plan = committed_plan("prod")
    assert "alerts.example.internal" in plan.outputs["alertDestinations"]
    uploads = plan.get("docker:index/container:Container", "gpu-node-1-alertmanager")["inputs"]["uploads"]
    assert uploads != "[secret]"
