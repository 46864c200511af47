"""Drift report: read what `pulumi preview --refresh --expect-no-changes --json` prints, write Markdown.

    rocm-stack drift REPORT.json [--out SUMMARY.md]

Exit codes: 0 no drift, 1 drift (any change the preview proposes, or state the CLI says may be corrupt), 2 input
that is not a preview (its digest or engine events), a preview that reported errors or cannot be judged (then
nothing can be concluded, and the scheduled job must fail rather than report "clean"), or a usage error; always one
sentence on stderr, never a traceback.

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

The same preview as engine events is read too: `PULUMI_ENABLE_STREAMING_JSON_PREVIEW=true pulumi preview --json`
(pkg/backend/display/display.go L108-131: ShowJSONEvents instead of the digest) and `--event-log FILE` (L99-101,
startEventLogger) write one apitype.EngineEvent per line (sdk/go/common/apitype/events.go L339-369 @ v3.259.0,
logJSONEvent: every event, `same` steps and replacement halves included). Drift is judged from their
`resourcePreEvent.metadata` steps (StepEventMetadata L224-249: op, urn, old/new state, `diffs`, `keys`,
`detailedDiff` of {diffKind, inputDiff}; a refresh step's refreshed outputs from its `resOutputsEvent`), the error
`diagnosticEvent`s, and the closing `summaryEvent` (L169-188: resourceChanges, maybeCorrupt, isPreview, result): a
stream without one, or whose result is not `succeeded`, is unfinished; the events of an update (isPreview false)
are refused. Any other JSON is named for what it looks like (a state export, a synth plan, ...) and exits 2.
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

from tools.output import exit_codes

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


class StreamedPreview(PreviewDigest):
    """A preview read from its engine events, with how the stream ended."""

    summarized: bool = False  # a summaryEvent arrived
    result: str = ""  # its `result` (older CLIs write none): succeeded, failed or canceled


# apitype.EngineEvent's payload fields, one per event (sdk/go/common/apitype/events.go L352-368 @ v3.259.0).
ENGINE_EVENTS = frozenset(
    {
        "cancelEvent",
        "stdoutEvent",
        "diagnosticEvent",
        "preludeEvent",
        "summaryEvent",
        "resourcePreEvent",
        "resOutputsEvent",
        "resOpFailedEvent",
        "policyEvent",
        "policyRemediationEvent",
        "policyLoadEvent",
        "policyAnalyzeSummaryEvent",
        "policyRemediateSummaryEvent",
        "policyAnalyzeStackSummaryEvent",
        "startDebuggingEvent",
        "progressEvent",
        "errorEvent",
    }
)


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


DIGEST_KEYS = frozenset({"config", "steps", "diagnostics", "duration", "changeSummary", "maybeCorrupt"})
_NEITHER = (
    "neither a `pulumi preview --json` digest nor its engine events (PULUMI_ENABLE_STREAMING_JSON_PREVIEW=true, "
    "--event-log)"
)


def _decode(text: str) -> Any:
    try:
        document, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as error:
        raise UnreadableReport(f"not JSON: {error}") from None
    except RecursionError:
        raise UnreadableReport("its JSON is nested deeper than any preview digest (the parser gave up)") from None
    return document


def _what_it_is(document: Any) -> str:
    """A sentence naming a JSON document that is no preview."""
    if not isinstance(document, dict):
        return f"a JSON {type(document).__name__}, {_NEITHER}"
    if not document:
        return f"an empty JSON object, {_NEITHER}"
    if "deployment" in document and "version" in document:
        return "a Pulumi state file (`pulumi stack export`), not a preview: run `pulumi preview --refresh --json`"
    if "resources" in document and "stack" in document:
        return "a synth plan (plan.json of `rocm-stack synth`), not a preview: compare two with `rocm-stack diff`"
    keys = ", ".join(sorted(map(str, document))[:6])
    return f"a JSON object with keys {keys}: {_NEITHER}"


def parse(text: str) -> PreviewDigest:
    """The preview in `text`: a digest, or engine events (then a StreamedPreview)."""
    # The digest is printed once the preview ends; tolerate anything a CLI version prints after it.
    document = _decode(text.lstrip())
    if isinstance(document, dict) and ENGINE_EVENTS & document.keys():
        return _streamed(text)
    if isinstance(document, dict) and isinstance(document.get("events"), list):  # apitype.EngineEventBatch
        return _from_events(document["events"])
    if not isinstance(document, dict) or not DIGEST_KEYS & document.keys():
        raise UnreadableReport(_what_it_is(document))
    try:
        return PreviewDigest.model_validate(document)
    except ValidationError as error:
        raise UnreadableReport(f"not a pulumi preview --json document: {_first_problem(error)}") from None
    except RecursionError:
        raise UnreadableReport("its JSON is nested deeper than any preview digest (the validator gave up)") from None


def _streamed(text: str) -> StreamedPreview:
    events = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            event = _decode(line.strip())
            if not isinstance(event, dict) or not ENGINE_EVENTS & event.keys():
                raise UnreadableReport(f"line {number} is {_what_it_is(event)}, amid engine events")
            events.append(event)
    return _from_events(events)


def _state(metadata: Any) -> dict[str, Any] | None:
    """StepEventStateMetadata (events.go L252-283) as the digest's state: its type and outputs."""
    if not isinstance(metadata, dict):
        return None
    return {"type": metadata.get("type", ""), "outputs": metadata.get("outputs") or {}}


