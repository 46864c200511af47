"""tools.drift on recorded `pulumi preview --refresh --json` outputs (tests/data/drift, see SOURCE.txt)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from schema.project import ROOT
from tools import drift
from upstream_go import Upstream, parse, text, walk

# pulumi/pulumi at the commit the module cites (its PreviewDigest, StepOp names and HasChanges).
PULUMI = Upstream("pulumi/pulumi", "1b5949891b3cefcb9974752b24a5ecef0acc86c8")

DATA = Path(__file__).parent / "data" / "drift"


def report_of(name: str) -> drift.DriftReport:
    return drift.analyse(drift.parse((DATA / name).read_text()))


def run_cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tools.drift", *map(str, args)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_no_drift_exits_0_and_says_so(tmp_path):
    out = tmp_path / "summary.md"
    result = run_cli(DATA / "no-drift.json", "--out", out)
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert "stack `dev`" in text and "No drift" in text and "|" not in text


def test_update_names_resource_operation_and_property_path(tmp_path):
    out = tmp_path / "summary.md"
    result = run_cli(DATA / "update.json", "--out", out)
    assert result.returncode == 1, result.stderr
    (change,) = report_of("update.json").changes
    assert (change.type, change.name, change.operation) == (
        "kubernetes:amd.com/v1alpha1:DeviceConfig",
        "gpu-operator-deviceconfig",
        "update",
    )
    assert change.properties == ("spec.driver.upgradePolicy.maxParallelUpgrades (update)",)
    text = out.read_text()
    assert "stack `prod`" in text and "Drift detected" in text
    assert "| `gpu-operator-deviceconfig` | `kubernetes:amd.com/v1alpha1:DeviceConfig` | update |" in text
    assert "`spec.driver.upgradePolicy.maxParallelUpgrades (update)`" in text


def test_replace_reports_each_replacing_property():
    (change,) = report_of("replace.json").changes
    assert (change.type, change.name, change.operation) == (
        "docker:index/container:Container",
        "local-train-a",
        "replace",
    )
    assert change.properties == ("ipcMode (update-replace)", "shmSize (update-replace)")
    assert run_cli(DATA / "replace.json").returncode == 1


def test_create_and_delete_are_both_listed():
    report = report_of("create-delete.json")
    assert {(c.name, c.operation) for c in report.changes} == {
        ("kube-amd-gpu", "create"),
        ("gpu-node-4-serve-b", "delete"),
    }
    assert not report.unexplained
    stdout = run_cli(DATA / "create-delete.json").stdout
    assert "2 resource(s) differ (1 create, 1 delete)" in stdout


def test_refresh_steps_count_only_when_they_changed_something():
    report = report_of("refresh-steps.json")
    # The unchanged ConfigMap refresh is not drift; the Service's refresh and update fold into one row.
    ((name, operation, properties),) = {(c.name, c.operation, c.properties) for c in report.changes}
    assert (name, operation) == ("metrics-exporter", "update")
    assert properties == ("metadata.labels.team (delete)",)


def test_refresh_step_without_diff_reports_changed_outputs():
    digest = drift.parse((DATA / "refresh-steps.json").read_text())
    refresh_only = digest.model_copy(
        update={"steps": [s for s in digest.steps if s.op != "update"], "change_summary": {"same": 7}}
    )
    (change,) = drift.analyse(refresh_only).changes
    assert (change.name, change.operation, change.properties) == ("metrics-exporter", "refresh", ("metadata",))


def test_replacement_halves_fold_into_one_replace():
    doc = json.loads((DATA / "replace.json").read_text())
    logical = doc["steps"][1]
    doc["steps"][1:] = [dict(logical, op="create-replacement"), dict(logical, op="delete-replaced")]
    doc["changeSummary"] = {"same": 8, "create-replacement": 1, "delete-replaced": 1}
    report = drift.analyse(drift.parse(json.dumps(doc)))
    assert [(c.name, c.operation) for c in report.changes] == [("local-train-a", "replace")]
    assert not report.unexplained


def test_changes_counted_in_summary_but_not_listed_still_count_as_drift():
    doc = json.loads((DATA / "no-drift.json").read_text())
    doc["changeSummary"] = {"same": 8, "update": 1}
    report = drift.analyse(drift.parse(json.dumps(doc)))
    assert report.drifted and report.unexplained == {"update": 1}
    assert "counts 1 `update` not listed" in drift.to_markdown(report)


def test_reads_are_not_drift():
    doc = json.loads((DATA / "no-drift.json").read_text())
    read = dict(doc["steps"][0], op="read", urn="urn:pulumi:dev::rocm-stack::kubernetes:core/v1:Namespace::kube-system")
    doc["steps"].append(read)
    doc["changeSummary"] = {"same": 9, "read": 1}
    assert not drift.analyse(drift.parse(json.dumps(doc))).drifted


def test_failed_preview_is_unreadable_not_clean():
    result = run_cli(DATA / "preview-error.json")
    assert result.returncode == 2
    assert "cluster is unreachable" in result.stderr and result.stdout == ""


@pytest.mark.parametrize(
    "content",
    [
        "",
        "not json at all",
        "[]",
        "42",
        '{"steps": []}',  # no summary and no change: an unfinished preview proves nothing
        "{}",
        '{"steps": "update"}',
        '{"steps": [{"op": "update", "urn": "urn:pulumi:p::r::t::n", "detailedDiff": {"a": 1}}]}',
        '{"changeSummary": {"update": "many"}}',
        "[" * 100_000 + "]" * 100_000,  # deeper than Python's parser goes: RecursionError, once a traceback
        '{"steps": [' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]}",
        '{"steps": [{"op": "update"}], "changeSummary": {"update": 1}}',  # a step without urn
        '{"steps": [{"op": "update", "urn": "bucket"}], "changeSummary": {"update": 1}}',  # not a URN
    ],
)
def test_garbage_and_empty_input_exit_2(tmp_path, capsys, content):
    report = tmp_path / "preview.json"
    report.write_text(content)
    assert drift.main([str(report)]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error:") and captured.out == ""
    assert len(captured.err.splitlines()) == 1 and "Traceback" not in captured.err, captured.err
    assert "pydantic" not in captured.err and "For further information" not in captured.err  # a sentence, not a dump


def test_text_after_the_digest_is_ignored(tmp_path):
    report = tmp_path / "preview.json"
    report.write_text(
        (DATA / "update.json").read_text() + "error: no changes were expected but changes were proposed\n"
    )
    assert drift.main([str(report), "--out", str(tmp_path / "summary.md")]) == 1


def test_missing_file_exits_2(tmp_path):
    assert drift.main([str(tmp_path / "absent.json")]) == 2


def test_urn_names_may_contain_separators():
    assert drift.split_urn("urn:pulumi:prod::rocm-stack::a:b:C$kubernetes:core/v1:Pod::ns::pod") == (
        "prod",
        "kubernetes:core/v1:Pod",
        "ns::pod",
    )


def _digest_tags() -> dict[str, str]:
    """PreviewDigest's JSON tags, as `json:"..."` strings, from pkg/display/json.go."""
    tree = parse(PULUMI.read("pkg/display/json.go"))
    (struct,) = [
        n for n in walk(tree) if n.type == "type_spec" and text(n.child_by_field_name("name")) == "PreviewDigest"
    ]
    return {
        text(f.child_by_field_name("name")): text(f.child_by_field_name("tag"))
        for f in walk(struct)
        if f.type == "field_declaration"
    }


