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
  docker_stop     with --stop-grace N (the longest stop grace of the host's containers): systemd gives dockerd at least
                  N + 5 s to stop (docker.service's TimeoutStopSec, from the unit files under --root's etc/ and
                  lib/systemd), or a daemon stop or reboot SIGKILLs the containers before their grace ends.
  live-restore    (a note) a running dockerd with live-restore (its --live-restore flag, or its daemon.json where
                  --root shows it: not in the stack's container) leaves its containers running on a daemon stop,
                  without any signal: stop them first with `docker stop -t N`.
Output: one JSON object with --json, else text. Exit 0: no finding; 1: findings; 2: bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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


# dockerd's stop. On SIGTERM it stops every running container with the container's own stop timeout and waits the
# longest of them plus 5 s (moby/moby v28.5.2 daemon/daemon.go L1247-1266 shutdownTimeout, `graceTimeout := 5`;
# Shutdown L1270-1303), unless live-restore is on: then it returns at once and leaves them running, unsignalled
# (L1276-1282). systemd SIGKILLs dockerd when its stop takes longer than the unit's TimeoutStopSec; Docker's unit
# sets none (contrib/init/systemd/docker.service @ v28.5.2: TimeoutStartSec=0 only; Debian's docker.io the same), so
# the manager's DefaultTimeoutStopSec applies, 90 s unless system.conf says otherwise (systemd meson_options.txt
# `option('default-timeout-sec', type : 'integer', value : 90, ...)`; systemd-system.conf(5)).
DOCKER_UNIT = "docker.service"
DOCKERD_GRACE_S = 5
SYSTEMD_DEFAULT_TIMEOUT_S = 90
# systemd's system unit load path, highest precedence first (systemd.unit(5), "Unit File Load Path"), the
# directories a host keeps on disk (those under /run hold runtime units only).
UNIT_DIRS = ("etc/systemd/system", "usr/local/lib/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
# The manager's own configuration (systemd-system.conf(5)): system.conf, then its drop-ins by file name.
MANAGER_CONF = "etc/systemd/system.conf"
MANAGER_CONF_DIRS = ("etc/systemd/system.conf.d", "usr/lib/systemd/system.conf.d", "lib/systemd/system.conf.d")
# A time span (systemd.time(7)): numbers with units, a bare number in seconds.
_SPAN_UNITS = {
    **dict.fromkeys(("usec", "us", "µs"), 1e-6),
    **dict.fromkeys(("msec", "ms"), 1e-3),
    **dict.fromkeys(("seconds", "second", "sec", "s", ""), 1.0),
    **dict.fromkeys(("minutes", "minute", "min", "m"), 60.0),
    **dict.fromkeys(("hours", "hour", "hr", "h"), 3600.0),
    **dict.fromkeys(("days", "day", "d"), 86400.0),
    **dict.fromkeys(("weeks", "week", "w"), 604800.0),
    **dict.fromkeys(("months", "month", "M"), 2629800.0),
    **dict.fromkeys(("years", "year", "y"), 31557600.0),
}
_SPAN_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Zµ]*)")
DOCKER_DAEMON_JSON = "etc/docker/daemon.json"


def timespan_seconds(text: str) -> float | None:
    """Seconds of a systemd time span; None for "infinity" or 0, which disable a stop timeout (systemd.service(5),
    TimeoutStopSec=: "Pass "infinity" to disable the timeout logic"; 0 in releases before 236)."""
    text = text.strip()
    if text == "infinity":
        return None
    total, position = 0.0, 0
    while position < len(text):
        part = _SPAN_PART.match(text, position)
        if part is None or part[2] not in _SPAN_UNITS:
            raise ValueError(f"not a systemd time span: {text!r}")
        total += float(part[1]) * _SPAN_UNITS[part[2]]
        position = part.end()
    if not text:
        raise ValueError("an empty time span")
    return total or None


def _ini_assignments(path: Path, section: str) -> list[tuple[str, str]]:
    """(key, value) of `section` in a systemd unit or configuration file, in order (systemd.syntax(7): `#` and `;`
    start comments, a trailing backslash continues the line)."""
    try:
        lines = path.read_text(errors="replace").replace("\\\n", " ").splitlines()
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError):
        return []
    current, found = None, []
    for line in lines:
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and "=" in line:
            key, _, value = line.partition("=")
            found.append((key.strip(), value.strip()))
    return found


def _drop_ins(root: Path, dirs: list[Path]) -> list[Path]:
    """The `*.conf` files of `dirs` (highest precedence first): one per file name, applied in file-name order."""
    chosen: dict[str, Path] = {}
    for directory in dirs:
        for conf in sorted((root / directory).glob("*.conf")) if (root / directory).is_dir() else []:
            chosen.setdefault(conf.name, conf)
    return [chosen[name] for name in sorted(chosen)]


