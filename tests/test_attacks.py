"""The attack corpus of issue 27 (tests/attacks/README.md): every stack file there is refused by the config loader,
naming each key, and the plan the program would declare for it is refused by the policy pack, in prod."""

from __future__ import annotations

import copy
import errno
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from schema.stackfile import read_config
from tools.synth import ProgramRefused, synthesize
from conftest import bypassed_plan

ROOT = Path(__file__).resolve().parents[1]
ATTACKS = sorted((ROOT / "tests" / "attacks").glob("*.yaml"))
sys.path.insert(0, str(ROOT / "policy"))  # the CLI runs the pack with policy/ first on sys.path

import rules  # noqa: E402
from rocm_policy import offline, pack  # noqa: E402


def attack(path: Path, tmp_path: Path) -> tuple[dict, dict]:
    """(the attack, its config as the CLI reads the stack file) with the stack file written into a copy of the
    project's layout under tmp_path, where the pack's config-secrets policy reads it."""
    spec = yaml.safe_load(path.read_text())
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    stack_file = tmp_path / "stacks" / f"Pulumi.{spec['stack']}.yaml"
    stack_file.parent.mkdir()
    stack_file.write_text(yaml.safe_dump({"config": spec["config"]}))
    return spec, read_config(stack_file, "rocm-stack")


@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_attack_is_refused_by_the_config_loader(path, tmp_path):
    spec, config = attack(path, tmp_path)
    with pytest.raises(ProgramRefused) as refused:
        synthesize(spec["stack"], config)
    lines = str(refused.value).splitlines()
    for key, text in spec["refused_by_config"].items():
        assert any(line.startswith(f"rocm-stack:{key}: ") and text in line for line in lines), (key, lines)


@pytest.mark.parametrize("path", ATTACKS, ids=[p.stem for p in ATTACKS])
def test_attack_is_refused_by_the_policy_pack(path, tmp_path, monkeypatch):
    spec, config = attack(path, tmp_path)
    # What the program declares for this config when its checks are bypassed...
    plan = bypassed_plan(config, monkeypatch)
    # ...and presented to the pack as the attacked stack, with the attack's stack file as that stack's config.
    stack = spec["stack"]
    for resource in plan["resources"]:
        resource["urn"] = resource["urn"].replace("urn:pulumi:dev::", f"urn:pulumi:{stack}::", 1)
    monkeypatch.setattr(pack, "PROJECT_DIR", tmp_path)
    with offline.stack_environment(stack):
        violations = offline.check(plan["resources"])
    assert {v.level for v in violations} == {"mandatory"}
    # A dev stack's program declares much that prod's does not: the allow-list refuses it too, as a whole.
    assert {v.policy for v in violations} - {DECLARED} == set(spec["refused_by_pack"])
    for policy, text in spec["refused_by_pack"].items():
        assert any(v.policy == policy and text in v.message for v in violations), (policy, violations)


def test_the_offline_pack_fails_the_prod_named_dev_stack(tmp_path, monkeypatch, capsys):
    """What CI runs on a pull request's synth (issue 27 item 1 said "(dev: advisory)" and passed)."""
    spec, config = attack(ROOT / "tests" / "attacks" / "1-prod-named-dev.yaml", tmp_path)
    plan = synthesize("dev", config).to_json()
    plan["stack"] = "prod"
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    monkeypatch.setattr(pack, "PROJECT_DIR", tmp_path)
    assert offline.main([str(tmp_path / "plan.json")]) == 1
    out = capsys.readouterr().out
    assert "### Policy pack on the synth of stack `prod` (prod: mandatory)" in out
    assert "- **mandatory** `no-debug-privileges-in-prod`" in out


# --- tampered plans: what a changed program declares, which no stack file can ask for -------------------------

DECLARED = "prod-declared-by-the-program"
PLANS = sorted((ROOT / "tests" / "attacks" / "plans").glob("*.yaml"))
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _set_path(target: dict, path: str, value: object) -> None:
    """`a.b[0].c` = value in a plan's inputs; the path up to its last step must exist."""
    steps = [int(index) if index else key for key, index in _STEP.findall(path)]
    for step in steps[:-1]:
        target = target[step]
    if isinstance(target, list) and steps[-1] == len(target):
        target.append(value)  # one more item
    else:
        target[steps[-1]] = value


@pytest.fixture(scope="module")
def prod_plan(prod_plan: Any) -> dict:
    return prod_plan.to_json()  # the session's synthesis of the committed prod stack


