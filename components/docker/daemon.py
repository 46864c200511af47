"""Daemon settings (daemon.json, or dockerd's flags) that change what the Docker provider reads back, and the host
preflight's judgement of them.

terraform-provider-docker v4.5.0 ("TFD") stores what ContainerInspect reports (components/docker/readback.py), and
the next `pulumi up` diffs the declaration against it. A daemon that gives a container more than it was given makes
that diff permanent: `log_opts` is ForceNew (every container replaced on every `up`), `memory_swap` and `memory` an
update that never sticks. The host's preflight is created by the same daemon with the same log options and a memory limit without swap (as the monitoring exporters and partitions with a `memory`
have), before anything else of the host: `read_back_findings`
compares what the daemon gave it back with what it was given, and the stack stops there, naming the keys and the fix.

Every setting below was run on a private dockerd 20.10.24 with all of them in its daemon.json
(tests/e2e/test_e2e_daemon.py); the moby sources are cited at v20.10.24 and v28.5.2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The preflight's memory limit: the one-shot program reads files.
PROBE_MEMORY_MIB = 256


@dataclass(frozen=True)
class DaemonSetting:
    setting: str
    """The daemon.json key (the dockerd flag of the same name)."""
    effect: str
    """What dockerd does with it to a container the provider creates, and whether the provider reads it back."""
    changes_read_back: str | None
    """The input whose read-back it changes for this stack's containers; None: none."""
    fix: str = ""


DAEMON_SETTINGS: tuple[DaemonSetting, ...] = (
    DaemonSetting(
        "log-opts",
        "merged into the options of every container whose log driver is the daemon's (json-file, the stack's, by "
        "default), the cache-* options into every container's (moby daemon/logs.go mergeAndVerifyLogConfig, "
        "v20.10.24 L177-197, v28.5.2 L190-210; logcache.MergeDefaultLogConfig); TFD reads the map back where declared "
        "(resource_docker_container_funcs.go L952, L983-989) and `log_opts` is ForceNew (resource_docker_container.go L894)",
        "logOpts",
        "remove the keys from `log-opts` in /etc/docker/daemon.json (or from dockerd's --log-opt flags) and restart "
        "dockerd; the stack sets the rotation itself (hosts[].logs)",
    ),
    DaemonSetting(
        "swap accounting (kernel: cgroup v1 without swapaccount=1, cgroup v2 without memory.swap.max)",
        "a container with a memory limit gets MemorySwap = -1 (moby daemon/daemon_unix.go "
        "verifyPlatformContainerResources, v20.10.24 L439-442, v28.5.2 L427-430: `!sysInfo.SwapLimit`); TFD reads "
        "-1 back (funcs.go L940-944) and every `up` updates `memory_swap` again",
        "memorySwap",
        "enable swap accounting: boot with `swapaccount=1` (cgroup v1) or a cgroup v2 kernel with "
        "CONFIG_MEMCG_SWAP (`docker info` then shows no 'No swap limit support' warning)",
    ),
    DaemonSetting(
        "memory cgroup (kernel)",
        "without it a memory limit is dropped: Memory = 0, MemorySwap = -1 (same function, v20.10.24 L434-438, "
        "v28.5.2 L423-426); TFD reads both back (funcs.go L932, L940-944)",
        "memory",
        "mount the memory cgroup (boot without cgroup_disable=memory)",
    ),
    DaemonSetting(
        "default-ulimits",
        "merged into HostConfig.Ulimits by inspect (moby daemon/inspect.go L138 @ v20.10.24, L111 @ v28.5.2); TFD "
        "reads `ulimit` back only where declared (funcs.go L887-891), and the stack declares none",
        None,
    ),
    DaemonSetting(
        "default-shm-size",
        "applied only to a container that sends no ShmSize (daemon_unix.go adaptContainerSettings); the stack "
        "declares `shm_size` on every partition and `shm_size` is Computed in TFD's schema (L863)",
        None,
    ),
    DaemonSetting(
        "default-ipc-mode",
        "applied only to a container that sends no IpcMode (adaptContainerSettings); `ipc_mode` is Computed (L1111)",
        None,
    ),
    DaemonSetting(
        "default-runtime",
        "stored in HostConfig.Runtime of a container that names none; `runtime` is Computed (L300) and the stack "
        "names none",
        None,
    ),
    DaemonSetting(
        "log-driver",
        "the driver of a container that names none; the stack names json-file everywhere (components/docker/logs.py), "
        "and another daemon driver merges no log-opts into it (only cache-* ones)",
        None,
    ),
    DaemonSetting(
        "cgroup-parent, default-cgroupns-mode",
        "HostConfig.CgroupParent stays as sent (the parent is applied to the runtime spec), CgroupnsMode is set; TFD "
        "reads neither back (no d.Set of cgroup_parent or cgroupns_mode in funcs.go)",
        None,
    ),
    DaemonSetting(
        "dns, no-new-privileges, init",
        "applied to the runtime spec or resolv.conf, HostConfig.Dns, SecurityOpt and Init stay as sent; `init` is "
        "Computed (L1126)",
        None,
    ),
    DaemonSetting(
        "userns-remap",
        "HostConfig.UsernsMode stays as sent (the remap is the daemon's default, not written into the container; "
        "moby daemon/create.go); TFD reads it back as sent (funcs.go L958)",
        None,
    ),
)

_FIX = {s.changes_read_back: s.fix for s in DAEMON_SETTINGS if s.changes_read_back}


def read_back_findings(declared: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """What the daemon changed of the preflight's inputs (camelCase: logOpts, memory, memorySwap), as read back by
    the provider, in words with the fix; empty for a daemon that gives back what it is given."""
    findings = []
    declared_opts, stored_opts = declared.get("logOpts") or {}, stored.get("logOpts") or {}
    added = sorted(set(stored_opts) - set(declared_opts))
    changed = sorted(k for k in declared_opts if k in stored_opts and stored_opts[k] != declared_opts[k])
    if added or changed:
        seen = ", ".join(f"{k}={stored_opts[k]}" for k in [*added, *changed])
        findings.append(
            f"the daemon adds log options to every container ({seen}): `log_opts` is ForceNew, so every `pulumi up` "
            f"would replace every container of the host; fix: {_FIX['logOpts']}"
        )
    if declared.get("memory") and stored.get("memory") != declared["memory"]:
        findings.append(
            f"the daemon dropped the memory limit (declared {declared['memory']} MiB, read back "
            f"{stored.get('memory')}): no memory cgroup; fix: {_FIX['memory']}"
        )
    elif declared.get("memorySwap") and stored.get("memorySwap") != declared["memorySwap"]:
        findings.append(
            f"the daemon has no swap accounting (memory_swap declared {declared['memorySwap']} MiB, read back "
            f"{stored.get('memorySwap')}): every `pulumi up` would update memory_swap again; fix: {_FIX['memorySwap']}"
        )
    return findings
