"""Drift report: read what `pulumi preview --refresh --expect-no-changes --json` prints, write Markdown.

    rocm-stack drift REPORT.json [--out SUMMARY.md]

Exit codes: 0 no drift, 1 drift (any change the preview proposes, or state the CLI says may be corrupt), 2 input
that is not a preview digest or a preview that reported errors (then nothing can be concluded, and the scheduled job
must fail rather than report "clean"); always one sentence on stderr, never a traceback.

The input is the CLI's `PreviewDigest` (pulumi/pulumi pkg/display/json.go L31-48 @ 1b5949891b), filled by
pkg/backend/display/json.go `ShowPreviewDigest` (changeSummary and maybeCorrupt from the closing summary event,
L245-250):
  {"config": {...}, "steps": [{"op", "urn", "provider", "oldState", "newState", "diffReasons",
   "replaceReasons", "detailedDiff": {"path": {"kind": "update", "inputDiff": false}}}],
   "diagnostics": [{"urn", "message", "severity"}], "duration": ns, "changeSummary": {"same": 7, "update": 1}}
Steps with op `same` are omitted unless --show-sames; the root stack's step is always there; a replacement
shows as one logical `replace` step (its create-replacement/delete-replaced halves only with
--show-replacement-steps); refresh steps are not logical either, so after `--refresh` drift shows as the
update/create/replace/delete that would undo it. `refresh` steps that do appear (shown by that flag) are
reported when they changed something ("refresh-detected drift").
What counts as a change mirrors the CLI's own `HasChanges` (pkg/engine/update.go L530-541, what
--expect-no-changes tests): every op except same, read, discard and read-replacement (the StepOp names of
pkg/resource/deploy/step.go L2236-2252); an op this list does not know counts as a change.
Drift is judged from the steps: `steps`, `changeSummary` and `maybeCorrupt` are all `omitempty`, so a digest may lack
any of them; the summary only adds changes it counts that no listed step explains. Without a summary (the digest of a
preview cancelled before its summary event, json.go L171-173, is printed all the same) the steps that show a change
are drift, but steps that show none cannot prove the stack clean: exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

NOT_CHANGES = frozenset({"same", "read", "discard", "read-replacement"})
# The three faces of one replacement are reported once, as "replace".
REPLACE_OPS = frozenset({"replace", "create-replacement", "delete-replaced"})

EXIT_CLEAN, EXIT_DRIFT, EXIT_UNREADABLE = 0, 1, 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class PropertyDiff(_Model):
    kind: str
    input_diff: bool = Field(default=False, alias="inputDiff")


class ResourceState(_Model):
    type: str
    outputs: dict[str, Any] = Field(default_factory=dict)


class PreviewStep(_Model):
    op: str
    urn: str
    old_state: ResourceState | None = Field(default=None, alias="oldState")
    new_state: ResourceState | None = Field(default=None, alias="newState")
    diff_reasons: list[str] | None = Field(default=None, alias="diffReasons")
    replace_reasons: list[str] | None = Field(default=None, alias="replaceReasons")
    detailed_diff: dict[str, PropertyDiff] | None = Field(default=None, alias="detailedDiff")


class PreviewDiagnostic(_Model):
    urn: str = ""
    message: str = ""
    severity: str = ""


class PreviewDigest(_Model):
    # Every field is `omitempty` in the CLI's struct (pkg/display/json.go L37, L40, L45, L47).
    steps: list[PreviewStep] = Field(default_factory=list)
    diagnostics: list[PreviewDiagnostic] = Field(default_factory=list)
    change_summary: dict[str, int] = Field(default_factory=dict, alias="changeSummary")
    # "one or more resources may be corrupt" (L46-47): the engine found state it could not trust.
    maybe_corrupt: bool = Field(default=False, alias="maybeCorrupt")


class UnreadableReport(Exception):
    """The input is not a finished `pulumi preview --json` document."""


@dataclass(frozen=True)
class Change:
    """One resource that drifted or would change."""

    urn: str
    type: str
    name: str
    operation: str  # create | update | replace | delete | refresh | import | ... (the CLI's op)
    properties: tuple[str, ...]  # changed property paths, with their diff kind where the CLI gives one


@dataclass(frozen=True)
class DriftReport:
    stack: str
    changes: tuple[Change, ...]
    # Changes the summary counts but no listed step explains (e.g. hidden refresh results).
    unexplained: dict[str, int]
    maybe_corrupt: bool = False
    # No changeSummary: the preview may have ended before its last step, so the list may be incomplete.
    unfinished: bool = False

    @property
    def drifted(self) -> bool:
        return bool(self.changes or self.unexplained or self.maybe_corrupt)


def split_urn(urn: str) -> tuple[str, str, str]:
    """(stack, type, name) of `urn:pulumi:STACK::PROJECT::PARENT$TYPE::NAME` (a name may contain '::')."""
    parts = urn.split("::", 3)
    if len(parts) != 4 or not parts[0].startswith("urn:pulumi:"):
        raise UnreadableReport(f"not a Pulumi URN: {urn!r}")
    return parts[0].removeprefix("urn:pulumi:"), parts[2].rsplit("$", 1)[-1], parts[3]


def _changed_outputs(step: PreviewStep) -> list[str]:
    old = step.old_state.outputs if step.old_state else {}
    new = step.new_state.outputs if step.new_state else {}
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def _changed_properties(step: PreviewStep) -> tuple[str, ...]:
    if step.detailed_diff:
        return tuple(f"{path} ({diff.kind})" for path, diff in sorted(step.detailed_diff.items()))
    reasons = sorted(set(step.diff_reasons or ()) | set(step.replace_reasons or ()))
    if reasons or step.op != "refresh":
        return tuple(reasons)
    return tuple(_changed_outputs(step))


def _is_change(step: PreviewStep, properties: Sequence[str]) -> bool:
    if step.op in NOT_CHANGES:
        return False
    if step.op == "refresh":  # a refresh step is shown whether or not it found anything
        return bool(properties)
    return True


def _first_problem(error: ValidationError) -> str:
    """`steps[2].urn: Field required` for the first of pydantic's errors (and how many more)."""
    problems = error.errors(include_url=False, include_input=False)
    first = problems[0]
    where = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in first["loc"]).lstrip(".")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return f"{where or 'the document'}: {first['msg']}{more}"