def _step(metadata: dict[str, Any]) -> dict[str, Any]:
    """A StepEventMetadata (events.go L224-249) as the digest's PreviewStep: `diffs` are the diff reasons, `keys`
    the replace reasons, a detailed diff's `diffKind` its kind."""
    detailed = metadata.get("detailedDiff")
    return {
        "op": metadata.get("op"),
        "urn": metadata.get("urn"),
        "oldState": _state(metadata.get("old")),
        "newState": _state(metadata.get("new")),
        "diffReasons": metadata.get("diffs"),
        "replaceReasons": metadata.get("keys"),
        "detailedDiff": (
            {path: {"kind": d.get("diffKind"), "inputDiff": d.get("inputDiff", False)} for path, d in detailed.items()}
            if isinstance(detailed, dict)
            else None
        ),
    }


def _from_events(events: list[Any]) -> StreamedPreview:
    steps: list[dict[str, Any]] = []
    refreshed: dict[str, dict[str, Any]] = {}  # urn -> its refresh step's resOutputsEvent
    diagnostics = []
    summary: dict[str, Any] | None = None
    for event in events:
        if not isinstance(event, dict):
            raise UnreadableReport(f"an engine event that is {_what_it_is(event)}")
        if isinstance(pre := event.get("resourcePreEvent"), dict):
            steps.append(_step(pre.get("metadata") or {}))
        elif isinstance(outputs := event.get("resOutputsEvent"), dict):
            metadata = outputs.get("metadata") or {}
            if metadata.get("op") == "refresh":
                refreshed[str(metadata.get("urn"))] = _step(metadata)
        elif isinstance(diagnostic := event.get("diagnosticEvent"), dict):
            diagnostics.append(diagnostic)
        elif isinstance(event.get("summaryEvent"), dict):
            summary = event["summaryEvent"]
    steps = [refreshed.get(str(s["urn"]), s) if s["op"] == "refresh" else s for s in steps]
    if summary is not None and summary.get("isPreview") is False:
        raise UnreadableReport(
            "the engine events of an update, not of a preview (its summaryEvent has isPreview false): "
            "run `pulumi preview --refresh --json`"
        )
    document = {
        "steps": steps,
        "diagnostics": diagnostics,
        "changeSummary": (summary or {}).get("resourceChanges") or {},
        "maybeCorrupt": bool((summary or {}).get("maybeCorrupt")),
        "summarized": summary is not None,
        "result": str((summary or {}).get("result") or ""),
    }
    try:
        return StreamedPreview.model_validate(document)
    except ValidationError as error:
        raise UnreadableReport(f"not the engine events of a preview: {_first_problem(error)}") from None


def _unfinished(digest: PreviewDigest) -> str:
    """Why the preview may have ended early ("" when it finished)."""
    if isinstance(digest, StreamedPreview):
        if not digest.summarized:
            return "its events end without a summaryEvent (the preview did not finish)"
        if digest.result not in ("", "succeeded"):
            return f"its summaryEvent says the preview {digest.result}"
        return ""
    if not digest.change_summary:
        return "it has no changeSummary, which the CLI writes from the preview's closing summary event (a cancelled preview has none)"
    return ""


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
        unfinished=bool(_unfinished(digest)),
    )
    if report.unfinished and not report.drifted:
        raise UnreadableReport(
            f"{_unfinished(digest)}: no listed step changes anything, but an unfinished preview cannot prove the "
            "stack clean"
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
            "The preview has no `changeSummary` (as engine events: no successful `summaryEvent`); it may have been "
            "cancelled before the end: other resources may differ too.",
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
    parser = argparse.ArgumentParser(
        prog="rocm-stack drift",
        description=__doc__.split("\n\n")[0],
        epilog=exit_codes(__doc__),
    )
    parser.add_argument(
        "report",
        type=Path,
        help="the output of `pulumi preview --refresh --json`: its digest, or its engine events "
        "(PULUMI_ENABLE_STREAMING_JSON_PREVIEW=true, or the file of --event-log)",
    )
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