@pytest.mark.parametrize("path", PLANS, ids=[p.stem for p in PLANS])
def test_tampered_plan_is_refused_by_the_policy_pack(path, prod_plan):
    """prod's own synth with one resource changed as a tampered program would declare it: the pack (as CI runs it
    on prod, policy/prod.json) refuses exactly the listed policies; unchanged, prod's synth passes."""
    spec = yaml.safe_load(path.read_text())
    plan = copy.deepcopy(prod_plan)
    if "add" in spec:  # a resource the program never declares
        added = spec["add"]
        urn = f"urn:pulumi:prod::rocm-stack::{added['type']}::{added['name']}"
        plan["resources"].append({**added, "urn": urn, "depends_on": [], "protect": False})
    for change in [c for c in [spec, *spec.get("also", [])] if "resource" in c]:
        wanted = change["resource"]
        [resource] = [r for r in plan["resources"] if r["type"] == wanted["type"] and r["name"] == wanted["name"]]
        for key, value in change["set"].items():
            _set_path(resource["inputs"], key, value)
    config = offline.read_policy_config(ROOT / "policy" / "prod.json")
    assert offline.check(prod_plan["resources"], config=config) == []
    with offline.stack_environment("prod"):
        violations = offline.check(plan["resources"], config=config)
    assert {v.level for v in violations} == {"mandatory"}
    assert {v.policy for v in violations} == set(spec["refused_by_pack"])
    for policy, text in spec["refused_by_pack"].items():
        assert any(v.policy == policy and text in v.message for v in violations), (policy, violations)


def test_a_credentials_file_path_passes_and_an_over_long_value_is_refused(tmp_path):
    """GOOGLE_APPLICATION_CREDENTIALS names a file, Google's recommended form
    (https://cloud.google.com/docs/authentication/application-default-credentials#GAC): not a credential in the text.
    Linux refuses an argument or environment string of MAX_ARG_STRLEN = 32 pages or more with E2BIG
    (include/uapi/linux/binfmts.h; fs/exec.c copy_strings): 131072 bytes with 4 KiB pages, measured below."""
    spec, config = attack(ROOT / "tests" / "attacks" / "6a-credentials-by-shape.yaml", tmp_path)
    env = config["rocm-stack:hosts"][0]["containers"][0]["env"]
    env.clear()
    env.update(GOOGLE_APPLICATION_CREDENTIALS="/etc/rocm-stack/gcp-key.json", NOTES="x" * rules.MAX_ARG_STRLEN)
    config["rocm-stack:monitoring"] = {"host": False}  # no Grafana, whose password is beside the point
    with pytest.raises(ProgramRefused) as refused:
        synthesize("prod", config)
    lines = str(refused.value).splitlines()
    assert lines == [line for line in lines if "env.NOTES: is 131072 bytes" in line], lines
    assert rules.credential_problem("GOOGLE_APPLICATION_CREDENTIALS", "/etc/rocm-stack/gcp-key.json") is None
    if os.sysconf("SC_PAGE_SIZE") == 4096:  # the kernel's limit itself
        with pytest.raises(OSError) as too_long:
            subprocess.run(["true", "x" * rules.MAX_ARG_STRLEN], check=False)
        assert too_long.value.errno == errno.E2BIG
        subprocess.run(["true", "x" * (rules.MAX_ARG_STRLEN - 1)], check=True)


def test_the_gpu_check_s_name_is_no_digest_of_environment_values(tmp_path):
    """Issue 27 item 10: the check's Docker name is public (`docker ps`, the state, the plan); a 10-hex-digit digest
    over a secret value would let anyone test guesses. The value is in the check's `envs`, which the provider
    replaces on change (terraform-provider-docker v4.5.0 internal/provider/resource_docker_container.go L590-596:
    `env` ForceNew), so the check still re-runs: delete-first, since its name stays."""
    spec, config = attack(ROOT / "tests" / "attacks" / "6a-credentials-by-shape.yaml", tmp_path)

    def gpucheck(env: dict) -> dict:
        config["rocm-stack:hosts"][0]["containers"][0]["env"] = env
        plan = synthesize("dev", {**config, "rocm-stack:environment": "dev"}).to_json()
        return next(r for r in plan["resources"] if r["type"] == rules.CONTAINER and r["name"].endswith("-gpucheck"))

    first, second = gpucheck({"PGPASSWORD": "one"}), gpucheck({"PGPASSWORD": "two"})
    assert first["inputs"]["name"] == second["inputs"]["name"]
    assert first["inputs"]["envs"] != second["inputs"]["envs"] and first["delete_before_replace"] is True
    assert gpucheck({"PGUSER": "one"})["inputs"]["name"] != first["inputs"]["name"]  # the names still count