def parse(text: str) -> PreviewDigest:
    try:
        # The digest is printed once the preview ends; tolerate anything a CLI version prints after it.
        document, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError as error:
        raise UnreadableReport(f"not JSON: {error}") from None
    except RecursionError:
        raise UnreadableReport("its JSON is nested deeper than any preview digest (the parser gave up)") from None
    if not isinstance(document, dict):
        raise UnreadableReport(f"expected a JSON object (pulumi preview --json), got {type(document).__name__}")
    try:
        return PreviewDigest.model_validate(document)
    except ValidationError as error:
        raise UnreadableReport(f"not a pulumi preview --json document: {_first_problem(error)}") from None
    except RecursionError:
        raise UnreadableReport("its JSON is nested deeper than any preview digest (the validator gave up)") from None


def analyse(digest: PreviewDigest) -> DriftReport:
    errors = [d.message.strip() for d in digest.diagnostics if d.severity == "error"]
    if errors:
        raise UnreadableReport("the preview reported errors, so drift cannot be judged:\n" + "\n".join(errors))
    stacks = {split_urn(step.urn)[0] for step in digest.steps}
    changes: dict[str, Change] = {}
    for step in digest.steps:
        properties = _changed_properties(step)
        if not _is_change(step, properties):
            continue
        _, type_token, name = split_urn(step.urn)
        operation = "replace" if step.op in REPLACE_OPS else step.op
        earlier = changes.get(step.urn)
        if earlier and earlier.operation != "refresh":
            if operation == "refresh":  # the step that would undo the drift says more than its refresh
                continue
            properties = tuple(sorted(set(earlier.properties) | set(properties)))  # replacement halves
        changes[step.urn] = Change(step.urn, type_token, name, operation, properties)
    listed: dict[str, int] = {}
    for change in changes.values():
        listed[change.operation] = listed.get(change.operation, 0) + 1
    unexplained = {}
    for op, count in digest.change_summary.items():
        folded = "replace" if op in REPLACE_OPS else op
        if (
            op not in NOT_CHANGES
            and op not in ("create-replacement", "delete-replaced")
            and count > listed.get(folded, 0)
        ):
            unexplained[op] = count - listed.get(folded, 0)
    report = DriftReport(
        ", ".join(sorted(stacks)) or "?",
        tuple(changes.values()),
        unexplained,
        digest.maybe_corrupt,
        unfinished=not digest.change_summary,
    )
    if report.unfinished and not report.drifted:
        raise UnreadableReport(
            "it has no changeSummary, which the CLI writes from the preview's closing summary event (a cancelled "
            "preview has none): no listed step changes anything, but an unfinished preview cannot prove the stack clean"
        )
    return report


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(report: DriftReport) -> str:
    lines = [f"## Drift report: stack `{report.stack}`", ""]
    if not report.drifted:
        lines += ["No drift: the refreshed state matches the program; `pulumi up` would change nothing."]
        return "\n".join(lines) + "\n"
    counts: dict[str, int] = {}
    for change in report.changes:
        counts[change.operation] = counts.get(change.operation, 0) + 1
    summary = ", ".join(f"{count} {op}" for op, count in sorted(counts.items()))
    lines += [f"**Drift detected**: {len(report.changes)} resource(s) differ ({summary or 'see below'}).", ""]
    if report.maybe_corrupt:
        lines += [
            "**The preview says one or more resources may be corrupt** (`maybeCorrupt`): the state holds resources "
            "the engine cannot trust; inspect `pulumi stack export` before any `pulumi up`.",
            "",
        ]
    if report.changes:
        lines += ["| Resource | Type | Operation | Changed properties |", "| --- | --- | --- | --- |"]
        for change in sorted(report.changes, key=lambda c: (c.type, c.name)):
            properties = ", ".join(f"`{_cell(p)}`" for p in change.properties) or "(not reported)"
            lines.append(f"| `{_cell(change.name)}` | `{change.type}` | {change.operation} | {properties} |")
    if report.unfinished:
        lines += [
            "",
            "The preview has no `changeSummary` (it may have been cancelled before the end): other resources may "
            "differ too.",
        ]
    for op, count in sorted(report.unexplained.items()):
        lines += [
            "",
            f"The preview's summary also counts {count} `{op}` not listed as steps "
            "(re-run `pulumi preview --refresh --diff` to see them).",
        ]
    lines += [
        "",
        "Either run `pulumi up` to restore the declared state, or change the program to adopt the "
        "live values, then re-run the drift check.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rocm-stack drift", description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="the output of `pulumi preview --refresh --json`")
    parser.add_argument("--out", type=Path, help="write the Markdown summary here (default: stdout)")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        report = analyse(parse(args.report.read_text()))
    except (OSError, UnicodeDecodeError) as error:
        print(f"error: cannot read {args.report}: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    except UnreadableReport as error:
        print(f"error: {args.report}: {error}", file=sys.stderr)
        return EXIT_UNREADABLE
    markdown = to_markdown(report)
    if args.out:
        args.out.write_text(markdown)
    else:
        sys.stdout.write(markdown)
    return EXIT_DRIFT if report.drifted else EXIT_CLEAN


if __name__ == "__main__":
    sys.exit(main())
