"""Every stack snippet of README.md and docs/*.md runs through synth, so documented examples cannot rot (issue 24), and
its releases and objects land in namespaces that exist (issue 33).

A ```yaml block is a stack snippet: a whole stack file (`config:` ...) or the `rocm-stack:` keys of one. It is read
as the Pulumi CLI reads a stack file (schema.stackfile) and synthesized in-process under the mock engine, as stack
`docs` (dev). An HTML comment on the line before the fence changes that (docs/development.md, "Documented examples"):

    <!-- synth: dev prod -->      the environments the snippet claims: each is synthesized (prod as stack `prod-docs`)
    <!-- fragment: WHY -->        not a whole stack (a key's part, a Kubernetes manifest): not synthesized
    <!-- refused: prod -->        a stack refused in each environment named, with exactly the lines of the next block

`Example (prod)` in a doc is a claim too: such a snippet must say `<!-- synth: prod -->` (or more).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from schema.stackfile import read_config
from tools.synth import ROOT, ProgramRefused, synthesize
from conftest import refusal, stack_file
from k8s_namespaces import namespace_problems

FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*(fragment|synth|refused)\s*:\s*(.*?)\s*-->\s*$")
# A line of a refusal as synth prints it: `rocm-stack:KEY: why`.
REFUSAL_LINE = re.compile(r"^rocm-stack:\S+: ", re.M)
STACKS = {"dev": "docs", "prod": "prod-docs"}  # prod-* is prod by name; neither has a placement lock
MAX_MEMBERS = 8


@dataclass(frozen=True)
class Snippet:
    doc: str
    line: int
    language: str
    text: str
    marker: tuple[str, str] | None  # ("fragment", why), ("synth", "dev prod") or ("refused", "prod")
    heading: str  # the prose line above the block (for "Example (prod):")

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"


def _docs() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def snippets(path: Path) -> list[Snippet]:
    lines = path.read_text().splitlines()
    found = []
    index = 0
    while index < len(lines):
        fence = FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = next(i for i in range(index + 1, len(lines)) if lines[i].strip() == "```")
        before = [line for line in lines[:index] if line.strip()]
        marker = MARKER.match(before[-1]) if before else None
        found.append(
            Snippet(
                doc=str(path.relative_to(ROOT)),
                line=index + 1,
                language=fence.group(2),
                text="\n".join(line[len(fence.group(1)) :] for line in lines[index + 1 : end]),
                marker=(marker.group(1), marker.group(2)) if marker else None,
                heading=before[-2 if marker else -1].strip() if len(before) > (1 if marker else 0) else "",
            )
        )
        index = end + 1
    return found


BLOCKS = [s for path in _docs() for s in snippets(path)]
ALL = [s for s in BLOCKS if s.language in ("yaml", "yml")]
STACK_SNIPPETS = [s for s in ALL if s.marker is None or s.marker[0] == "synth"]
REFUSED = [s for s in ALL if s.marker is not None and s.marker[0] == "refused"]


def environments(snippet: Snippet) -> list[str]:
    if snippet.marker is not None and snippet.marker[0] in ("synth", "refused"):
        return snippet.marker[1].split()
    return ["dev"]


@pytest.mark.parametrize(
    "snippet, environment",
    [(s, e) for s in STACK_SNIPPETS for e in environments(s)],
    ids=lambda v: v.where if isinstance(v, Snippet) else v,
)
def test_each_stack_snippet_synthesizes_in_each_environment_it_claims(snippet, environment, tmp_path):
    stack = STACKS[environment]
    plan = synthesize(stack, stack_config(snippet, environment, tmp_path))
    assert plan.outputs["environment"] == environment, f"{snippet.where} claims {environment}"
    # It deploys as written on a fresh cluster: every release and object lands in a namespace that exists.
    assert namespace_problems(plan) == [], snippet.where


def stack_config(snippet: Snippet, environment: str, tmp_path: Path) -> dict:
    """The snippet as stack `docs` or `prod-docs` reads it."""
    data = yaml.safe_load(snippet.text)
    hint = f"{snippet.where}: make it synthesize, or mark it `<!-- fragment: why -->` on the line before the fence"
    assert isinstance(data, dict), hint
    if "config" not in data:
        assert all(":" in str(key) for key in data), f"{hint} (a snippet is `config:` or `rocm-stack:` keys)"
        text = "config:\n" + "\n".join(f"  {line}" for line in snippet.text.splitlines())
    else:
        text = snippet.text
    stack = STACKS[environment]
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(text + "\n")
    config = read_config(tmp_path / f"Pulumi.{stack}.yaml", "rocm-stack")
    for group in config.get("rocm-stack:hostGroups", []):
        # Members are alike by construction (tests/test_host_groups.py synthesizes 128): 8 keep it fast (an override
        # must name one of the first 8).
        if "count" in group:
            group["count"] = min(group["count"], MAX_MEMBERS)
    return config


def shown_refusal(snippet: Snippet) -> Snippet:
    """The block after a refused snippet: the lines it stops with."""
    blocks = [b for b in BLOCKS if b.doc == snippet.doc]
    following = blocks[blocks.index(snippet) + 1]
    assert REFUSAL_LINE.match(following.text), (
        f"{snippet.where}: a refused snippet is followed by the lines it stops with"
    )
    return following


@pytest.mark.parametrize(
    "snippet, environment",
    [(s, e) for s in REFUSED for e in environments(s)],
    ids=lambda v: v.where if isinstance(v, Snippet) else v,
)
def test_each_refusal_shown_is_what_synth_says_in_its_environment(snippet, environment, tmp_path):
    """An error the docs show fails as shown, in the environment shown (issue 36 item 7)."""
    config = stack_config(snippet, environment, tmp_path)
    with pytest.raises(ProgramRefused) as refused:
        synthesize(STACKS[environment], config)
    assert str(refused.value).splitlines() == shown_refusal(snippet).text.splitlines(), snippet.where


def test_every_refusal_shown_comes_from_a_refused_snippet():
    shown = {shown_refusal(s).where for s in REFUSED}
    blocks = [b.where for b in BLOCKS if b.language not in ("yaml", "yml") and REFUSAL_LINE.match(b.text)]
    assert blocks and set(blocks) <= shown, "mark the stack that gives it `<!-- refused: ENVIRONMENT -->`"


@pytest.mark.parametrize("snippet", ALL, ids=lambda s: s.where)
def test_a_snippet_said_to_be_for_an_environment_claims_it(snippet):
    claimed = re.search(r"\((dev|prod)\)|in (dev|prod)\b", snippet.heading)
    if claimed and (snippet.marker is None or snippet.marker[0] in ("synth", "refused")):
        assert (claimed.group(1) or claimed.group(2)) in environments(snippet), (
            f"{snippet.where} is introduced as {claimed.group(0)!r}: say `<!-- synth: ... -->` with that environment"
        )


def test_fragments_say_why():
    for snippet in ALL:
        if snippet.marker is not None:
            assert snippet.marker[1], f"{snippet.where}: `<!-- {snippet.marker[0]}: ... -->` needs its text"


def test_the_multi_node_example_without_checkpoints_in_dev_names_the_setting_and_the_setting_works(tmp_path):
    """Dev's default checkpoints are a hostPath, which the two nodes of a multi-node job do not share: the message
    gives the setting to write, and written as given it synthesizes (issue 24 item 3)."""

    (example,) = [
        s
        for s in STACK_SNIPPETS
        if s.doc == "docs/workloads.md" and "rocm-stack:training" in s.text and "nodes: 2" in s.text
    ]
    assert environments(example) == ["dev", "prod"]
    (tmp_path / "Pulumi.docs.yaml").write_text(example.text + "\n")
    config = read_config(tmp_path / "Pulumi.docs.yaml", "rocm-stack")
    training = config["rocm-stack:training"][0]["kubernetes"]
    del training["checkpoints"]
    with pytest.raises(ProgramRefused) as refused:
        synthesize("docs", config)
    (line,) = str(refused.value).splitlines()
    assert line.startswith("rocm-stack:training[0].kubernetes.checkpoints: ")
    (setting,) = re.findall(r"write `([^`]+)`", line)
    training.update(yaml.safe_load(setting.replace("<a ReadWriteMany class>", "cephfs")))
    assert synthesize("docs", config).outputs["environment"] == "dev"


@pytest.mark.parametrize("environment", ["dev", "prod"])
@pytest.mark.parametrize(
    ("args", "flag"), [(["--api-key", "k"], "--api-key"), (["--trust-remote-code"], "--trust-remote-code")]
)
def test_what_the_extra_args_reference_forbids_is_refused_in_every_environment(environment, args, flag):
    """docs/config-reference.md says of `inference[].extraArgs` "no `--api-key`, no `--trust-remote-code`", with no
    environment: dev accepted both (issue 36 item 7)."""
    [row] = [
        line
        for line in (ROOT / "docs" / "config-reference.md").read_text().splitlines()
        if line.startswith("| `inference[].extraArgs`")
    ]
    assert f"no `{flag}`" in row and "prod" not in row
    config = stack_file(environment)
    config["rocm-stack:inference"][0]["extraArgs"] = args
    assert "rocm-stack:inference[0].extraArgs[0]: " in refusal(environment, config)
