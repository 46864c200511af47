"""programs/preflight.py on recorded host samples (tests/data/preflight, see its SOURCE.md), run as the stack runs it."""

from __future__ import annotations

import json
import pytest
import subprocess
import sys
from pathlib import Path


from programs import preflight
from schema.project import ROOT
from upstream_go import Upstream

DATA = Path(__file__).parent / "data" / "preflight"


def run(sample: str, *args: str) -> tuple[int, dict]:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "programs.preflight",
            "--root",
            str(DATA / sample),
            "--json",
            "--host",
            "gpu-node-1",
            *args,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    return result.returncode, json.loads(result.stdout) if result.stdout else {"stderr": result.stderr}


def test_a_host_set_up_as_amd_requires_passes():
    code, report = run("mi300x-good", "--expect-gpus", "8", "--gpu-model", "MI300X", "--rocm", "7.0")
    assert (code, report["verdict"], report["findings"]) == (0, "pass", [])
    assert report["facts"]["driver_release"] == "30.20.x" and report["facts"]["kfd_gpus"] == 8


def test_mi300a_needs_no_iommu_pt():
    """AMD's MI300A acceptance wants the IOMMU off (system-acceptance docs/gpus/mi300a.md L154), so its command line
    has no iommu=pt; 4 APUs are 4 GPU nodes next to 4 CPU nodes in the recorded KFD topology."""
    code, report = run("mi300a-good", "--expect-gpus", "4", "--gpu-model", "MI300A", "--rocm", "7.0")
    assert (code, report["findings"]) == (0, [])
    assert any("iommu=pt not checked" in note for note in report["notes"])


def test_every_problem_is_a_finding_with_the_value_seen_and_the_fix():
    code, report = run("mi300x-bad", "--expect-gpus", "8", "--gpu-model", "MI300X", "--rocm", "7.0", "--rocm", "7.14")
    assert code == 1 and report["verdict"] == "fail"
    found = {f["check"]: f for f in report["findings"]}
    assert sorted(found) == ["driver", "gpu_count", "iommu", "numa_balancing"]
    assert found["numa_balancing"]["seen"] == "kernel.numa_balancing = 1"
    assert "sysctl -w kernel.numa_balancing=0" in found["numa_balancing"]["fix"]
    assert "quiet splash" in found["iommu"]["seen"] and "iommu=pt" in found["iommu"]["fix"]
    # ROCm 6.4's driver (DKMS 6.12) supports ROCm 6.1 .. 7.2 in AMD's compatibility matrix, not 7.14.
    assert found["driver"]["seen"] == "amdgpu 6.12.12 (release 6.4.x) does not support ROCm 7.14"
    assert found["gpu_count"]["seen"] == "7 GPU(s) in the KFD topology"


def test_an_in_tree_driver_is_a_note_and_no_kfd_is_a_finding():
    code, report = run("in-tree-no-kfd", "--expect-gpus", "2", "--rocm", "7.0")
    assert code == 1
    assert [f["check"] for f in report["findings"]] == ["gpu_count"]
    assert any("in-tree" in note for note in report["notes"])


