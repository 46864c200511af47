"""The rules on Docker hosts: GPU containers' devices and /dev/shm, isolation between a host's partitions, what a
prod container may reach of its host, debugging privileges, and how prod reaches a Docker daemon."""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .plan import (
    CONTAINER,
    DOCKER_PROVIDER,
    DRI,
    GPU_RESOURCE,
    MONITORING_LABEL,
    PARTITION_LABEL,
    _containers,
    _dig,
    _label,
    _mapping,
    _sequence,
    pod_specs,
)


# --- Docker GPU containers --------------------------------------------------------------------------------


def _devices(props: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(host path, container path) of each mapped device; Docker uses the host path when no container path is given."""
    devices = [_mapping(d) for d in _sequence(props.get("devices"))]
    return [(str(d.get("hostPath", "")), str(d.get("containerPath") or d.get("hostPath", ""))) for d in devices]


def _cdi_devices(props: Mapping[str, Any]) -> list[str]:
    return [
        str(i)
        for r in map(_mapping, _sequence(props.get("deviceRequests")))
        if r.get("driver") == "cdi"
        for i in _sequence(r.get("deviceIds"))
    ]


def partition_of(props: Mapping[str, Any]) -> str | None:
    """`host/container` of a GPU partition's container, from its label; None for any other container."""
    return _label(props, PARTITION_LABEL)


def is_gpu_container(props: Mapping[str, Any]) -> bool:
    """A partition, or a container that maps a GPU device node or CDI GPU (the metrics exporter too)."""
    return (
        partition_of(props) is not None
        or bool(_cdi_devices(props))
        or any(c == "/dev/kfd" or c == DRI or c.startswith(DRI + "/") for _, c in _devices(props))
    )


# The IPC modes a partition may have (moby v20.10.24). `private`: its own namespace and a /dev/shm of its shmSize
# that no other container can join (daemon/container_operations_unix.go L74 refuses `--ipc container:<it>` with
# "non-shareable IPC"; `shareable` would allow it). `host`: the host's /dev/shm, and shmSize is ignored (L117-121
# setupIpcDirs: ShmPath "/dev/shm"; daemon/oci_linux.go L552-559 sizes only a container's own /dev/shm mount).
IPC_MODES = ("private", "host")


def docker_gpu_container_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """ROCm in a container needs the KFD and a render node (or the toolkit's CDI GPU, which maps both), RCCL a
    /dev/shm (IPC_MODES), and supplementary groups are numeric host GIDs."""
    if resource_type != CONTAINER or not is_gpu_container(props):
        return []
    paths = [c for _, c in _devices(props)]
    problems = []
    if not _cdi_devices(props):
        if "/dev/kfd" not in paths:
            problems.append("GPU container without device /dev/kfd (ROCm's compute interface): add --device=/dev/kfd")
        if not any(p == DRI or p.startswith(DRI + "/renderD") for p in paths):
            problems.append(
                "GPU container without a render node: add its --device=/dev/dri/renderD<minor> nodes "
                "(or --device=/dev/dri on a single-tenant host)"
            )
    if partition_of(props) is not None and props.get("ipcMode") not in IPC_MODES:
        problems.append(
            f"GPU container with ipcMode {props.get('ipcMode')!r}: RCCL and DataLoader workers need a /dev/shm, "
            "the partition's own (ipcMode 'private', sized by shmSize) or, alone on its host, the host's ('host')"
        )
    for group in _sequence(props.get("groupAdds")):
        # moby resolves a group name in the image's /etc/group (daemon/oci_linux.go getUser); recent rocm/pytorch
        # images have no `render` group, and the container fails to start (ROCm/rocm-libraries PR #6563).
        if not str(group).isdigit():
            problems.append(
                f"--group-add '{group}' is a group name, looked up in the image's /etc/group rather "
                "than the host's: use the numeric host GID (`stat -c %g /dev/kfd /dev/dri/renderD*`)"
            )
    return problems


# --- GPU isolation between the partitions of a host -------------------------------------------------------


@dataclass(frozen=True)
class GpuReach:
    """What of a host's GPUs one container can open."""

    whole_dri: bool
    # Host render-node paths and CDI device names.
    nodes: frozenset[str]

    @classmethod
    def of(cls, host_paths: Sequence[str], container_paths: Sequence[str], cdi_devices: Sequence[str]) -> GpuReach:
        whole = any(c.rstrip("/") == DRI for c in container_paths)
        nodes = {h for h, c in zip(host_paths, container_paths) if c.startswith(DRI + "/")}
        return cls(whole, frozenset(nodes | set(cdi_devices)))


def isolation_problems(partitions: Mapping[str, GpuReach], prod: bool) -> list[str]:
    """One host's partitions (name -> reach). The config loader (schema/docker.py) and the policy pack both judge
    with this function. KFD checks the device cgroup for each GPU's render node (drivers/gpu/drm/amd/amdkfd/
    kfd_priv.h kfd_devcgroup_check_permission), so render nodes isolate; environment variables do not (ROCm "GPU
    isolation techniques": an application "can reset them")."""
    problems = []
    if prod and len(partitions) > 1:
        problems += [
            f"partition '{name}' maps the whole {DRI} (every GPU of the host) beside {len(partitions) - 1} "
            "other partition(s): prod isolates partitions by device; use gpuAccess renderNodes (or cdi)"
            for name, reach in sorted(partitions.items())
            if reach.whole_dri
        ]
    names = sorted(partitions)
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            shared = partitions[first].nodes & partitions[second].nodes
            if shared:
                problems.append(
                    f"partitions '{first}' and '{second}' share {sorted(shared)}: the render-node "
                    "sets of a host's partitions must be disjoint"
                )
    return problems


def ipc_problems(modes: Mapping[str, str | None], prod: bool) -> list[tuple[str, str]]:
    """One host's partitions (name -> IPC mode): (partition, problem) for each that shares the host's /dev/shm
    beside other partitions in prod, where one could read what another wrote there. The config loader
    (schema/docker.py) and the policy pack both judge with this function."""
    if not prod or len(modes) < 2:
        return []
    return [
        (
            name,
            f"partition '{name}' uses the host's IPC namespace (ipc: host) beside {len(modes) - 1} other "
            "partition(s): they would share the host's /dev/shm; prod gives each partition its own (ipc: private, "
            "sized by shmSize)",
        )
        for name, mode in sorted(modes.items())
        if mode == "host"
    ]


def host_isolation_problems(containers: Iterable[Mapping[str, Any]], prod: bool) -> list[str]:
    """`isolation_problems` and `ipc_problems` for the declared Docker containers, grouped by host through their
    partition label. A partition's GPU check carries its label too and has the partition's own access."""
    by_host: dict[str, dict[str, GpuReach]] = defaultdict(dict)
    ipc: dict[str, dict[str, str | None]] = defaultdict(dict)
    for props in containers:
        partition = partition_of(props)
        if partition is None:
            continue
        host, _, name = partition.partition("/")
        devices = _devices(props)
        by_host[host][name] = GpuReach.of([h for h, _ in devices], [c for _, c in devices], _cdi_devices(props))
        ipc[host][name] = props.get("ipcMode")
    return [
        f"host '{host}': {message}"
        for host, partitions in sorted(by_host.items())
        for message in [*isolation_problems(partitions, prod), *(m for _, m in ipc_problems(ipc[host], prod))]
    ]


# --- what a prod container may reach of its host ---------------------------------------------------------
# Each rule below judges one value: the config loader (schema/docker.py, schema/workload_checks.py) calls it on what the
# stack config asks for, the policy pack on what the program declares.

# The Docker daemon's socket: whoever reaches it starts a privileged container with the host's / mounted, i.e. is
# root on the host (Docker docs, "Docker daemon attack surface": "only trusted users should be allowed to control
# your Docker daemon"; https://docs.docker.com/engine/security/#docker-daemon-attack-surface). A read-only bind
# does not help: connect() only asks MAY_WRITE permission on the socket's inode (linux net/unix/af_unix.c
# unix_find_bsd, path_permission), a mount's read-only flag is checked where files are written (mnt_want_write),
# and even a read-only filesystem refuses MAY_WRITE to files, directories and symlinks only (fs/namei.c sb_permission).
DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/docker.sock")
# Host paths whose contents are the host's configuration, credentials, kernel interfaces, devices or the container
# runtime's own state: a container that mounts one (or a directory above one) can take the host over.
SYSTEM_PATHS = (
    *DOCKER_SOCKETS,
    "/etc",
    "/root",
    "/boot",
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/proc",
    "/sys",
    "/dev",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/containerd",
)
# Read-only, these only let a container read the host's state: the host preflight does (components/docker/checks.py
# mounts /proc and /sys at /host to read the amdgpu driver's settings, and systemd's unit files and configuration,
# world-readable on the host, to read docker.service's stop timeout). Not /etc/docker: it can hold dockerd's TLS keys.
READ_ONLY_SYSTEM_PATHS = ("/proc", "/sys", "/etc/systemd", "/lib/systemd", "/usr/lib/systemd")
KFD = "/dev/kfd"
_RENDER_NODE = re.compile(r"/dev/dri/renderD[0-9]+")
SSH_PORT = 22


def _host_path(path: str) -> str:
    """A host path as the kernel resolves it, symlinks aside: `//etc/./x/..` is /etc."""
    return "/" + posixpath.normpath("/" + path).lstrip("/") if path else ""


def _within(path: str, root: str) -> bool:
    return root == "/" or path == root or path.startswith(root + "/")


def host_mount_problem(host_path: str, read_only: bool) -> str | None:
    """Why prod refuses a bind mount of `host_path` (None: allowed): the Docker socket or a system path, the path
    itself, anything under it or a directory above it (`/`, `/var`)."""
    path = _host_path(host_path)
    if any(_within(path, s) or _within(s, path) for s in DOCKER_SOCKETS):
        return (
            f"host path '{host_path}' is or holds the Docker socket: the container would control the Docker daemon, "
            "which is root on the host (read-only does not help: a socket ignores it); prod never mounts it"
        )
    system = next((s for s in SYSTEM_PATHS if _within(path, s) or _within(s, path)), None)
    if system is None or (read_only and any(_within(path, s) for s in READ_ONLY_SYSTEM_PATHS)):
        return None
    where = "is" if path == system else ("is under" if _within(path, system) else "holds")
    return (
        f"host path '{host_path}' {where} the host's system path {system}: the container could take the host over; "
        "prod mounts only data directories of its own (e.g. under /srv or /var/lib/rocm-stack)"
    )


def device_problem(host_path: str, container_path: str | None = None) -> str | None:
    """Why prod refuses a `--device` mapping (None: a GPU node at its own path): only /dev/kfd, a render node
    /dev/dri/renderD<N> or the whole /dev/dri. Docker maps every device node under a directory (moby v20.10.24
    oci/devices_linux.go DevicesFromPath L55-74 walks it), so `--device=/dev:/dev/dri` hands over the host's disks."""
    host, inside = _host_path(host_path), _host_path(container_path or host_path)
    if host in (KFD, DRI) or _RENDER_NODE.fullmatch(host):
        if inside == host:
            return None
        return f"device '{host_path}' is mapped at '{container_path}': prod maps a GPU device node at its own path"
    return (
        f"device '{host_path}' is not a GPU device node: prod maps only {KFD} and {DRI}/renderD<N> (or {DRI}); "
        "device stand-ins (devicePaths) are for the end-to-end tests"
    )


def published_port_problem(internal: int | None, external: int | None) -> str | None:
    """Why prod refuses a published port (None: allowed): SSH into a partition is a shell beside its GPUs that
    bypasses the deploy (and host port 22 is the host's own sshd, through which `pulumi up` reaches it)."""
    if SSH_PORT in (internal, external):
        return (
            f"publishes SSH (port {SSH_PORT}): prod gives no shell into a container from the network; reach a "
            "partition with `docker exec` over the host's own SSH"
        )
    return None


def docker_endpoint_machine(endpoint: str) -> str:
    """The machine a Docker endpoint reaches: its host name for ssh:// and tcp:// (any user, port or transport:
    one machine has one set of GPUs, also under two daemons), `local` for unix:// sockets and localhost."""
    parts = urlsplit(endpoint)
    if parts.scheme == "unix":
        return "local"
    name = (parts.hostname or "").lower().rstrip(".")
    return "local" if name in ("localhost", "127.0.0.1", "::1") else name


def duplicate_endpoint_problems(endpoints: Mapping[str, str]) -> list[tuple[str, str]]:
    """(host, problem) for each host entry (name -> Docker endpoint) that reaches a machine an earlier entry
    reaches too: each entry would partition the same GPUs on its own, so none of the isolation rules holds."""
    first: dict[str, str] = {}
    problems = []
    for name, endpoint in endpoints.items():
        machine = docker_endpoint_machine(endpoint)
        if machine in first:
            problems.append(
                (
                    name,
                    f"host '{name}' ({endpoint}) is the machine of host '{first[machine]}' ({endpoints[first[machine]]}):"
                    " two host entries would each hand out the same GPUs; declare each machine once",
                )
            )
        else:
            first[machine] = name
    return problems


def _volumes(props: Mapping[str, Any]) -> list[tuple[str, str, bool]]:
    return [
        (str(v.get("hostPath")), str(v.get("containerPath")), v.get("readOnly") is True)
        for v in map(_mapping, _sequence(props.get("volumes")))
        if v.get("hostPath")
    ]


CADVISOR = "cadvisor"
# What the stack's cAdvisor mounts (host path -> container path, read-only), the one exception to the rules above.
# cAdvisor's documented `docker run` (google/cadvisor v0.55.1 docs/running.md L9-17) mounts /, /var/run, /sys and
# /var/lib/docker; of those its Docker handler reads (v0.55.1 source, the pinned image's):
# - the cgroup files of each container under /sys (container/common: cgroup paths); /sys read-only is allowed anyway;
# - the Docker API (container names, images, labels: container/docker/handler.go ContainerInspect L188), through the
#   socket: root-equivalent on the host whatever the mount says (DOCKER_SOCKETS above), hence the exception;
# - `<docker root>/image/<driver>/layerdb/mounts/<id>/mount-id` (handler.go L114, getRwLayerID): without it no
#   container is watched at all. Only /var/lib/docker/image (layer metadata) is mounted, not the containers' own
#   files under /var/lib/docker/overlay2 and /var/lib/docker/containers (their uploads, configs, environments):
#   the disk-usage metrics that would read them are off (`--enable_metrics` without `disk`, handler.go L248).
# Without /rootfs/proc cAdvisor takes itself for running in the host's namespaces (manager/manager.go L188), so
# the paths are mounted where the host has them.
# A daemon on the containerd image store (Docker 29's default `overlayfs` driver) is read through containerd's socket
# instead of layerdb (handler.go L161-171, factory.go L357): not mounted, so such hosts are not watched yet.
CADVISOR_MOUNTS = {
    "/sys": "/sys",
    "/var/run/docker.sock": "/var/run/docker.sock",
    "/var/lib/docker/image": "/var/lib/docker/image",
}


def _is_stack_cadvisor(props: Mapping[str, Any]) -> bool:
    """The stack's own cAdvisor: labelled so, no partition, no device, not privileged."""
    return (
        _label(props, MONITORING_LABEL) == CADVISOR
        and partition_of(props) is None
        and not _devices(props)
        and props.get("privileged") is not True
    )


def host_access_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A Docker container's host mounts, devices and published ports, and how a Docker provider reaches its
    daemon, in prod."""
    if resource_type == DOCKER_PROVIDER:
        return docker_provider_problems(resource_type, props)
    if resource_type != CONTAINER:
        return []
    exempt = CADVISOR_MOUNTS if _is_stack_cadvisor(props) else {}
    problems = [
        p
        for path, inside, ro in _volumes(props)
        if not (ro and exempt.get(path) == inside) and (p := host_mount_problem(path, ro))
    ]
    problems += [p for host, inside in _devices(props) if (p := device_problem(host, inside))]
    ports = map(_mapping, _sequence(props.get("ports")))
    problems += [p for port in ports if (p := published_port_problem(port.get("internal"), port.get("external")))]
    return problems


def docker_providers(resources: Iterable[tuple[str, str, Mapping[str, Any]]]) -> dict[str, str]:
    """Host name -> endpoint of each Docker provider among (type, name, props) of the declared resources."""
    return {
        name: str(props.get("host"))
        for type_, name, props in resources
        if type_ == DOCKER_PROVIDER and props.get("host")
    }


# --- debugging privileges (prod) --------------------------------------------------------------------------


def _is_ptrace_or_all(capability: Any) -> bool:
    return str(capability).upper().removeprefix("CAP_") in ("SYS_PTRACE", "ALL")


def _gpu_limited(container: Mapping[str, Any]) -> bool:
    resources = _mapping(container.get("resources"))
    return any(GPU_RESOURCE in _mapping(resources.get(k)) for k in ("limits", "requests"))


def docker_debug_privileges(capabilities: Iterable[Any], security_opts: Iterable[Any], privileged: Any) -> list[str]:
    """A Docker container's debugging privileges (`--cap-add`, `--security-opt`, `--privileged`): what the config
    loader judges of `security.profile` and the pack of every declared container."""
    problems = []
    if any(_is_ptrace_or_all(c) for c in capabilities):
        problems.append("adds capability SYS_PTRACE (or ALL): a debugging aid, not for prod")
    if privileged is True:
        problems.append("runs privileged: every device and capability of the host; prod never does")
    for option in security_opts:
        if str(option).lower().replace(":", "=", 1).replace(" ", "") == "seccomp=unconfined":
            problems.append("security option seccomp=unconfined: keep Docker's default seccomp profile in prod")
    return problems


def debug_privilege_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """SYS_PTRACE, privileged mode and an unconfined seccomp profile: debugging aids that prod never runs.

    Docker: every container. Kubernetes: the GPU workloads (containers asking for amd.com/gpu); the device
    plugin and node labeller DaemonSets are privileged by upstream design and ask for no GPU.
    """
    problems = []
    if resource_type == CONTAINER:
        problems += docker_debug_privileges(
            _sequence(_mapping(props.get("capabilities")).get("adds")),
            _sequence(props.get("securityOpts")),
            props.get("privileged"),
        )
    for pod, spec in pod_specs(resource_type, props):
        pod_seccomp = _dig(spec, ("securityContext", "seccompProfile", "type"))
        for container in filter(_gpu_limited, _containers(spec)):
            where = f"{pod}GPU container '{container.get('name')}'"
            context = _mapping(container.get("securityContext"))
            if any(_is_ptrace_or_all(c) for c in _sequence(_mapping(context.get("capabilities")).get("add"))):
                problems.append(f"{where} adds capability SYS_PTRACE (or ALL): not for prod")
            if context.get("privileged") is True:
                problems.append(f"{where} runs privileged: not for prod")
            if (_dig(context, ("seccompProfile", "type")) or pod_seccomp) == "Unconfined":
                problems.append(f"{where} runs with seccompProfile Unconfined: use RuntimeDefault in prod")
    return problems


# --- Docker endpoints (prod) -------------------------------------------------------------------------------


def docker_endpoint_problems(endpoint: str) -> list[str]:
    """How prod reaches a Docker daemon: over ssh:// with key authentication, or a local unix:// socket. A tcp://
    endpoint is the daemon's API on the network, which without TLS gives root on the host to whoever reaches the
    port ("Protect the Docker daemon socket": https://docs.docker.com/engine/security/protect-access/); the stack
    has no TLS keys, so prod refuses it."""
    parts = urlsplit(endpoint)
    problems = []
    if parts.scheme == "tcp":
        problems.append(
            f"'{endpoint}' reaches the Docker API over plain TCP: whoever reaches the port is root on the host; prod "
            "uses ssh://user@host (the daemon stays on its socket)"
        )
    if parts.password is not None:
        problems.append(
            "holds a password in the URL: it stays in the stack file, the state and the provider's config; use SSH key "
            "authentication (an ssh-agent or ~/.ssh/config) and ssh://user@host"
        )
    return problems


def ssh_options_problem(ssh_opts: Sequence[str]) -> str | None:
    """ssh_config(5): keywords are case-insensitive, given as `-o Key=value` or `Key value`; StrictHostKeyChecking
    `no` or `off` accepts any host key."""
    if re.search(r"stricthostkeychecking\s*[= ]\s*(no|off)\b", " ".join(ssh_opts), re.IGNORECASE):
        return (
            "StrictHostKeyChecking=no accepts any host key, so whoever answers for the host gets the deploy's Docker "
            "commands; add the host's key to known_hosts (`ssh-keyscan`, checked against the host) instead"
        )
    return None


def docker_provider_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """`docker_endpoint_problems` and `ssh_options_problem` of a declared Docker provider."""
    if resource_type != DOCKER_PROVIDER:
        return []
    problems = docker_endpoint_problems(str(props.get("host") or ""))
    ssh_opts = props.get("sshOpts")
    if isinstance(ssh_opts, str):  # a provider's inputs other than text reach the engine JSON-encoded
        try:
            ssh_opts = json.loads(ssh_opts)
        except ValueError:
            ssh_opts = [ssh_opts]
    if problem := ssh_options_problem([str(o) for o in _sequence(ssh_opts)]):
        problems.append(problem)
    return problems