def test_the_cli_omits_an_empty_summary_and_steps_and_a_false_maybe_corrupt():
    tags = _digest_tags()
    assert tags["ChangeSummary"] == '`json:"changeSummary,omitempty"`'
    assert tags["MaybeCorrupt"] == '`json:"maybeCorrupt,omitempty"`'
    assert tags["Steps"] == '`json:"steps,omitempty"`'
    fields = drift.PreviewDigest.model_fields
    assert not any(fields[name].is_required() for name in ("steps", "change_summary", "maybe_corrupt"))


def test_not_changes_are_the_ops_the_clis_has_changes_leaves_out():
    """pkg/engine/update.go HasChanges: `op != deploy.OpX && ...`, the names resolved in pkg/resource/deploy/step.go."""
    ops = dict(re.findall(rb'\t(Op\w+)\s+display\.StepOp = "([a-z-]+)"', PULUMI.read("pkg/resource/deploy/step.go")))
    source = PULUMI.read("pkg/engine/update.go").decode()
    body = source[source.index("func HasChanges(") :].split("\n}\n", 1)[0]
    left_out = {ops[name.encode()].decode() for name in re.findall(r"op != deploy\.(Op\w+)", body)}
    assert left_out == drift.NOT_CHANGES
    assert {"replace", "create-replacement", "delete-replaced"} <= {v.decode() for v in ops.values()}


def test_replace_steps_without_a_summary_are_drift(tmp_path):
    """The issue's case: a digest without changeSummary (omitempty, or a cancelled preview) whose steps replace."""
    doc = json.loads((DATA / "replace.json").read_text())
    del doc["changeSummary"]
    report = drift.analyse(drift.parse(json.dumps(doc)))
    assert [(c.name, c.operation) for c in report.changes] == [("local-train-a", "replace")]
    assert report.drifted and report.unfinished
    (tmp_path / "p.json").write_text(json.dumps(doc))
    result = run_cli(tmp_path / "p.json")
    assert result.returncode == 1, result.stderr
    assert "| `local-train-a` |" in result.stdout and "has no `changeSummary`" in result.stdout


