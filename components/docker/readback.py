"""What the Docker provider stores for each `docker.Container` input after it reads the container back: one table.

pulumi_docker 5.2.0 is terraform-provider-docker v4.5.0 ("TFD"). Its create ends with a Read, so the state holds
what Docker reports, not what was declared, and the next `pulumi preview` diffs the declaration against it (no
diff suppression on these attributes). A declaration in any other form is a diff after every `pulumi up` (and
`rocm-stack drift` reports it): ForceNew attributes replace the container every time; the others are an update
that changes nothing (the health check: not ForceNew, and Update only applies restart, max_retry_count,
cpu_shares, memory*, cpu_set and blkio, resource_docker_container_funcs.go L1016-1019). So every input is
declared in its stored form, and `stored()` of its entry says what that form is.

Citations: `funcs.go` is internal/provider/resource_docker_container_funcs.go, `schema.go` its
resource_docker_container.go and `structures.go` its resource_docker_container_structures.go, all at tag v4.5.0.
Each value is compared by its attribute's kind in TFD's schema (components/docker/provider_schema.py): a Set
(schema.TypeSet) without order, a List (TypeList) in order, a map by key.
Not a TFD input at all: pids_limit (no such attribute in schema.go v4.5.0).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from .provider_schema import CONTAINER, as_diffed, canonical, defaults

_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}
_PART = re.compile(r"(\d*)(?:\.(\d*))?(ns|us|µs|μs|ms|s|m|h)")


def parse_go_duration(text: str) -> int:
    """Nanoseconds of a Go duration string (time.ParseDuration): "1800s", "1h30m", "1.5s", "0"."""
    if text in ("0", "+0", "-0"):
        return 0
    sign, rest = (-1, text[1:]) if text.startswith("-") else (1, text.removeprefix("+"))
    total, position = 0, 0
    while position < len(rest):
        part = _PART.match(rest, position)
        if part is None or not (part[1] or part[2]):
            raise ValueError(f"invalid Go duration {text!r}")
        whole, fraction, unit = part[1] or "0", part[2] or "", part[3]
        total += int(whole) * _NS[unit] + (int(fraction) * _NS[unit] // 10 ** len(fraction) if fraction else 0)
        position = part.end()
    if not rest:
        raise ValueError(f"invalid Go duration {text!r}")
    return sign * total


def _fraction(value: int, digits: int) -> str:
    """`value` / 10**digits without trailing zeros, as Go's fmtFrac writes it."""
    whole, frac = divmod(value, 10**digits)
    text = str(frac).rjust(digits, "0").rstrip("0")
    return f"{whole}.{text}" if text else str(whole)


def go_duration(nanoseconds: int) -> str:
    """Go's time.Duration.String(): "30m0s", "1h0m0s", "1m30s", "10s", "1.5s", "300ms", "0s"."""
    if nanoseconds < 0:
        return "-" + go_duration(-nanoseconds)
    if nanoseconds == 0:
        return "0s"
    if nanoseconds < 10**9:  # below one second: the largest unit that keeps a non-zero leading digit
        for unit, digits in (("ms", 6), ("µs", 3), ("ns", 0)):
            if nanoseconds >= 10**digits:
                return _fraction(nanoseconds, digits) + unit
    hours, rest = divmod(nanoseconds, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _fraction(rest, 9) + "s"
    if hours:
        return f"{hours}h{minutes}m{seconds}"
    return f"{minutes}m{seconds}" if minutes else seconds


def seconds(value: int) -> str:
    """A duration input of a whole number of seconds, as the provider stores it."""
    return go_duration(value * 10**9)


def _stored_duration(declared: str) -> str:
    # Create parses it (time.ParseDuration, errors dropped: funcs.go L145-156); Read stores Duration.String().
    return go_duration(parse_go_duration(declared))


Inputs = dict[str, Any]


def _same(value: Any, inputs: Inputs) -> Any:
    return value


def _as_declared(value: Any) -> Any:
    return value


def _security_opts(declared: list[str], inputs: Inputs) -> list[str]:
    # dockerd adds "label=disable" (SELinux labels off) to a container with host IPC or PID or privileged unless a
    # label= option is given (moby v20.10.24 daemon/create.go L255-269 generateSecurityOpt, appended by
    # daemon_unix.go L383-387; the same in v28.5.2 daemon/create.go L283-297). Measured on dockerd 20.10.
    labelled = any(o.split("=")[0] == "label" for o in declared)
    shared = inputs.get("ipcMode") == "host" or inputs.get("pidMode") == "host" or inputs.get("privileged")
    return declared if labelled or not shared else [*declared, "label=disable"]


# The provider's schema defaults (provider_schema.defaults): what its diff compares for an input the program leaves out.
def _port_config(declared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**defaults(CONTAINER, "ports"), **p} for p in declared]


