"""programs/preflight.py on recorded host samples (tests/data/preflight, see its SOURCE.md), run as the stack runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


from programs import preflight
from schema.project import ROOT

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