def test_no_summary_and_no_change_cannot_be_judged_clean(tmp_path):
    doc = json.loads((DATA / "no-drift.json").read_text())
    del doc["changeSummary"]
    (tmp_path / "p.json").write_text(json.dumps(doc))
    result = run_cli(tmp_path / "p.json")
    assert result.returncode == 2 and result.stdout == ""
    assert "no changeSummary" in result.stderr and "cannot prove the stack clean" in result.stderr


def test_maybe_corrupt_is_reported_and_not_clean():
    doc = json.loads((DATA / "no-drift.json").read_text())
    doc["maybeCorrupt"] = True
    report = drift.analyse(drift.parse(json.dumps(doc)))
    assert report.drifted and not report.changes
    assert "may be corrupt** (`maybeCorrupt`)" in drift.to_markdown(report)


def test_an_unknown_op_counts_as_a_change():
    doc = json.loads((DATA / "no-drift.json").read_text())
    step = dict(doc["steps"][0], op="some-future-op", urn="urn:pulumi:dev::rocm-stack::docker:index/network:Network::n")
    doc["steps"].append(step)
    assert [c.operation for c in drift.analyse(drift.parse(json.dumps(doc))).changes] == ["some-future-op"]


# --- the same preview as engine events (PULUMI_ENABLE_STREAMING_JSON_PREVIEW=true, --event-log) -------------------

# The tag the event structs are read at: apitype.EngineEvent and its payloads, ShowJSONEvents.
PULUMI_V3_259_0 = Upstream("pulumi/pulumi", "0ac56e876614aedf12771d73ef7e80959b8a6fd4")
EVENTS = DATA / "update.events.jsonl"


def event_lines() -> list[dict]:
    return [json.loads(line) for line in EVENTS.read_text().splitlines()]


def write_events(path: Path, events: list[dict]) -> Path:
    path.write_text("".join(json.dumps(event) + "\n" for event in events))
    return path


def _struct_tags(source: bytes, name: str) -> dict[str, str]:
    """A Go struct's fields and their JSON names (the tag's first part)."""
    (struct,) = [
        n for n in walk(parse(source)) if n.type == "type_spec" and text(n.child_by_field_name("name")) == name
    ]
    return {
        text(f.child_by_field_name("name")): re.search(r'json:"([^",]*)', text(f.child_by_field_name("tag")))[1]
        for f in walk(struct)
        if f.type == "field_declaration" and f.child_by_field_name("tag") is not None
    }


def test_the_event_fields_read_are_apitypes_json_names():
    """sdk/go/common/apitype/events.go @ v3.259.0: the payload fields of EngineEvent, and the fields of the step
    metadata, property diff and summary the drift report reads; display.go streams them for a JSON preview when
    PULUMI_ENABLE_STREAMING_JSON_PREVIEW is set, and writes the same to --event-log."""
    source = PULUMI_V3_259_0.read("sdk/go/common/apitype/events.go")
    engine_event = _struct_tags(source, "EngineEvent")
    assert {tag for tag in engine_event.values() if tag.endswith("Event")} == drift.ENGINE_EVENTS
    assert {"op", "urn", "old", "new", "keys", "diffs", "detailedDiff"} <= set(
        _struct_tags(source, "StepEventMetadata").values()
    )
    assert {"type", "outputs"} <= set(_struct_tags(source, "StepEventStateMetadata").values())
    assert set(_struct_tags(source, "PropertyDiff").values()) == {"diffKind", "inputDiff"}
    assert {"maybeCorrupt", "resourceChanges", "isPreview", "result"} <= set(
        _struct_tags(source, "SummaryEvent").values()
    )
    assert {"metadata"} <= set(_struct_tags(source, "ResourcePreEvent").values())
    display = PULUMI_V3_259_0.read("pkg/backend/display/display.go").decode().splitlines()
    assert display[107].strip() == "streamPreview := env.EnableStreamingJSONPreview.Value()"
    assert display[127].strip() == "if isPreview && !streamPreview {" and "ShowJSONEvents(" in display[130]
    assert "startEventLogger(" in display[99]
    env = PULUMI_V3_259_0.read("sdk/go/common/env/env.go").decode()
    assert 'EnableStreamingJSONPreview = env.Bool("ENABLE_STREAMING_JSON_PREVIEW"' in env


