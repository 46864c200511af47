"""docs/config-reference.md is generated from the schema's field docstrings and must match it."""

from typing import Any

import pytest
import yaml

import schema
from conftest import stack_file
from tools import config_reference
from schema.kubernetes import DEV_UPGRADE_POLICY, DriverUpgradePolicy
from schema.workloads import InferenceKubernetes
from schema.project import ROOT


def test_committed_reference_is_the_generated_one():
    committed = (ROOT / "docs" / "config-reference.md").read_text()
    assert committed == config_reference.render(), "run `rocm-stack config-reference --write` and commit the page"


def test_reference_lists_every_key_with_its_docstring():
    page = config_reference.render()
    for name, field in schema.StackConfig.model_fields.items():
        assert f"## `rocm-stack:{field.alias or name}`" in page
    described = schema.StackConfig.model_fields["gpu_fleet"].description
    assert described and " ".join(described.split()) in page
    assert "| `hosts[].containers[].gpuCount` | integer (≥ 1, ≤ 64) |" in page


def test_check_fails_on_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "config-reference.md"
    stale.write_text(config_reference.render().replace("required", "optional", 1))
    assert config_reference.main(["--check", "--out", str(stale)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert config_reference.main(["--out", str(stale)]) == 2, "an existing file is only overwritten with --write"
    assert "pass --write to overwrite it" in capsys.readouterr().err
    assert config_reference.main(["--write", "--out", str(stale)]) == 0
    assert capsys.readouterr().err == f"wrote {stale}\n"
    assert config_reference.main(["--check", "--out", str(stale)]) == 0


def test_configuration_md_key_table_is_generated_from_the_schema():
    """The table of docs/configuration.md said `gpus` is 1..16 while the schema took up to 64 (issue 24 item 10):
    it is now the schema's rows, as the reference's."""
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == config_reference.render_tables(page), "run `rocm-stack config-reference --write`"
    table = config_reference.configuration_table()
    assert "| `hosts[].gpus` | integer (≥ 1, ≤ 64) | `1` |" in table
    assert schema.load("dev", {"rocm-stack:hosts": [{"name": "big", "gpus": 64}]}).hosts[0].gpus == 64


def test_configuration_md_lists_every_key_of_the_sections_it_explains():
    """Its table once listed chosen keys, and the newest host keys (`pullTimeoutSeconds`, `logs.*`) were missing:
    now every key under its sections, at every depth."""
    table = config_reference.configuration_table()
    shown = {line.split("`")[1] for line in table.splitlines() if line.startswith("| `")}
    for path, *_ in config_reference.rows(schema.StackConfig, ""):
        if path.split(".")[0].split("[")[0] in config_reference.CONFIGURATION_SECTIONS:
            assert path.replace("hosts[].containers[].", "…containers[].") in shown, path
    assert {"hosts[].docker.pullTimeoutSeconds", "hosts[].logs.maxSize", "hosts[].logs.maxFile"} <= shown
    assert (ROOT / "docs" / "configuration.md").read_text().count("`hosts[].logs.maxFile`") == 1


def test_check_reports_a_stale_configuration_table(tmp_path, monkeypatch, capsys):
    page = tmp_path / "configuration.md"
    committed = (ROOT / "docs" / "configuration.md").read_text()
    page.write_text(committed.replace("| `hosts[].gpus` | integer (≥ 1, ≤ 64)", "| `hosts[].gpus` | integer (1..16)"))
    monkeypatch.setattr(config_reference, "TABLE_PAGES", [page])
    assert config_reference.main(["--check"]) == 1
    assert f"{page} is stale" in capsys.readouterr().err


def test_workloads_md_key_tables_are_the_schemas_subtrees(tmp_path, monkeypatch, capsys):
    """docs/workloads.md's hand-written tables had drifted from the schema (rcclEnv's default, issue 24 item 10)."""
    page = ROOT / "docs" / "workloads.md"
    committed = page.read_text()
    assert committed == config_reference.render_tables(committed), "run `rocm-stack config-reference --write`"
    for subtree in ("training[]", "inference[]"):
        assert config_reference.subtree_table(subtree) in committed
    assert "| `rcclEnv` | " in config_reference.subtree_table("training[]")
    assert "| `kubernetes.replicas` | integer (≥ 1, ≤ 150000) | dev: `1`; prod: `2` |" in committed
    stale = tmp_path / "workloads.md"
    stale.write_text(
        committed.replace(
            "| `docker.maxRetries` | integer (≥ 0, ≤ 1000) | `5`", "| `docker.maxRetries` | integer | `3`"
        )
    )
    monkeypatch.setattr(config_reference, "TABLE_PAGES", [stale])
    assert config_reference.main(["--check"]) == 1
    assert config_reference.main(["--write"]) == 0
    assert stale.read_text() == committed
    capsys.readouterr()


def test_a_generated_table_without_its_end_marker_is_an_error():
    page = config_reference.subtree_table("training[]").replace(config_reference._END, "")
    with pytest.raises(ValueError, match="without its"):
        config_reference.render_tables(page)


def test_inference_replicas_default_is_the_one_the_loader_applies():
    assert reference_row("inference[].kubernetes.replicas")[2] == "dev: `1`; prod: `2`"
    for environment, replicas in (("dev", 1), ("prod", 2)):
        assert InferenceKubernetes().effective_replicas(environment) == replicas


def reference_row(key: str) -> list[str]:
    page = config_reference.render()
    line = next(line for line in page.splitlines() if line.startswith(f"| `{key}` |"))
    return [cell.strip() for cell in line.strip("|").split(" | ")]


@pytest.mark.parametrize(
    "key, dev, prod, applied",
    [
        ("hosts[].gpuAccess", "all", "renderNodes", lambda cfg: cfg.hosts[0].gpu_access.value),
        ("security.profile", "debug", "hardened", lambda cfg: cfg.security_profile.value),
    ],
)
def test_a_default_by_environment_is_shown_as_such_and_is_what_the_loader_applies(key, dev, prod, applied):
    """The reference showed `gpuAccess` defaulting to `all` in every environment (issue 24 item 10)."""
    assert reference_row(key)[2] == f"dev: `{dev}`; prod: `{prod}`"
    config = {
        "rocm-stack:hosts": [{"name": "box", "gpus": 8, "renderNodes": "hosts/mi300x-8gpu.render-nodes.json"}],
        "rocm-stack:monitoring": {"host": False},  # else prod asks for Grafana's password
    }
    assert applied(schema.load("dev", config)) == dev
    assert applied(schema.load("prod", config)) == prod


def test_keys_decided_by_the_stack_are_not_shown_as_required_or_unset():
    assert (
        reference_row("environment")[2]
        == "`prod` for a stack whose name has the word `prod` or `production`, else `dev`"
    )
    assert schema.load("prod-eu", {}).environment == "prod" and schema.load("product-demo", {}).environment == "dev"
    assert reference_row("training[].kubernetes.checkpoints")[2].startswith('dev: `{"type": "hostPath"')
    assert reference_row("hosts[].containers[].command")[2] == "`sleep infinity`"


def test_revision_is_documented_as_recommended_in_prod_not_enforced(prod_plan):
    """workloads.md said "pin a commit in prod", which nothing enforced and the committed prod stack did not do; the
    docs now say what the code does (issue 24 item 10)."""
    assert all("revision" not in i for i in stack_file("prod")["rocm-stack:inference"]) and prod_plan.outputs
    for page in ("workloads.md", "config-reference.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split()).lower()
        assert "pin a commit in prod" not in text and "recommended in prod, not required" in text


def test_the_driver_upgrade_policy_table_states_the_schemas_defaults():
    """docs/kubernetes.md compares prod's and dev's driver upgrade policies side by side, which a one-default
    generated table cannot show: each cell is checked against DriverUpgradePolicy() (prod) and DEV_UPGRADE_POLICY
    (dev), so the table cannot drift from the schema (issue 24 item 10). A dev cell of a policy lists what differs."""
    page = (ROOT / "docs" / "kubernetes.md").read_text()
    head = "| key | prod default (also what any explicit `upgradePolicy` starts from) | dev default"
    table = page[page.index(head) :].split("\n\n")[0].splitlines()[2:]

    def value(cell: str) -> Any:
        text = cell.split(" (")[0].replace("`", "").strip()
        return yaml.safe_load("{" + text + "}" if ": " in text else text)

    prod = DriverUpgradePolicy().model_dump(by_alias=True)
    dev = DEV_UPGRADE_POLICY.model_dump(by_alias=True)
    shown = {}
    for row in table:
        key, prod_cell, dev_cell = (c.strip() for c in row.strip("|").split("|"))
        shown[key.strip("`")] = (value(prod_cell), value(dev_cell))
    assert set(shown) == set(prod), "every field of driver.upgradePolicy has its row"
    for key, (prod_shown, dev_shown) in shown.items():
        assert prod_shown == prod[key], key
        if isinstance(dev[key], dict):
            assert dev_shown == {k: v for k, v in dev[key].items() if v != prod[key][k]}, key
        else:
            assert dev_shown == dev[key], key
