"""tools.synth_diff and `rocm-stack diff` (tools.diff) on the real dev synth plan and edited copies of it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools import diff as diff_cli, synth_diff
from conftest import CONTAINER
from schema.project import ROOT


@pytest.fixture
def base_plan(dev_plan) -> dict:
    return copy.deepcopy(dev_plan.to_json())


def write(path: Path, plan: dict) -> Path:
    path.write_text(json.dumps(plan))
    return path


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.diff", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_identical_plans_have_no_changes(tmp_path, base_plan):
    result = synth_diff.diff(*(synth_diff.SynthPlan.model_validate(base_plan) for _ in range(2)))
    assert result.empty and result.unchanged == len(base_plan["resources"])
    assert "No resource changes" in synth_diff.to_markdown(result, "t")


def test_added_removed_and_changed_by_type_and_name(tmp_path, base_plan):
    head = copy.deepcopy(base_plan)
    container = next(r for r in head["resources"] if r["type"] == CONTAINER)
    container["inputs"]["shmSize"] = container["inputs"].get("shmSize", 0) + 1024
    container["protect"] = not container["protect"]
    removed = next(r for r in head["resources"] if r["type"] != CONTAINER)
    head["resources"].remove(removed)
    head["resources"].append(
        {
            "type": "kubernetes:core/v1:Namespace",
            "name": "observability",
            "inputs": {"metadata": {"name": "observability"}},
        }
    )

    result = run_cli(write(tmp_path / "base.json", base_plan), write(tmp_path / "head.json", head))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.startswith("### Synth diff: stack `dev`")
    assert "**1 added, 1 removed, 1 changed**" in out
    assert "| added | `kubernetes:core/v1:Namespace` | `observability` |  |" in out
    assert f"| removed | `{removed['type']}` | `{removed['name']}` |" in out
    assert f"| changed | `{CONTAINER}` | `{container['name']}` | `shmSize`, `protect` |" in out


def test_reordering_resources_changes_nothing(base_plan):
    head = copy.deepcopy(base_plan)
    head["resources"].reverse()
    result = synth_diff.diff(synth_diff.SynthPlan.model_validate(base_plan), synth_diff.SynthPlan.model_validate(head))
    assert result.empty


def test_changed_paths_are_leaf_paths():
    old = {"spec": {"containers": [{"image": "a:1", "env": [1]}], "replicas": 1}, "gone": 1}
    new = {"spec": {"containers": [{"image": "a:2", "env": [1, 2]}], "replicas": 1}, "new": 1}
    assert list(synth_diff.changed_paths(old, new)) == [
        "gone",
        "new",
        "spec.containers[0].env",
        "spec.containers[0].image",
    ]


def test_output_is_appended_to_a_summary_file_and_cut_at_max_rows(tmp_path, base_plan):
    head = copy.deepcopy(base_plan)
    head["resources"] = []
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    result = run_cli(
        write(tmp_path / "b.json", base_plan),
        write(tmp_path / "h.json", head),
        "--out",
        summary,
        "--max-rows",
        "2",
        "--title",
        "prod synth",
    )
    assert result.returncode == 0 and result.stdout == ""
    text = summary.read_text()
    assert text.startswith("earlier step\n### prod synth")
    assert text.count("| removed |") == 2 and f"and {len(base_plan['resources']) - 2} more rows" in text


@pytest.mark.parametrize("content", ["", "{]", "[]", '{"stack": "dev"}'])
def test_unreadable_plan_exits_2(tmp_path, capsys, base_plan, content):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    assert diff_cli.main([str(bad), str(write(tmp_path / "head.json", base_plan))]) == 2
    assert capsys.readouterr().err.startswith("error:")


def test_the_folders_synth_writes_are_read_as_their_plans(tmp_path, base_plan):
    """`rocm-stack diff out/base out/head`, the folders `synth --out` writes, as well as their plan.json files."""
    for side in ("base", "head"):
        (tmp_path / side).mkdir()
        write(tmp_path / side / "plan.json", base_plan)
    result = run_cli(tmp_path / "base", tmp_path / "head")
    assert result.returncode == 0, result.stderr
    assert "No resource changes" in result.stdout and result.stderr == ""
    missing = run_cli(tmp_path / "base", tmp_path)  # a folder without plan.json
    assert missing.returncode == 2 and "plan.json" in missing.stderr


def test_plans_of_two_stacks_are_compared_with_a_warning(tmp_path, base_plan, prod_plan):
    result = run_cli(write(tmp_path / "dev.json", base_plan), write(tmp_path / "prod.json", prod_plan.to_json()))
    assert result.returncode == 0
    assert result.stderr.startswith("warning: the plans are of different stacks (base 'dev', head 'prod')")


def test_a_new_parent_is_a_change(base_plan):
    """Reparenting changes the URN (Pulumi replaces the resource unless aliased): never 'no changes'."""
    head = copy.deepcopy(base_plan)
    container = next(r for r in head["resources"] if r["type"] == CONTAINER)
    container["parent"] = "urn:pulumi:dev::rocm-stack::rocm-stack:docker:Other::elsewhere"
    result = synth_diff.diff(synth_diff.SynthPlan.model_validate(base_plan), synth_diff.SynthPlan.model_validate(head))
    assert [(c.key, c.paths) for c in result.changed] == [((CONTAINER, container["name"]), ("parent",))]


def test_same_type_and_name_under_two_parents_is_matched_by_parent(base_plan):
    """A new resource named like an existing one (another parent) is 'added'; the existing one is unchanged,
    whichever of the two sorts first."""
    head = copy.deepcopy(base_plan)
    container = next(r for r in head["resources"] if r["type"] == CONTAINER)
    twin = {
        **copy.deepcopy(container),
        "parent": "urn:pulumi:dev::rocm-stack::rocm-stack:aaa:First::x",
        "urn": container["urn"] + "-twin",
    }
    twin["inputs"]["name"] = "twin"
    head["resources"].insert(0, twin)
    result = synth_diff.diff(synth_diff.SynthPlan.model_validate(base_plan), synth_diff.SynthPlan.model_validate(head))
    assert result.changed == ()
    assert list(result.added) == [
        (CONTAINER, f"{container['name']} (in urn:pulumi:dev::rocm-stack::rocm-stack:aaa:First::x)")
    ]


def test_the_impact_follows_the_diff_and_json_is_written_on_request(tmp_path, base_plan):
    """`rocm-stack diff --json FILE` (through the project's command line): the Markdown goes on with what `pulumi up`
    does (tools/impact.py), and the same prediction is written as JSON with each action's rules."""
    from tools.cli import run

    head = copy.deepcopy(base_plan)
    container = next(r for r in head["resources"] if r["type"] == CONTAINER and r["name"] == "workstation-train")
    container["inputs"]["shmSize"] += 1024  # TFD resource_docker_container.go L863: ForceNew
    out, report = tmp_path / "summary.md", tmp_path / "impact.json"
    code = run(
        ["diff", str(write(tmp_path / "b.json", base_plan)), str(write(tmp_path / "h.json", head)), "--out", str(out)]
        + ["--json", str(report)]
    )
    assert code == 0
    markdown = out.read_text()
    assert markdown.index("### Synth diff") < markdown.index("#### What `pulumi up` does to the running platform")
    (impact,) = json.loads(report.read_text())["impacts"]
    assert (impact["name"], impact["action"]) == (container["name"], "delete, then replace")
    assert impact["replaced_by"] == [["shmSize", "tfbridge.force-new"]] and impact["stops_container"]