def _ports(declared: list[dict[str, Any]], inputs: Inputs) -> list[dict[str, Any]]:
    # flattenContainerPorts (structures.go L35-59): ordered by internal port, ip (HostIP as sent) and protocol set;
    # the external port is Computed (one Docker picks is no diff).
    return sorted(_port_config(declared), key=lambda p: int(p["internal"]))


def _device_config(declared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**defaults(CONTAINER, "devices"), **d} for d in declared]


def _devices(declared: list[dict[str, Any]], inputs: Inputs) -> list[dict[str, Any]]:
    # flattenDevices (structures.go L467-497): host_path and permissions, container_path only where declared.
    return [
        {"hostPath": d["hostPath"], "permissions": d["permissions"]}
        | ({"containerPath": d["containerPath"]} if d.get("containerPath") else {})
        for d in _device_config(declared)
    ]


def _health_config(declared: dict[str, Any]) -> dict[str, Any]:
    return {**defaults(CONTAINER, "healthcheck"), **declared}


def _healthcheck(declared: dict[str, Any], inputs: Inputs) -> dict[str, Any]:
    # funcs.go L960-970: test and retries as stored, every duration as Duration.String().
    config = _health_config(declared)
    return {**config, **{k: _stored_duration(config[k]) for k in defaults(CONTAINER, "healthcheck") if k != "retries"}}


def _capabilities(declared: dict[str, Any], inputs: Inputs) -> dict[str, Any]:
    # funcs.go L870-878: set only when CapAdd or CapDrop is non-empty, as Docker keeps them (moby v20.10.24 and
    # v28.5.2 daemon/container.go only validate them with NormalizeLegacyCapabilities, the result discarded).
    return {k: v for k, v in declared.items() if v}


def _device_request_config(declared: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**defaults(CONTAINER, "deviceRequests"), **r} for r in declared]


def _device_requests(declared: list[dict[str, Any]], inputs: Inputs) -> list[dict[str, Any]]:
    # funcs.go L926-930 (only when declared) and flattenDeviceRequests (structures.go L500-524): driver and count
    # always, device_ids, capabilities and options when non-empty.
    return [
        {k: r[k] for k in ("driver", "count")} | {k: r[k] for k in ("deviceIds", "capabilities", "options") if r.get(k)}
        for r in _device_request_config(declared)
    ]


@dataclass(frozen=True)
class ReadBack:
    read: str
    """Where TFD's Read sets the attribute, or why it never does."""
    stored: Callable[[Any, Inputs], Any] = _same
    """The value Read stores for a declared value, given the container's other inputs (identity: Docker gives back
    what it was given)."""
    config: Callable[[Any], Any] = _as_declared
    """The declared value as the provider's diff sees it: with its schema's defaults for what is left out."""
    key: str = ""
    """The input (set from CONTAINER_READ_BACK's key)."""

    def differs(self, declared: Any, stored: Any) -> bool:
        """Whether the provider's diff sees a change between a declared value and a stored one: compared by the
        attribute's kind in TFD's schema (a set without order; provider_schema.as_diffed and canonical)."""
        state, config = as_diffed(CONTAINER, {self.key: stored}, {self.key: declared})
        return bool(canonical(CONTAINER, config[self.key], self.key) != canonical(CONTAINER, state[self.key], self.key))

    def drifts(self, declared: Any, inputs: Inputs) -> bool:
        """Whether the next preview would diff this declared value against what Read stored for it."""
        return self.differs(self.config(declared), self.stored(declared, inputs))