def docker_stop_timeout(root: Path) -> tuple[float | None, str] | None:
    """(seconds, where it is set) of docker.service's stop timeout (None seconds: no timeout), or None without
    the unit. The unit file is the first on the load path; its drop-ins (`docker.service.d/`, and `service.d/` for
    every service) follow; the last TimeoutStopSec= or TimeoutSec= wins, an empty one resets to the default."""
    unit = next((root / d / DOCKER_UNIT for d in UNIT_DIRS if (root / d / DOCKER_UNIT).is_file()), None)
    if unit is None:
        return None
    files = [unit, *_drop_ins(root, [Path(d) / f"{DOCKER_UNIT}.d" for d in UNIT_DIRS])]
    files += [
        f for f in _drop_ins(root, [Path(d) / "service.d" for d in UNIT_DIRS]) if f.name not in {x.name for x in files}
    ]
    setting: tuple[str, str] | None = None
    for path in files:
        for key, value in _ini_assignments(path, "Service"):
            if key in ("TimeoutStopSec", "TimeoutSec"):
                setting = (value, f"{key}= in /{path.relative_to(root)}") if value else None
    if setting is None:
        default = (f"{SYSTEMD_DEFAULT_TIMEOUT_S}s", "systemd's default (DefaultTimeoutStopSec unset)")
        for path in [root / MANAGER_CONF, *_drop_ins(root, [Path(d) for d in MANAGER_CONF_DIRS])]:
            for key, value in _ini_assignments(path, "Manager"):
                if key == "DefaultTimeoutStopSec" and value:
                    default = (value, f"DefaultTimeoutStopSec= in /{path.relative_to(root)}")
        setting = default
    return timespan_seconds(setting[0]), setting[1]


def check_docker_stop(root: Path, grace: int, report: Report) -> None:
    found = docker_stop_timeout(root)
    if found is None:
        report.notes.append(f"no systemd unit {DOCKER_UNIT} under /etc or /lib/systemd: dockerd's stop not checked")
        return
    seconds, where = found
    report.facts["docker_stop_timeout_s"] = seconds
    needed = grace + DOCKERD_GRACE_S
    if seconds is not None and seconds < needed:
        report.findings.append(
            Finding(
                "docker_stop",
                f"systemd SIGKILLs dockerd {seconds:g} s into its stop ({where}); its containers' stop grace is up to "
                f"{grace} s, and dockerd waits it plus {DOCKERD_GRACE_S} s",
                f"TimeoutStopSec >= {needed} s for {DOCKER_UNIT}",
                f"a drop-in /etc/systemd/system/{DOCKER_UNIT}.d/rocm-stack-stop.conf with `[Service]` "
                f"`TimeoutStopSec={needed + 25}s`, then `systemctl daemon-reload` (docs/operations.md)",
            )
        )


def _dockerd_configs(root: Path) -> list[tuple[str, list[str]]]:
    """(pid, argv) of every dockerd process in root/proc (the host's PID namespace)."""
    found = []
    for proc in (root / "proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if argv and Path(argv[0]).name == "dockerd":
            found.append((proc.name, [a for a in argv if a]))
    return found


def live_restore(root: Path, argv: list[str]) -> tuple[bool, str]:
    """Whether dockerd runs with live-restore, and where that is set: its --live-restore flag, else
    `"live-restore"` in its --config-file (default /etc/docker/daemon.json, read under `root`)."""
    for arg in argv:
        if arg == "--live-restore" or arg.startswith("--live-restore="):
            return arg.partition("=")[2] in ("", "true", "1"), f"{arg} on its command line"
    config = f"/{DOCKER_DAEMON_JSON}"
    for index, arg in enumerate(argv):
        if arg == "--config-file" and index + 1 < len(argv):
            config = argv[index + 1]
        elif arg.startswith("--config-file="):
            config = arg.partition("=")[2]
    try:
        data = json.loads((root / config.lstrip("/")).read_text())
    except (OSError, ValueError):
        return False, config
    on = isinstance(data, dict) and data.get("live-restore") is True
    return on, f'"live-restore": true in {config}' if on else config


def check_live_restore(root: Path, report: Report) -> None:
    for pid, argv in _dockerd_configs(root):
        on, where = live_restore(root, argv)
        if on:
            report.facts["live_restore"] = True
            report.notes.append(
                f"dockerd (pid {pid}) runs with live-restore ({where}): stopping or restarting it leaves the "
                "containers running without any signal, and a reboot then stops them without their grace: before "
                "a daemon stop or a reboot, stop them with `docker stop -t <their grace>` (docs/operations.md)"
            )


def preflight(
    root: Path, host: str, expect_gpus: int, gpu_model: str, rocm: list[str], stop_grace: int | None = None
) -> Report:
    report = Report(host)
    check_numa_balancing(root, report)
    check_iommu(root, gpu_model, report)
    check_driver(root, rocm, report)
    check_gpu_count(root, expect_gpus, report)
    if stop_grace is not None:
        check_docker_stop(root, stop_grace, report)
    check_live_restore(root, report)
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
    p.add_argument(
        "--stop-grace",
        type=int,
        metavar="SECONDS",
        help="the longest stop grace of the host's containers: docker.service must give dockerd that + 5 s to stop",
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.expect_gpus < 1:
        p.error("--expect-gpus must be >= 1")
    if not (args.root / "proc").is_dir():
        p.error(f"{args.root}/proc is not a directory: mount the host's /proc and /sys under --root")
    data = preflight(args.root, args.host, args.expect_gpus, args.gpu_model, args.rocm, args.stop_grace).to_json()
    print(json.dumps(data) if args.json else text_report(data), flush=True)
    return 0 if data["verdict"] == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
