"""Host preflight: is this GPU host configured the way AMD requires? Standard library only.

Run in a one-shot container that sees the host's /proc and /sys read-only under --root (the stack mounts them at
/host/proc and /host/sys), or on the host itself with --root /:

  python3 -m programs.preflight --root /host --host NAME --expect-gpus N --gpu-model MI300X --rocm 7.0 --json

Checks (each finding names the value seen and the fix):
  numa_balancing  /proc/sys/kernel/numa_balancing is 0 (AMD MI300X system optimization guide, "Disable NUMA
                  auto-balancing").
  iommu           `iommu=pt` on /proc/cmdline (same guide, "iommu=pt"); not on MI300A, whose acceptance guide wants
                  the IOMMU off (ROCm/system-acceptance-docs docs/gpus/mi300a.md L154).
  driver          /sys/module/amdgpu/version is a driver that supports every --rocm release (DRIVER_ROCM).
  gpu_count       GPU nodes of the KFD topology equal --expect-gpus (hosts[].gpus).
Output: one JSON object with --json, else text. Exit 0: no finding; 1: findings; 2: bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "preflight/1"

# /sys/module/amdgpu/version prints the DKMS driver version (6.16.6), not the release (30.20.1) that AMD's
# compatibility matrix is keyed by, and AMD publishes no mapping (ROCm/rocm-install-on-linux issue #684, open).
# The rows below are the releases whose DKMS version is on record:
#   6.12 -> ROCm 6.4's driver: ROCm/legacy-rocm-build issue #5085 ("ROCm 6.4.1 / AMDGPU Driver 25.10.1",
#           /var/lib/dkms/amdgpu/6.12.12-2164967.24.04); amdgpu-docs gpu-partitioning/mi300x/requirements.rst L73.
#   6.14 -> 30.10.x: ROCm/amdgpu-docs docs/install/detailed-install/post-install.rst L64-67 @ 67902e2
#           ("amdgpu/6.14.14-2204008.24.04 ... 6.14.14: amdgpu driver version").
#   6.16 -> 30.20.x: bottlerocket-os/bottlerocket-kernel-kit PR #326 ("update amdgpu to version 30.20.1 ...
#           amdgpu-dkms-6.16.6"); ROCm/legacy-rocm-build issue #5624 (`[drm] amdgpu version: 6.16.6`).
# Supported ROCm releases per driver release: AMD's compatibility matrix, ROCm/amdgpu-docs
# docs/compatibility/compatibility-matrix.rst @ 5ec885c1bfbdff4fb101e1d76bc85f805db62091
# (instinct.docs.amd.com/projects/amdgpu-docs/en/latest/compatibility/compatibility-matrix.html).
# A version not listed here (6.18 is seen on MI350X hosts, release unknown) is reported as a note, never guessed.
DRIVER_RELEASE = {"6.12": "6.4.x", "6.14": "30.10.x", "6.16": "30.20.x"}
DRIVER_ROCM = {
    "30.20.x": ("6.3", "6.4", "7.0", "7.1", "7.2", "7.14", "10.0"),
    "30.10.x": ("6.2", "6.3", "6.4", "7.0", "7.1", "7.2", "7.14", "10.0"),
    "6.4.x": ("6.1", "6.2", "6.3", "6.4", "7.0", "7.1", "7.2"),
}
# MI300A runs with the IOMMU off (system-acceptance mi300a.md L154: "IOMMU off"), so iommu=pt does not apply.
IOMMU_PT_EXEMPT = {"MI300A"}
KFD_NODES = "sys/devices/virtual/kfd/kfd/topology/nodes"


@dataclass
class Finding:
    check: str
    seen: str
    expected: str
    fix: str


@dataclass
class Report:
    host: str
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    facts: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "schema": SCHEMA,
            "host": self.host,
            "verdict": "fail" if self.findings else "pass",
            "findings": [asdict(f) for f in self.findings],
            "notes": self.notes,
            "facts": self.facts,
        }


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return None


def check_numa_balancing(root: Path, report: Report) -> None:
    value = _read(root / "proc/sys/kernel/numa_balancing")
    report.facts["numa_balancing"] = value
    if value is None:
        # The sysctl exists only in kernels built with CONFIG_NUMA_BALANCING: there is nothing to balance.
        report.notes.append("kernel.numa_balancing does not exist (kernel without NUMA balancing)")
    elif value != "0":
        report.findings.append(
            Finding(
                "numa_balancing",
                f"kernel.numa_balancing = {value}",
                "0",
                "sysctl -w kernel.numa_balancing=0, and keep it across reboots with "
                "`echo kernel.numa_balancing=0 > /etc/sysctl.d/90-rocm.conf` (or boot with numa_balancing=disable)",
            )
        )


def check_iommu(root: Path, gpu_model: str, report: Report) -> None:
    cmdline = _read(root / "proc/cmdline") or ""
    report.facts["cmdline"] = cmdline
    if gpu_model in IOMMU_PT_EXEMPT:
        report.notes.append(f"iommu=pt not checked: {gpu_model} runs with the IOMMU off")
        return
    if "iommu=pt" not in cmdline.split():
        report.findings.append(
            Finding(
                "iommu",
                f"kernel command line without iommu=pt: {cmdline or '(empty)'}",
                "iommu=pt",
                "add iommu=pt (and amd_iommu=on on AMD CPUs, intel_iommu=on on Intel) to GRUB_CMDLINE_LINUX in "
                "/etc/default/grub, run update-grub (or grub2-mkconfig) and reboot",
            )
        )


def check_driver(root: Path, rocm: list[str], report: Report) -> None:
    version = _read(root / "sys/module/amdgpu/version")
    report.facts["amdgpu_version"] = version
    if version is None:
        if (root / "sys/module/amdgpu").is_dir():
            report.notes.append(
                "amdgpu is loaded without a version (the kernel's in-tree driver): compatibility "
                "with the images' ROCm releases cannot be checked"
            )
        else:
            report.findings.append(
                Finding(
                    "driver",
                    "the amdgpu kernel module is not loaded",
                    "amdgpu loaded",
                    "install the AMD GPU driver (amdgpu-dkms, AMD's install guide) and `modprobe amdgpu`",
                )
            )
        return
    series = ".".join(version.split(".")[:2])
    release = DRIVER_RELEASE.get(series)
    if release is None:
        report.notes.append(
            f"amdgpu {version}: not in the driver table (programs/preflight.py DRIVER_RELEASE), "
            "compatibility with the images' ROCm releases not checked"
        )
        return
    report.facts["driver_release"] = release
    unsupported = [r for r in rocm if r not in DRIVER_ROCM[release]]
    if unsupported:
        report.findings.append(
            Finding(
                "driver",
                f"amdgpu {version} (release {release}) does not support ROCm {', '.join(unsupported)}",
                f"a driver supporting ROCm {', '.join(sorted(set(rocm)))} (supports {', '.join(DRIVER_ROCM[release])})",
                "install a driver release that AMD's compatibility matrix lists for the images' ROCm release, "
                "or pin images built on a ROCm release this driver supports",
            )
        )


def kfd_gpu_nodes(root: Path) -> int | None:
    """GPU nodes of the KFD topology, or None without one. A node is a GPU when its properties count SIMDs (CPU
    nodes have `simd_count 0`), or when reading them fails with EPERM: KFD refuses a GPU's attributes to a reader
    whose device cgroup does not allow that GPU (kfd_topology.c node_show:
    `if (dev->gpu && kfd_devcgroup_check_permission(dev->gpu)) return -EPERM;`), as in a container without it."""
    nodes = root / KFD_NODES
    if not nodes.is_dir():
        return None
    count = 0
    for node in nodes.iterdir():
        try:
            properties = (node / "properties").read_text()
        except PermissionError:
            count += 1
            continue
        except FileNotFoundError:
            continue
        fields = dict(line.split(None, 1) for line in properties.splitlines() if len(line.split(None, 1)) == 2)
        count += int(fields.get("simd_count", "0")) > 0
    return count


def check_gpu_count(root: Path, expected: int, report: Report) -> None:
    count = kfd_gpu_nodes(root)
    report.facts["kfd_gpus"] = count
    if count != expected:
        seen = "no KFD topology (amdgpu/KFD not loaded)" if count is None else f"{count} GPU(s) in the KFD topology"
        report.findings.append(
            Finding(
                "gpu_count",
                seen,
                f"{expected} (hosts[].gpus)",
                "set hosts[].gpus to what the host has (`amd-smi list`; a partition mode such as CPX multiplies it), "
                "or find the missing GPUs (`dmesg | grep amdgpu`, PCIe link, pci=realloc=off)",
            )
        )


def preflight(root: Path, host: str, expect_gpus: int, gpu_model: str, rocm: list[str]) -> Report:
    report = Report(host)
    check_numa_balancing(root, report)
    check_iommu(root, gpu_model, report)
    check_driver(root, rocm, report)
    check_gpu_count(root, expect_gpus, report)
    return report


def text_report(data: dict[str, Any]) -> str:
    lines = [f"preflight {data['host']}: {str(data['verdict']).upper()}"]
    lines += [f"  {f['check']}: {f['seen']} (expected {f['expected']}); fix: {f['fix']}" for f in data["findings"]]
    lines += [f"  note: {note}" for note in data["notes"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m programs.preflight", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", type=Path, default=Path("/"), help="where the host's /proc and /sys are (default /)")
    p.add_argument("--host", default=os.uname().nodename, help="the host's name in the stack")
    p.add_argument("--expect-gpus", type=int, required=True, metavar="N")
    p.add_argument("--gpu-model", default="other")
    p.add_argument(
        "--rocm", action="append", default=[], metavar="X.Y", help="ROCm release of an image the host runs (repeatable)"
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.expect_gpus < 1:
        p.error("--expect-gpus must be >= 1")
    if not (args.root / "proc").is_dir():
        p.error(f"{args.root}/proc is not a directory: mount the host's /proc and /sys under --root")
    data = preflight(args.root, args.host, args.expect_gpus, args.gpu_model, args.rocm).to_json()
    print(json.dumps(data) if args.json else text_report(data), flush=True)
    return 0 if data["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
