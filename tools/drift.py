"""Drift report: read what `pulumi preview --refresh --expect-no-changes --json` prints, write Markdown.

    rocm-stack drift REPORT.json [--out SUMMARY.md]

Exit codes: 0 no drift, 1 drift (or any change the preview proposes), 2 unreadable input or a preview that
did not finish (then nothing can be concluded, and the scheduled job must fail rather than report "clean").

The input is the CLI's `PreviewDigest` (pulumi/pulumi sdk/pkg/display/json.go), filled by
pkg/backend/display/json.go `ShowPreviewDigest`:
  {"config": {...}, "steps": [{"op", "urn", "provider", "oldState", "newState", "diffReasons",
   "replaceReasons", "detailedDiff": {"path": {"kind": "update", "inputDiff": false}}}],
   "diagnostics": [{"urn", "message", "severity"}], "duration": ns, "changeSummary": {"same": 7, "update": 1}}
Steps with op `same` are omitted unless --show-sames; the root stack's step is always there; a replacement
shows as one logical `replace` step (its create-replacement/delete-replaced halves only with
--show-replacement-steps); refresh steps are not logical either, so after `--refresh` drift shows as the
update/create/replace/delete that would undo it. `refresh` steps that do appear (shown by that flag) are
reported when they changed something ("refresh-detected drift").
What counts as a change mirrors the CLI's own `ResourceChanges.HasChanges` (what --expect-no-changes
tests): every op except same, read, discard and read-replacement.
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
    steps: list[PreviewStep] = Field(default_factory=list)
    diagnostics: list[PreviewDiagnostic] = Field(default_factory=list)
    # Written from the preview's closing summary event: absent means the preview never finished.
    change_summary: dict[str, int] = Field(alias="changeSummary")


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

    @property
    def drifted(self) -> bool:
        return bool(self.changes or self.unexplained)


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


def parse(text: str) -> PreviewDigest:
    try:
        # The digest is printed once the preview ends; tolerate anything a CLI version prints after it.
        document, _ = json.JSONDecoder().raw_decode(text.lstrip())
    except json.JSONDecodeError as error:
        raise UnreadableReport(f"not JSON: {error}") from None
    if not isinstance(document, dict):
        raise UnreadableReport(f"expected a JSON object (pulumi preview --json), got {type(document).__name__}")
    try:
        return PreviewDigest.model_validate(document)
    except ValidationError as error:
        raise UnreadableReport(f"not a pulumi preview --json document: {error}") from None


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
    return DriftReport(", ".join(sorted(stacks)) or "?", tuple(changes.values()), unexplained)


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
    if report.changes:
        lines += ["| Resource | Type | Operation | Changed properties |", "| --- | --- | --- | --- |"]
        for change in sorted(report.changes, key=lambda c: (c.type, c.name)):
            properties = ", ".join(f"`{_cell(p)}`" for p in change.properties) or "(not reported)"
            lines.append(f"| `{_cell(change.name)}` | `{change.type}` | {change.operation} | {properties} |")
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