def test_a_gpu_node_the_cgroup_denies_still_counts(monkeypatch, tmp_path):
    """In the preflight container (no GPU devices) KFD answers EPERM for every GPU node's attributes
    (linux drivers/gpu/drm/amd/amdkfd/kfd_topology.c node_show: `if (dev->gpu &&
    kfd_devcgroup_check_permission(dev->gpu)) return -EPERM;`); CPU nodes stay readable."""
    real = Path.read_text

    def read_text(path: Path, *args, **kwargs):
        if path.name == "properties" and "simd_count 912" in real(path):
            raise PermissionError(1, "Operation not permitted", str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    assert preflight.kfd_gpu_nodes(DATA / "mi300x-good") == 8


def test_unknown_driver_versions_are_noted_not_guessed(tmp_path):
    report = preflight.Report("h")
    (tmp_path / "sys/module/amdgpu").mkdir(parents=True)
    (tmp_path / "sys/module/amdgpu/version").write_text("6.18.3\n")  # MI350X amd-smi sample, release unknown
    preflight.check_driver(tmp_path, ["7.0"], report)
    assert report.findings == [] and "not in the driver table" in report.notes[0]


def test_bad_arguments_exit_2():
    code, report = run("mi300x-good", "--expect-gpus", "0")
    assert code == 2


# --- dockerd's stop: docker.service's TimeoutStopSec and live-restore (issue 35 item 6) ------------------------------

MOBY_28 = Upstream("moby/moby", "89c5e8fd66634b6128fc4c0e6f1236e2540e46e0")  # tag v28.5.2
MOBY_20 = Upstream("moby/moby", "5d6db842238e3c4f5f9fb9ad70ea46b35227d084")  # tag v20.10.24 (Debian's docker.io)
# What Docker's own unit says about stopping, in the form the tests write it (the real unit is read from the mirror).
DOCKER_UNIT = "[Unit]\nDescription=Docker\n\n[Service]\nType=notify\nExecStart=/usr/bin/dockerd -H fd://\nTimeoutStartSec=0\nKillMode=process\n"


def host_root(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "proc").mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def stop_finding(root: Path, grace: int) -> preflight.Report:
    report = preflight.Report("h")
    preflight.check_docker_stop(root, grace, report)
    return report


def test_dockers_unit_leaves_systemds_90_s_which_cuts_a_300_s_training_grace(tmp_path: Path):
    root = host_root(tmp_path, {"lib/systemd/system/docker.service": DOCKER_UNIT})
    assert preflight.docker_stop_timeout(root) == (90.0, "systemd's default (DefaultTimeoutStopSec unset)")
    (finding,) = stop_finding(root, 300).findings
    assert finding.check == "docker_stop" and finding.expected == "TimeoutStopSec >= 305 s for docker.service"
    assert (
        "/etc/systemd/system/docker.service.d/rocm-stack-stop.conf" in finding.fix
        and "TimeoutStopSec=330s" in finding.fix
    )
    assert not stop_finding(root, 85).findings  # 85 + dockerd's 5 s fit in 90 s


@pytest.mark.parametrize(
    ("files", "seconds", "where"),
    [
        (  # the fix docs/operations.md gives
            {"etc/systemd/system/docker.service.d/rocm-stack-stop.conf": "[Service]\nTimeoutStopSec=330s\n"},
            330.0,
            "TimeoutStopSec= in /etc/systemd/system/docker.service.d/rocm-stack-stop.conf",
        ),
        (  # TimeoutSec= sets the start and the stop timeout; a later file name wins
            {
                "etc/systemd/system/docker.service.d/10-a.conf": "[Service]\nTimeoutStopSec=20\n",
                "etc/systemd/system/docker.service.d/20-b.conf": "[Service]\n# a comment\nTimeoutSec=5min 30s\n",
            },
            330.0,
            "TimeoutSec= in /etc/systemd/system/docker.service.d/20-b.conf",
        ),
        (  # an empty assignment resets to the manager's default, here from system.conf
            {
                "etc/systemd/system/docker.service.d/a.conf": "[Service]\nTimeoutStopSec=20\nTimeoutStopSec=\n",
                "etc/systemd/system.conf": "[Manager]\n#DefaultTimeoutStopSec=90s\nDefaultTimeoutStopSec=10min\n",
            },
            600.0,
            "DefaultTimeoutStopSec= in /etc/systemd/system.conf",
        ),
        (  # no timeout at all
            {"etc/systemd/system/docker.service.d/a.conf": "[Service]\nTimeoutStopSec=infinity\n"},
            None,
            "TimeoutStopSec= in /etc/systemd/system/docker.service.d/a.conf",
        ),
        (  # Fedora's drop-in for every service (systemd's 10-timeout-abort.conf): 45 s
            {"usr/lib/systemd/system/service.d/10-timeout-abort.conf": "[Service]\nTimeoutStopSec=45\n"},
            45.0,
            "TimeoutStopSec= in /usr/lib/systemd/system/service.d/10-timeout-abort.conf",
        ),
        (  # a unit file in /etc replaces the packaged one
            {"etc/systemd/system/docker.service": DOCKER_UNIT.replace("TimeoutStartSec=0", "TimeoutSec=400")},
            400.0,
            "TimeoutSec= in /etc/systemd/system/docker.service",
        ),
    ],
)
def test_the_stop_timeout_systemd_gives_dockerd(tmp_path: Path, files, seconds, where):
    root = host_root(tmp_path, {"lib/systemd/system/docker.service": DOCKER_UNIT, **files})
    assert preflight.docker_stop_timeout(root) == (seconds, where)
    assert bool(stop_finding(root, 300).findings) == (seconds is not None and seconds < 305)


def test_a_host_without_dockers_unit_gets_a_note(tmp_path: Path):
    report = stop_finding(host_root(tmp_path, {}), 300)
    assert not report.findings and report.notes == [
        "no systemd unit docker.service under /etc or /lib/systemd: dockerd's stop not checked"
    ]


def test_systemd_time_spans():
    assert [preflight.timespan_seconds(t) for t in ("90", "90s", "5min 20s", "1min30s", "2h", "500ms")] == [
        90,
        90,
        320,
        90,
        7200,
        0.5,
    ]
    assert preflight.timespan_seconds("infinity") is None and preflight.timespan_seconds("0") is None
    with pytest.raises(ValueError):
        preflight.timespan_seconds("soon")


def test_live_restore_from_the_flag_or_the_daemons_config_file(tmp_path: Path):
    root = host_root(
        tmp_path,
        {
            "proc/1/cmdline": "/sbin/init\0",
            "proc/812/cmdline": "/usr/bin/dockerd\0-H\0fd://\0--config-file\0/etc/docker/gpu.json\0",
            "etc/docker/gpu.json": '{"live-restore": true, "log-driver": "json-file"}',
            "etc/docker/daemon.json": '{"live-restore": false}',
        },
    )
    report = preflight.Report("h")
    preflight.check_live_restore(root, report)
    assert not report.findings and report.facts["live_restore"] is True
    (note,) = report.notes
    assert note.startswith('dockerd (pid 812) runs with live-restore ("live-restore": true in /etc/docker/gpu.json)')
    assert preflight.live_restore(root, ["dockerd", "--live-restore"]) == (True, "--live-restore on its command line")
    assert preflight.live_restore(root, ["dockerd"]) == (False, "/etc/docker/daemon.json")


def test_dockers_own_units_set_no_stop_timeout_and_dockerd_waits_the_longest_grace_plus_5_s(tmp_path: Path):
    """moby's contrib/init/systemd/docker.service at v28.5.2 and v20.10.24 (what Debian's docker.io packages) set
    TimeoutStartSec=0 and no stop timeout: read as systemd reads it, 90 s. dockerd's shutdown waits each container's
    stop timeout + 5 s and, with live-restore, stops none (daemon/daemon.go)."""
    for moby in (MOBY_28, MOBY_20):
        unit = moby.read("contrib/init/systemd/docker.service").decode()
        root = host_root(tmp_path / moby.commit, {"lib/systemd/system/docker.service": unit})
        assert preflight.docker_stop_timeout(root) == (90.0, "systemd's default (DefaultTimeoutStopSec unset)")
    daemon = MOBY_28.read("daemon/daemon.go").decode().splitlines()
    assert daemon[1255].strip() == f"graceTimeout := {preflight.DOCKERD_GRACE_S}"  # L1256
    assert daemon[1261].strip() == "if stopTimeout+graceTimeout > shutdownTimeout {"  # L1262
    assert daemon[1275].strip() == "if cfg.LiveRestoreEnabled && daemon.containers != nil {"  # L1276
    assert daemon[1279].strip() == "metrics.CleanupPlugin(daemon.PluginStore)" and daemon[1280].strip() == "return err"