def test_streamed_events_of_a_preview_with_drift_report_it_as_the_digest_does(tmp_path):
    streamed = report_of("update.events.jsonl")
    assert streamed.changes == report_of("update.json").changes and streamed.stack == "prod"
    assert not streamed.unfinished and not streamed.unexplained
    result = run_cli(EVENTS, "--out", tmp_path / "summary.md")
    assert result.returncode == 1, result.stderr
    assert "`spec.driver.upgradePolicy.maxParallelUpgrades (update)`" in (tmp_path / "summary.md").read_text()


def test_a_refresh_step_counts_by_its_refreshed_outputs(tmp_path):
    """The refresh step's resourcePreEvent has no new state; its resOutputsEvent carries what the refresh read."""
    events = [
        e
        for e in event_lines()
        if (e.get("resourcePreEvent") or e.get("resOutputsEvent") or {}).get("metadata", {}).get("op") != "update"
    ]
    (change,) = drift.analyse(drift.parse(write_events(tmp_path / "e.jsonl", events).read_text())).changes
    assert (change.name, change.operation, change.properties) == ("gpu-operator-deviceconfig", "refresh", ("spec",))


def test_streamed_events_without_a_change_exit_0(tmp_path):
    events = [
        e
        for e in event_lines()
        if not {"resourcePreEvent", "resOutputsEvent"} & e.keys()
        or e.get("resourcePreEvent", {}).get("metadata", {}).get("op") == "same"
    ]
    for event in events:
        if "summaryEvent" in event:
            event["summaryEvent"]["resourceChanges"] = {"same": 15}
    assert run_cli(write_events(tmp_path / "e.jsonl", events)).returncode == 0


@pytest.mark.parametrize("result", [None, "canceled", "failed"])
def test_streamed_events_that_end_early_prove_nothing_clean_but_show_drift(tmp_path, result):
    events = event_lines()
    for event in events:
        if "summaryEvent" in event:
            event["summaryEvent"]["result"] = result
            event["summaryEvent"]["resourceChanges"] = {"same": 15}  # the update below is in the steps alone
    if result is None:
        events = [e for e in events if "summaryEvent" not in e]
    assert run_cli(write_events(tmp_path / "drift.jsonl", events)).returncode == 1
    clean = [
        e
        for e in events
        if e.get("resourcePreEvent", e.get("resOutputsEvent", {})).get("metadata", {}).get("op", "same") == "same"
    ]
    outcome = run_cli(write_events(tmp_path / "clean.jsonl", clean))
    assert outcome.returncode == 2 and "cannot prove the stack clean" in outcome.stderr
    assert ("without a summaryEvent" if result is None else f"says the preview {result}") in outcome.stderr


def test_the_events_of_an_update_are_no_preview(tmp_path):
    events = event_lines()
    for event in events:
        if "summaryEvent" in event:
            event["summaryEvent"]["isPreview"] = False
    outcome = run_cli(write_events(tmp_path / "up.jsonl", events))
    assert outcome.returncode == 2 and "engine events of an update" in outcome.stderr


def test_an_error_diagnostic_event_makes_the_stream_unjudgeable(tmp_path):
    error = {
        "sequence": 99,
        "timestamp": 0,
        "diagnosticEvent": {"message": "cluster is unreachable", "color": "never", "severity": "error"},
    }
    outcome = run_cli(write_events(tmp_path / "e.jsonl", [error, *event_lines()]))
    assert outcome.returncode == 2 and "cluster is unreachable" in outcome.stderr


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ({}, "an empty JSON object, neither a `pulumi preview --json` digest nor its engine events"),
        ({"version": 3, "deployment": {"resources": []}}, "a Pulumi state file (`pulumi stack export`)"),
        ({"stack": "dev", "resources": [], "outputs": {}}, "a synth plan (plan.json of `rocm-stack synth`)"),
        ({"kind": "Deployment", "apiVersion": "apps/v1"}, "a JSON object with keys apiVersion, kind: neither"),
        ([1, 2], "a JSON list, neither"),
    ],
)
def test_any_other_json_is_named_for_what_it_is(tmp_path, document, named):
    """Once, any JSON object without a changeSummary was "a cancelled preview"."""
    (tmp_path / "x.json").write_text(json.dumps(document))
    outcome = run_cli(tmp_path / "x.json")
    assert outcome.returncode == 2 and named in outcome.stderr, outcome.stderr
    assert "cancelled" not in outcome.stderr


def test_a_line_amid_the_events_that_is_no_event_is_named(tmp_path):
    path = write_events(tmp_path / "e.jsonl", event_lines())
    path.write_text(path.read_text() + '{"hello": 1}\n')
    outcome = run_cli(path)
    assert outcome.returncode == 2 and "line 9 is a JSON object with keys hello" in outcome.stderr
