"""The host preflight finds a running dockerd's live-restore (issue 35 item 6), on a real daemon.

A second private dockerd (tests/e2e/harness.py private_daemon) whose daemon.json has `"live-restore": true`: the
preflight, run on this machine's own /proc and /etc (`--root /`, as on a host), finds it by its command line and
config file and says what that means for a daemon stop. What dockerd does then (no container stopped, no signal:
moby/moby daemon/daemon.go Shutdown) is pinned from the source in tests/test_preflight.py.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from e2e.harness import Docker, private_daemon
from programs import preflight


def test_the_preflight_finds_a_running_dockerds_live_restore(docker: Docker):
    """`docker`: the session's daemon, whose fixture decides whether a daemon can run here (a skip, or under CI=1 a
    failure); this test starts a second one of its own, under a short /tmp folder: pytest's tmp_path is too long for
    containerd's sockets below the exec root (a unix socket path has at most 107 bytes, sun_path in unix(7))."""
    with (
        tempfile.TemporaryDirectory(prefix="rocm-stack-e2e-") as tmp,
        private_daemon(tmp_path := Path(tmp), {"live-restore": True}) as live,
    ):
        assert live.out("info", "--format", "{{.LiveRestoreEnabled}}").strip() == "true"
        report = preflight.Report("this-machine")
        preflight.check_live_restore(Path("/"), report)
        config = tmp_path / "daemon.json"
        (note,) = [n for n in report.notes if f'"live-restore": true in {config}' in n]
        assert "stopping or restarting it leaves the containers running without any signal" in note
        assert "docker stop -t <their grace>" in note and not report.findings