def test_a_credential_from_a_pulumi_secret_passes_and_the_same_name_in_plain_text_does_not(tmp_path, monkeypatch):
    """As `pulumi preview` starts the pack: PULUMI_CONFIG holds the config decrypted ("including unencrypted
    secrets", pulumi/pulumi pkg/resource/plugin/analyzer_plugin.go constructEnv; a structured value as JSON) and
    the pack's SDK hands it every input decrypted, so the stack file says which text was `secure:`."""
    spec, _ = attack(ROOT / "tests" / "attacks" / "3c-ssh-port-and-plaintext-credentials.yaml", tmp_path)
    host = spec["config"]["rocm-stack:hosts"][0]
    host["containers"][0].pop("ports")
    host["containers"][0]["env"] = {"HF_TOKEN": {"secure": "v1:placeholder"}}
    (tmp_path / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump({"config": spec["config"]}))
    decrypted = copy.deepcopy(host)
    decrypted["containers"][0]["env"] = {"HF_TOKEN": "hf_decrypted"}
    container = {"envs": ["HF_TOKEN=hf_decrypted"], "labels": []}
    urn = f"urn:pulumi:prod::rocm-stack::{rules.CONTAINER}::gpu-node-1-rocm-dev"
    resources = [{"type": rules.CONTAINER, "name": "gpu-node-1-rocm-dev", "urn": urn, "inputs": container}]
    monkeypatch.setattr(pack, "PROJECT_DIR", tmp_path)
    policy = [p for p in pack.POLICIES if p.name == "prod-no-plaintext-credentials-in-environment"]
    with offline.stack_environment("prod"):
        # What the engine passes instead (stack_environment restores the variable on the way out).
        os.environ["PULUMI_CONFIG"] = json.dumps({"rocm-stack:hosts": json.dumps([decrypted])})
        assert offline.check(resources, policy) == []
        container["envs"].append("WANDB_API_KEY=hf_decrypted-but-not-the-secret")
        [violation] = offline.check(resources, policy)
    assert violation.message.startswith("environment variable WANDB_API_KEY: 'WANDB_API_KEY' is named like")


def test_the_remote_code_opt_in_is_per_inference_workload(tmp_path, monkeypatch):
    """Two Docker servers, one opted in: the other one's --trust-remote-code is still refused, by the pack (its
    partition) and by the config (the flag written in its extraArgs)."""
    spec, config = attack(ROOT / "tests" / "attacks" / "10c-trust-remote-code.yaml", tmp_path)
    host = spec["config"]["rocm-stack:hosts"][0]
    host["containers"] = [{"name": "serve", "gpus": [0]}, {"name": "serve-b", "gpus": [1]}]
    trusted, other = spec["config"]["rocm-stack:inference"][0], copy.deepcopy(spec["config"]["rocm-stack:inference"][0])
    trusted.update(extraArgs=[], trustRemoteCode=True)
    other.update(name="other", docker={"partitions": ["gpu-node-1/serve-b"], "publishedPort": 8001})
    spec["config"]["rocm-stack:inference"].append(other)
    spec["config"]["rocm-stack:monitoring"] = {"host": False}  # no Grafana, whose password is beside the point
    (tmp_path / "stacks" / "Pulumi.prod.yaml").write_text(yaml.safe_dump({"config": spec["config"]}))
    config = read_config(tmp_path / "stacks" / "Pulumi.prod.yaml", "rocm-stack")
    with pytest.raises(ProgramRefused) as refused:
        synthesize("prod", config)
    assert str(refused.value).splitlines() == [
        f"rocm-stack:inference[1].extraArgs[0]: {rules.REMOTE_CODE_FLAG_PROBLEM} (rule remote-code-opt-in)"
    ], str(refused.value)
    plan = bypassed_plan(config, monkeypatch)
    for resource in plan["resources"]:
        resource["urn"] = resource["urn"].replace("urn:pulumi:dev::", "urn:pulumi:prod::", 1)
    monkeypatch.setattr(pack, "PROJECT_DIR", tmp_path)
    with offline.stack_environment("prod"):
        violations = [v for v in offline.check(plan["resources"]) if v.policy == "remote-code-opt-in"]
    assert [v.message for v in violations] == [
        "runs --trust-remote-code without `trustRemoteCode: true` on its own inference workload (gpu-node-1/serve-b) "
        "(rule remote-code-opt-in)"
    ]
