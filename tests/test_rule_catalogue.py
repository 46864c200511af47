"""The rule catalogue (rules/catalogue.py): every rule's examples through the config loader and through the policy
pack, each refusal ending with the rule's id; a failing example's config, declared anyway by the real program (its
loader's checks bypassed), refused by the pack too; the pack declares the catalogue's rules and nothing else."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rules.catalogue import BY_ID, CATALOGUE
from rules.rule import Example, Rule
from schema import ConfigError, load
from schema.project import ROOT
from schema.stackfile import SECRET_PLACEHOLDER
from schema.stackfile import read_config
from tools import rules_reference
from conftest import bypassed_plan

sys.path.insert(0, str(ROOT / "policy"))  # the CLI runs the pack with policy/ first on sys.path

from rocm_policy import offline, pack  # noqa: E402

PREFIX = "rocm-stack:"
CASES = [
    (rule, example, passes, f"{rule.id}-{'pass' if passes else 'fail'}-{n}")
    for rule in CATALOGUE
    for passes, examples in ((True, rule.passing), (False, rule.failing))
    for n, example in enumerate(examples)
]
EXAMPLES = [pytest.param(rule, example, passes, id=name) for rule, example, passes, name in CASES]


def config_refusals(example: Example) -> list[str]:
    """What the config loader refuses of the example's stack config (secure values as `pulumi up` hands them where
    the example decrypts them, else as synth does)."""
    assert example.config is not None
    values = {
        PREFIX + k: example.decrypted.get(k, SECRET_PLACEHOLDER) if isinstance(v, dict) and set(v) == {"secure"} else v
        for k, v in example.config.items()
    }
    secrets = [PREFIX + k for k, v in example.config.items() if isinstance(v, dict) and set(v) == {"secure"}]
    try:
        load(example.stack, values, secrets, place_unlocked=True)
    except ConfigError as error:
        return [str(problem) for problem in error.problems]
    return []


def decrypted(example: Example) -> dict[str, str]:
    """The example's decrypted secrets, as PULUMI_CONFIG keys them."""
    return {PREFIX + k: v for k, v in example.decrypted.items()}


def pack_violations(rule: Rule, example: Example, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the pack's policy of the rule reports of the example's plan, with its config as the stack file."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: rocm-stack\nruntime: python\n")
    config = {PREFIX + k: v for k, v in (example.config or {}).items()}
    (project / f"Pulumi.{example.stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    monkeypatch.setattr(pack, "PROJECT_DIR", project)
    (policy,) = [p for p in pack.POLICIES if p.name == rule.id]
    with offline.stack_environment(example.stack, project, decrypted(example)):
        return [v.message for v in offline.check([d.resource(example.stack) for d in example.plan], [policy])]


@pytest.mark.parametrize("rule, example, passes", EXAMPLES)
def test_each_example_through_the_pack(rule, example, passes, tmp_path, monkeypatch):
    violations = pack_violations(rule, example, tmp_path, monkeypatch)
    if passes:
        assert violations == []
    else:
        assert violations and all(v.endswith(f"(rule {rule.id})") for v in violations)


# Examples the config cannot say belong to rules that read no config (what the program always declares so).
CONFIG_EXAMPLES = [
    pytest.param(rule, example, passes, id=name) for rule, example, passes, name in CASES if example.config is not None
]


def test_only_a_rule_that_reads_no_config_has_examples_the_config_cannot_say():
    unsayable = [(rule, passes) for rule, example, passes, _ in CASES if example.config is None]
    assert unsayable, "the catalogue has rules that read no config"
    assert all(not passes and not rule.config_keys for rule, passes in unsayable)


@pytest.mark.parametrize("rule, example, passes", CONFIG_EXAMPLES)
def test_each_example_through_the_config_loader(rule, example, passes):
    tagged = [r for r in config_refusals(example) if r.endswith(f"(rule {rule.id})")]
    assert (tagged == []) if passes else tagged, config_refusals(example)


@pytest.mark.parametrize("rule", CATALOGUE, ids=lambda r: r.id)
def test_each_rule_is_a_whole_entry(rule: Rule):
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.id)
    assert "\n" not in rule.statement and rule.statement.endswith(".")
    assert re.search(r"https?://|[\w.-]+/[\w./-]+|\w+\.\w+/", rule.reason), "the reason cites its source"
    assert set(rule.environments) <= {"dev", "prod"} and "prod" in rule.environments
    assert rule.plan_fields and rule.passing and rule.failing
    # A rule that reads config says each case as config too: the loader must apply it (its failing config refused).
    if rule.config_keys:
        assert all(e.config is not None for e in (*rule.passing, *rule.failing))


def test_the_pack_declares_the_catalogue_and_nothing_else():
    assert [p.name for p in pack.POLICIES] == [r.id for r in CATALOGUE]
    assert [p.description for p in pack.POLICIES] == [r.statement for r in CATALOGUE]
    assert len(BY_ID) == len(CATALOGUE)
    assert set(pack.STACK_VALIDATORS) == {r.id for r in CATALOGUE if r.scope == "stack"}


def test_the_committed_prod_pack_config_names_catalogue_rules():
    names: dict[str, Any] = yaml.safe_load((ROOT / "policy" / "prod.json").read_text())
    assert set(names) - {"all"} <= set(BY_ID)


def test_docs_rules_md_is_generated_from_the_catalogue(capsys):
    assert rules_reference.PAGE.read_text() == rules_reference.render(), "run `rocm-stack rules --write` and commit it"
    assert rules_reference.main(["--check"]) == 0
    for rule in CATALOGUE:
        assert f"\n## {rule.id}\n" in rules_reference.render()


def test_a_stale_rules_page_fails_the_check(tmp_path, capsys):
    stale = tmp_path / "rules.md"
    stale.write_text("# Rules\n")
    assert rules_reference.main(["--check", "--out", str(stale)]) == 1
    assert "rocm-stack rules --write" in capsys.readouterr().err


REFUSED_IN_PROD = [
    pytest.param(rule, example, id=rule.id)
    for rule in CATALOGUE
    for example in rule.failing
    if example.config is not None
]


@pytest.mark.parametrize("rule, example", REFUSED_IN_PROD)
def test_a_refused_config_declared_anyway_is_refused_by_the_pack(rule, example, tmp_path, monkeypatch):
    """One case, both ways: what the program declares for a failing example's config with the loader's checks
    bypassed (conftest.bypassed_plan, as tests/test_attacks.py does for a tampered program) is refused by the rule's
    policy once presented as the prod stack, with the example as its stack file."""
    (tmp_path / "Pulumi.yaml").write_text((ROOT / "Pulumi.yaml").read_text())
    stack_file = tmp_path / "stacks" / f"Pulumi.{example.stack}.yaml"
    stack_file.parent.mkdir()
    stack_file.write_text(yaml.safe_dump({"config": {PREFIX + k: v for k, v in (example.config or {}).items()}}))
    config = read_config(stack_file, "rocm-stack")
    plan = bypassed_plan(config, monkeypatch)
    for resource in plan["resources"]:
        resource["urn"] = resource["urn"].replace("urn:pulumi:dev::", f"urn:pulumi:{example.stack}::", 1)
    monkeypatch.setattr(pack, "PROJECT_DIR", tmp_path)
    (policy,) = [p for p in pack.POLICIES if p.name == rule.id]
    with offline.stack_environment(example.stack, tmp_path, decrypted(example)):
        violations = offline.check(plan["resources"], [policy])
    assert violations and all(v.message.endswith(f"(rule {rule.id})") for v in violations)
