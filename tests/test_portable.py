"""A contributor elsewhere runs every check: the project names no path of the machine it was written on, and the
upstream sources the tests read come from one documented place that `make upstream` makes (tests/upstream.txt)."""

from __future__ import annotations

import re
import subprocess

import pytest

import upstream_go
from schema.project import ROOT
from schema.workloads import ROUTER_IMAGE

# An absolute path of the machine the project was written on, or words about how its copies were made there (cut in
# two here, so that this file does not name them).
WORDS = (
    "/" + "work/",
    "/." + "mirror",
    "fetch " + "github:",
    "the `" + "fetch` tool",
    "ROCM_STACK_UPSTREAM_" + "MIRRORS",
)
MACHINE = re.compile("|".join(re.escape(word) for word in WORDS))


def tracked() -> list[str]:
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files"], capture_output=True, text=True)
    if listed.returncode:
        pytest.skip("not a git checkout")
    return listed.stdout.splitlines()


def test_no_committed_file_names_a_path_of_the_machine_it_was_written_on():
    found = []
    for name in tracked():
        path = ROOT / name
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        found += [
            f"{name}:{n}: {line.strip()[:120]}" for n, line in enumerate(text.splitlines(), 1) if MACHINE.search(line)
        ]
    assert found == []


def test_every_listed_source_is_one_repository_and_a_pinned_ref():
    for repo, ref in upstream_go.listed():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", repo), repo
        assert re.fullmatch(r"[0-9a-f]{40}", ref) or re.fullmatch(r"refs/tags/[\w.*-]+", ref), (repo, ref)
    assert len(set(upstream_go.listed())) == len(upstream_go.listed())


def test_a_source_that_is_not_listed_fails_and_one_not_fetched_skips_naming_the_command(tmp_path, monkeypatch):
    with pytest.raises(AssertionError, match="is not in upstream.txt"):
        upstream_go.Upstream("pulumi/pulumi", "0" * 40)
    with pytest.raises(AssertionError, match="is not in upstream.txt"):
        upstream_go.git_dir("vllm-project/production-stack", "vllm-stack-0.1.11")
    monkeypatch.setattr(upstream_go, "MIRRORS", tmp_path)
    with pytest.raises(pytest.skip.Exception, match="run `make upstream`"):
        upstream_go.git_dir("vllm-project/production-stack", "vllm-stack-0.1.12")


def test_make_upstream_fetches_the_listed_refs_into_the_one_folder(tmp_path, monkeypatch):
    """`make upstream` (tests/upstream_go.py fetch) from a stand-in GitHub: a repository at OWNER/NAME with the listed
    tag, fetched into $ROCM_STACK_UPSTREAM/OWNER+NAME/repo, where the tests then read it; present refs are not
    fetched again."""
    remote = tmp_path / "github" / "vllm-project" / "production-stack"
    git = ["git", "-C", str(remote), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    remote.mkdir(parents=True)
    subprocess.run([*git, "init", "--quiet"], check=True)
    (remote / "src").mkdir()
    (remote / "src" / "requirements.txt").write_text("uhashring==2.3\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "--quiet", "-m", "release"], check=True)
    subprocess.run([*git, "tag", "vllm-stack-0.1.12"], check=True)
    monkeypatch.setattr(upstream_go, "MIRRORS", tmp_path / "upstream")
    monkeypatch.setattr(
        upstream_go, "listed", lambda: (("vllm-project/production-stack", "refs/tags/vllm-stack-0.1.12"),)
    )
    assert upstream_go.fetch(f"file://{tmp_path / 'github'}") == 0
    assert upstream_go.show("vllm-project/production-stack", "vllm-stack-0.1.12", "src/requirements.txt") == (
        "uhashring==2.3\n"
    )
    subprocess.run(["rm", "-rf", str(remote)], check=True)  # nothing left to fetch from: the present tag is kept
    assert upstream_go.fetch(f"file://{tmp_path / 'github'}") == 0


def test_the_router_the_tests_run_is_the_release_the_stack_deploys():
    """The image the stack deploys, lmcache/lmstack-router:v<chart version>, is built from the tag
    vllm-stack-<chart version> (schema/workloads.py ROUTER_IMAGE); the router tests and `make router-venv` read that
    tag (tests/e2e/test_e2e_router.py TAG, the Makefile's ROUTER_TAG)."""
    from e2e import test_e2e_router
    import test_router

    version = re.fullmatch(r"lmcache/lmstack-router:v([\d.]+)@sha256:[0-9a-f]{64}", ROUTER_IMAGE)
    assert version, ROUTER_IMAGE
    tag = f"vllm-stack-{version[1]}"
    assert test_router.TAG == test_e2e_router.TAG == tag
    assert f"ROUTER_TAG := {tag}" in (ROOT / "Makefile").read_text()
    assert ("vllm-project/production-stack", f"refs/tags/{tag}") in upstream_go.listed()
