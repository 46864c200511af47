"""synth's output folder (issue 27 item 10): the `.synth-manifest` is data, never trusted; nothing outside `--out`
is deleted or written, no symlink is followed, and two synths into one folder take turns (no mixed files)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools import synth

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def files(monkeypatch):
    rendered = {"plan.json": "{}\n", "docker/host.sh": "#!/bin/sh\n"}
    monkeypatch.setattr(synth, "rendered_files", lambda plan: dict(rendered))
    return rendered


@pytest.mark.parametrize("entry", ["{victim}", "../victim", "docker/../../victim"])
def test_a_tampered_manifest_deletes_nothing_outside_out(tmp_path, files, entry):
    out, victim = tmp_path / "out", tmp_path / "victim"
    victim.write_text("keep")
    out.mkdir()
    (out / synth.MANIFEST).write_text(entry.format(victim=victim) + "\n")
    assert synth.write(None, out) == sorted(files)
    assert victim.read_text() == "keep"


def test_a_symlink_in_out_is_replaced_never_written_through(tmp_path, files):
    out, target = tmp_path / "out", tmp_path / "target"
    target.write_text("keep")
    out.mkdir()
    (out / "plan.json").symlink_to(target)
    synth.write(None, out)
    assert target.read_text() == "keep"
    assert not (out / "plan.json").is_symlink() and (out / "plan.json").read_text() == "{}\n"


def test_a_symlinked_folder_is_refused_and_stale_files_behind_it_stay(tmp_path, files):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "host.sh").write_text("keep")
    (elsewhere / "old.sh").write_text("keep")
    out.mkdir()
    (out / "docker").symlink_to(elsewhere)
    (out / synth.MANIFEST).write_text("docker/old.sh\n")
    with pytest.raises(synth.OutputError, match="through a symlink"):
        synth.write(None, out)
    assert (elsewhere / "host.sh").read_text() == "keep" and (elsewhere / "old.sh").read_text() == "keep"


WRITER = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from tools import synth
    tag, out = sys.argv[1], Path(sys.argv[2])
    synth.rendered_files = lambda plan: {f"{tag}/{i}.txt": tag for i in range(20)} | {"plan.json": tag}
    for _ in range(8):
        synth.write(None, out)
    """
)


def test_two_synths_into_one_folder_leave_one_plan_s_files(tmp_path):
    """Two real processes writing different plans into one folder, over and over: each write holds the lock, so
    the folder ends with exactly the last writer's files (without it, one's manifest drops the other's files,
    which stay behind)."""
    out = tmp_path / "out"
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, tag, str(out)], cwd=ROOT) for tag in ("a", "b")]
    assert [w.wait(timeout=60) for w in writers] == [0, 0]
    last = (out / "plan.json").read_text()
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    expected = sorted([f"{last}/{i}.txt" for i in range(20)] + ["plan.json", synth.MANIFEST, synth.LOCK])
    assert left == expected