NOT_READ = "never read back: the state keeps the declared value"

# Every input a docker.Container of this program may have (camelCase, as the provider receives it).
_READ_BACK: dict[str, ReadBack] = {
    "name": ReadBack('funcs.go L828: d.Set("name", strings.TrimLeft(container.Name, "/"))'),
    "image": ReadBack('funcs.go L838-845: an image ID ("sha256:...") is stored as container.Image, the ID itself'),
    "command": ReadBack('funcs.go L849: d.Set("command", container.Config.Cmd)'),
    "entrypoints": ReadBack('funcs.go L850: d.Set("entrypoint", container.Config.Entrypoint): the list as sent'),
    "networksAdvanced": ReadBack(
        "funcs.go L786-795: set from Docker only while the state holds none (import), so the declared set stays",
    ),
    "hostname": ReadBack('funcs.go L847: d.Set("hostname", container.Config.Hostname)'),
    "user": ReadBack('funcs.go L851: d.Set("user", container.Config.User), which dockerd stores as sent'),
    "networkMode": ReadBack(
        'funcs.go L954: d.Set("network_mode", HostConfig.NetworkMode): "host" as sent; dockerd stores '
        '"container:<name>" as "container:<full id>" (measured on dockerd 20.10), so it is declared with the id'
    ),
    "init": ReadBack('funcs.go L864-868: d.Set("init", *HostConfig.Init), false when the daemon stores none'),
    "readOnly": ReadBack('funcs.go L830: d.Set("read_only", HostConfig.ReadonlyRootfs)'),
    "envs": ReadBack(f"funcs.go L893-898 (issues #242, #269): {NOT_READ}; env is a Set (schema.go L590)"),
    "labels": ReadBack(f"funcs.go L893-898: {NOT_READ}; labels is a Set (schema.go L833)"),
    "volumes": ReadBack(f'funcs.go L882 ("// volumes"): {NOT_READ}; a Set (schema.go L434)'),
    "uploads": ReadBack(f'funcs.go L959 ("upload" can\'t be imported): {NOT_READ}; a Set (schema.go L987)'),
    "start": ReadBack(f'funcs.go L831 ("start" can\'t be imported): {NOT_READ}'),
    "attach": ReadBack(f"funcs.go L832: {NOT_READ}"),
    "logs": ReadBack(f"funcs.go L833: {NOT_READ}"),
    "wait": ReadBack(f'funcs.go: no d.Set("wait"): {NOT_READ}'),
    "waitTimeout": ReadBack(f'funcs.go: no d.Set("wait_timeout"): {NOT_READ}'),
    "mustRun": ReadBack(
        "funcs.go L816-824: set to false only when the container is not running (meant: a stopped container is "
        "started again); an attached one-shot check declares false"
    ),
    "destroyGraceSeconds": ReadBack(f'funcs.go L931 ("destroy_grace_seconds" can\'t be imported): {NOT_READ}'),
    "devices": ReadBack(
        "funcs.go L901-905 (only when declared), structures.go L467-497 flattenDevices; a Set (schema.go L663)",
        _devices,
        _device_config,
    ),
    "deviceRequests": ReadBack(
        "funcs.go L926-930 (only when declared), structures.go L500-524; a Set (schema.go L774)",
        _device_requests,
        _device_request_config,
    ),
    "groupAdds": ReadBack('funcs.go L974: d.Set("group_add", HostConfig.GroupAdd); a Set (schema.go L1118)'),
    "securityOpts": ReadBack(
        'funcs.go L854: d.Set("security_opts", HostConfig.SecurityOpt), with what dockerd adds; ForceNew, a Set',
        _security_opts,
    ),
    "capabilities": ReadBack(
        "funcs.go L870-878 (when CapAdd or CapDrop is non-empty); a Set of one, add/drop Sets (schema.go L262)",
        stored=_capabilities,
    ),
    "ipcMode": ReadBack('funcs.go L973: d.Set("ipc_mode", HostConfig.IpcMode) (host, private, shareable as sent)'),
    "pidMode": ReadBack(
        'funcs.go L955-956: d.Set("pid_mode", HostConfig.PidMode) when set: dockerd stores `container:<ID>` '
        "(a name comes back as the ID), so the stack sends the ID (tests/e2e/test_e2e_monitoring_host.py)"
    ),
    "shmSize": ReadBack('funcs.go L945: d.Set("shm_size", HostConfig.ShmSize/1024/1024): whole MiB, as sent'),
    "memory": ReadBack('funcs.go L932: d.Set("memory", HostConfig.Memory/1024/1024): whole MiB, as sent'),
    "memorySwap": ReadBack(
        "funcs.go L940-944: HostConfig.MemorySwap/1024/1024 when positive (whole MiB, as sent), else as is; dockerd "
        "stores twice `memory` when it is left out (moby v20.10.24 daemon/daemon_unix.go L343-346)"
    ),
    "logDriver": ReadBack('funcs.go L951: d.Set("log_driver", HostConfig.LogConfig.Type): the driver as sent'),
    "cpuSet": ReadBack('funcs.go L950: d.Set("cpu_set", HostConfig.CpusetCpus): the string as sent'),
    "restart": ReadBack('funcs.go L857: d.Set("restart", HostConfig.RestartPolicy.Name)'),
    "maxRetryCount": ReadBack('funcs.go L858: d.Set("max_retry_count", RestartPolicy.MaximumRetryCount)'),
    "stopSignal": ReadBack('funcs.go L977: d.Set("stop_signal", Config.StopSignal): the name as sent ("SIGTERM")'),
    "stopTimeout": ReadBack('funcs.go L978: d.Set("stop_timeout", Config.StopTimeout)'),
    "logOpts": ReadBack(
        "funcs.go L952 and L983-989 (only when declared): HostConfig.LogConfig.Config, to which dockerd adds its "
        "daemon.json `log-opts` keys the container lacks when its driver is the daemon's (moby v28.5.2 "
        "daemon/logs.go L189-209 mergeAndVerifyLogConfig, daemon/create.go L204): declare every key the "
        "daemon sets, or the ForceNew map replaces the container on every deploy",
    ),
    "ports": ReadBack(
        "funcs.go L797-805 (when declared and running or must_run), structures.go L35-59 flattenContainerPorts: "
        "a List ordered by internal port, ip and protocol always set (schema.go L487); the diff ignores its order "
        "(DiffSuppressFunc, schema.go L534)",
        _ports,
        _port_config,
    ),
    "healthcheck": ReadBack(
        "funcs.go L960-970: interval, timeout, start_period, start_interval as time.Duration.String() "
        '("1800s" is stored "30m0s"); not ForceNew and not applied by Update (schema.go L1045, funcs.go L1016-1019)',
        stored=_healthcheck,
        config=_health_config,
    ),
}


CONTAINER_READ_BACK = {key: replace(entry, key=key) for key, entry in _READ_BACK.items()}


def as_stored(key: str, declared: Any, **inputs: Any) -> Any:
    """`declared` in the form the provider stores for input `key`, given the container's other inputs (camelCase)."""
    return CONTAINER_READ_BACK[key].stored(declared, inputs)


def drifting_inputs(inputs: dict[str, Any]) -> dict[str, str]:
    """Input -> why the next preview would show a diff for it (no table entry, or not in its stored form)."""
    found = {}
    for key, declared in sorted(inputs.items()):
        entry = CONTAINER_READ_BACK.get(key)
        if entry is None:
            found[key] = "no entry in components/docker/readback.py: say how the provider reads it back"
        elif entry.drifts(declared, inputs):
            found[key] = f"declared {declared!r}, stored {entry.stored(declared, inputs)!r} ({entry.read})"
    return found
