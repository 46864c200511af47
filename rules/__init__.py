"""The project's rules (the guard rails): plain functions over what the engine hands a policy and what the stack
config says, run by the policy pack (policy/rocm_policy/pack.py) and by the config loader (schema/) alike.

It imports the standard library only: the pack runs in its own virtualenv (policy/requirements.txt).

Each resource rule takes (resource type token, input properties) and returns violation messages (empty:
compliant); the stack rules take the declared resources with their `protect` option or the stack's config.
Properties are read through the Mapping/Sequence interfaces only, so the engine's proxies (which raise
UnknownValueError for values unknown during preview) work as well as plain dicts in tests.
Field names are the provider's (camelCase): pulumi_docker 5.x Container/RemoteImage, Kubernetes API objects,
and the GPU Operator CRD `amd.com/v1alpha1` DeviceConfig (helm-charts-k8s/crds/deviceconfig-crd.yaml).

Why one file: the check functions share the readers of the engine's property proxies (`_mapping`, `_sequence`,
`_dig`, `pod_specs`, `_devices`, `_label`); the catalogue's entries are split by topic (rules/supply.py,
docker_hosts.py, kubernetes.py, credentials.py), and the functions are to follow them by topic.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
CONTAINER = "docker:index/container:Container"
DOCKER_PROVIDER = "pulumi:providers:docker"
DEVICE_CONFIG = "kubernetes:amd.com/v1alpha1:DeviceConfig"
NAMESPACE = "kubernetes:core/v1:Namespace"
SERVICE = "kubernetes:core/v1:Service"
DAEMON_SET = "kubernetes:apps/v1:DaemonSet"
# JobSet (kubernetes-sigs/jobset v0.12.0 api/jobset/v1alpha2): each replicatedJobs[].template is a batch/v1 JobTemplate.
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
HELM_RELEASE = "kubernetes:helm.sh/v3:Release"
HELM_TYPES = (HELM_RELEASE, "kubernetes:helm.sh/v4:Chart")
GPU_RESOURCE = "amd.com/gpu"
# Docker label on every GPU partition's container (a partition's shell or the workload running in it): host/container.
PARTITION_LABEL = "rocm-stack.partition"
# Docker labels of the one-shot containers: a host check (preflight, GPU check) and a vLLM server's health check.
CHECK_LABEL = "rocm-stack.check"
HEALTH_LABEL = "rocm-stack.health"
DRI = "/dev/dri"
# The GPU Operator's chart and the cert-manager it needs (chart names as in their Helm repositories).
DEFAULT_PROTECTED_CHARTS = ("gpu-operator-charts", "cert-manager")

# Where each workload kind keeps its pod spec.
_POD_SPEC_PATHS: dict[str, tuple[str, ...]] = {
    "kubernetes:core/v1:Pod": ("spec",),
    "kubernetes:core/v1:ReplicationController": ("spec", "template", "spec"),
    "kubernetes:apps/v1:Deployment": ("spec", "template", "spec"),
    "kubernetes:apps/v1:StatefulSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:DaemonSet": ("spec", "template", "spec"),
    "kubernetes:apps/v1:ReplicaSet": ("spec", "template", "spec"),
    "kubernetes:batch/v1:Job": ("spec", "template", "spec"),
    "kubernetes:batch/v1:CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}

_CREDENTIAL_WORDS = frozenset(
    {"password", "passwd", "passphrase", "token", "credential", "credentials", "pat", "apikey"}
)
# One-word names that end in a credential word: PGPASSWORD (libpq's environment variable), GHTOKEN.
_CREDENTIAL_SUFFIXES = ("password", "passwd", "token", "apikey", "secret")
# Last words that make an environment-style name (`OPENAI_KEY`, `AWS_SECRET`, `BASIC_AUTH`) a credential; in a
# camelCase config key they are too common (a taint's `key`, `secretName`).
_ENV_CREDENTIAL_WORDS = frozenset({"key", "secret", "auth"})
_CREDENTIAL_PAIRS = frozenset(
    {
        ("api", "key"),
        ("access", "key"),
        ("private", "key"),
        ("secret", "key"),
        ("client", "secret"),
        ("webhook", "secret"),
    }
)
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, Sequence) and not isinstance(value, str) else ()


def _dig(props: Mapping[str, Any], path: Iterable[str]) -> Any:
    value: Any = props
    for key in path:
        value = _mapping(value).get(key)
    return value


# --- images ---------------------------------------------------------------------------------------------


# Tags that name a branch or a channel rather than a build: a deny-list of the conventional names that registries
# re-push (rocm/pytorch's `latest-release`, rocm/pytorch-nightly's `nightly`, the JobSet chart's staging `main`,
# `stable`/`edge` channels). A tag that is none of these may still be re-pushed: only a digest pins for sure.
MOVING_TAGS = frozenset(
    {
        "nightly",
        "latest-release",
        "main",
        "master",
        "dev",
        "develop",
        "devel",
        "edge",
        "stable",
        "head",
        "canary",
        "next",
        "beta",
        "alpha",
        "testing",
        "unstable",
        "release",
        "current",
        "trunk",
    }
)


def unpinned_reason(reference: str) -> str | None:
    """Why an image reference does not pin one image ("has no tag, ..."), or None. A digest or an image ID pins;
    `latest` in any case or spelling (`nightly-latest`, `LATEST`) never does, nor a MOVING_TAGS name. The stack
    config's check (schema/docker.py image_pin_problem) uses this rule too, so config and pack never disagree."""
    if reference.startswith("sha256:") or "@" in reference:
        return None  # an image ID or a digest names exactly one image
    repository = reference.rsplit("/", 1)[-1]  # a registry host may carry a port: registry:5000/rocm/x
    tag = repository.partition(":")[2]
    if not tag:
        return "has no tag, so it pulls ':latest'"
    if re.fullmatch(r"(.*[-_.])?latest", tag, re.IGNORECASE) or tag.lower() in MOVING_TAGS:
        return f"uses the moving tag '{tag}'"
    return None


def image_pin_problem(reference: str) -> str | None:
    """Why an image reference is not pinned, or None."""
    if not reference:
        return "no image reference"
    reason = unpinned_reason(reference)
    return f"image '{reference}' {reason}; pin a version tag or a digest" if reason else None


def pod_specs(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, pod spec) of every pod template a resource declares: a workload kind's one, each replicated job's of a
    JobSet; none for anything else. Every pod rule reads pods through this."""
    if resource_type == JOBSET:
        jobs = map(_mapping, _sequence(_dig(props, ("spec", "replicatedJobs"))))
        return [
            (f"replicated job '{job.get('name')}': ", _mapping(_dig(job, ("template", "spec", "template", "spec"))))
            for job in jobs
        ]
    path = _POD_SPEC_PATHS.get(resource_type)
    return [("", _mapping(_dig(props, path)))] if path else []


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field in ("initContainers", "containers"):
        yield from (_mapping(c) for c in _sequence(spec.get(field)))


# The DeviceConfig's images (amd.com_deviceconfigs.yaml, GPU Operator v1.5.1). Not spec.driver.image: a repository
# the operator tags itself (<distro>-<release>-<kernel>-<driver version>).
DEVICE_CONFIG_IMAGES = (
    ("devicePlugin", "devicePluginImage"),
    ("devicePlugin", "nodeLabellerImage"),
    ("metricsExporter", "image"),
    ("testRunner", "image"),
    ("configManager", "image"),
    ("commonConfig", "utilsContainer", "image"),
)


def unpinned_images(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """RemoteImage `name`, Container `image`, every container image of every pod spec and the DeviceConfig's images
    (unset ones are the operator's defaults, fixed per operator release)."""
    if resource_type == REMOTE_IMAGE:
        references = [("", props.get("name") or "")]
    elif resource_type == CONTAINER:
        references = [("", props.get("image") or "")]
    elif resource_type == DEVICE_CONFIG:
        spec = _mapping(props.get("spec"))
        references = [
            (f"spec.{'.'.join(path)}: ", image) for path in DEVICE_CONFIG_IMAGES if (image := _dig(spec, path))
        ]
    else:
        references = [
            (f"{where}container '{c.get('name')}': ", c.get("image") or "")
            for where, spec in pod_specs(resource_type, props)
            for c in _containers(spec)
        ]
    return [where + problem for where, ref in references if (problem := image_pin_problem(ref))]


# --- Helm charts ------------------------------------------------------------------------------------------

# An exact SemVer 2 version, `v` allowed (charts tag either way). Helm's --version is a constraint: "a specific tag
# (e.g. 1.1.1) or ... a valid range (e.g. ^2.0.0). If this is not specified, the latest version is used" (`helm
# install --help`, helm/helm pkg/cmd/flags.go addChartPathOptionsFlags).
_EXACT_VERSION = re.compile(r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")


def chart_version_problem(version: Any) -> str | None:
    """Why a Helm chart version does not pin one chart (None: an exact version)."""
    if not version:
        return "has no chart version, so Helm installs the newest; pin an exact version (e.g. 1.5.1)"
    if not _EXACT_VERSION.fullmatch(str(version)):
        return f"chart version '{version}' is a range or not a version; pin an exact version (e.g. 1.5.1)"
    return None


def helm_repository_problem(url: Any) -> str | None:
    """Why prod refuses a Helm repository (None: allowed): plain http lets anyone on the path swap the chart (Helm
    verifies no signature unless asked: `helm install --verify`)."""
    if str(url or "").lower().startswith("http://"):
        return f"Helm repository '{url}' is plain http: anyone on the path could swap the chart; use https (or oci://)"
    return None


def helm_release_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A Helm Release's chart version (every stack): `chart` may itself be a full OCI reference; the version is
    separate either way."""
    if resource_type != HELM_RELEASE:
        return []
    problem = chart_version_problem(props.get("version"))
    return [f"Helm release of chart '{props.get('chart')}' {problem}"] if problem else []


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


# The stack's own monitoring containers carry this label (value: node-exporter, cadvisor, prometheus, ...); a
# partition never does (it carries PARTITION_LABEL; the stack config sets no container label).
MONITORING_LABEL = "rocm-stack.monitoring"
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


def _label(props: Mapping[str, Any], name: str) -> str | None:
    for label in map(_mapping, _sequence(props.get("labels"))):
        if label.get("label") == name:
            return str(label.get("value"))
    return None


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


# --- Kubernetes GPU pods ----------------------------------------------------------------------------------


def gpu_pod_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A pod asking for amd.com/gpu sets it as a limit and mounts a memory-backed /dev/shm.

    Extended resources are granted by limits (a request must equal the limit), and the 64 MiB /dev/shm a
    container runtime gives by default is far too small for PyTorch data loaders and RCCL.
    """
    problems = []
    for pod, spec in pod_specs(resource_type, props):
        problems += _gpu_pod_problems(pod, spec)
    return problems


def _gpu_pod_problems(pod: str, spec: Mapping[str, Any]) -> list[str]:
    memory_volumes = {
        _mapping(v).get("name")
        for v in _sequence(spec.get("volumes"))
        if _dig(_mapping(v), ("emptyDir", "medium")) == "Memory"
    }
    problems = []
    for container in filter(_gpu_limited, _containers(spec)):
        where = f"{pod}GPU container '{container.get('name')}'"
        resources = _mapping(container.get("resources"))
        limit = _mapping(resources.get("limits")).get(GPU_RESOURCE)
        request = _mapping(resources.get("requests")).get(GPU_RESOURCE)
        if limit is None:
            problems.append(f"{where} requests {GPU_RESOURCE} without a limit: set resources.limits['{GPU_RESOURCE}']")
        elif request is not None and str(request) != str(limit):
            problems.append(f"{where} requests {request} {GPU_RESOURCE} but limits {limit}: they must be equal")
        shm_mounts = [
            m for m in map(_mapping, _sequence(container.get("volumeMounts"))) if m.get("mountPath") == "/dev/shm"
        ]
        if not any(m.get("name") in memory_volumes for m in shm_mounts):
            problems.append(
                f"{where} has no memory-backed /dev/shm: mount an emptyDir with medium: Memory "
                "(and a sizeLimit) at /dev/shm"
            )
    return problems


# --- what a prod pod may reach of its node (Kubernetes) ----------------------------------------------------


def _read_only_volumes(spec: Mapping[str, Any]) -> set[str]:
    """Volumes every container mounts read-only (and at least one mounts)."""
    mounts = [_mapping(m) for c in _containers(spec) for m in _sequence(c.get("volumeMounts"))]
    names = {m.get("name") for m in mounts}
    return {str(n) for n in names if all(m.get("readOnly") is True for m in mounts if m.get("name") == n)}


def pod_host_access_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every prod pod: no host PID or IPC namespace. Every pod but a DaemonSet's (the standalone device plugin and
    node labeller are privileged and mount /sys and /dev by upstream design): no privileged container, no hostPath
    of a system path (host_mount_problem: the Docker rule). hostNetwork is the RDMA opt-in of a training
    (`training[].kubernetes.network.hostNetwork`, privileged namespace only) and is not judged here."""
    problems = []
    for pod, spec in pod_specs(resource_type, props):
        for field, shares in (("hostPID", "processes (it can signal and ptrace them)"), ("hostIPC", "shared memory")):
            if spec.get(field) is True:
                problems.append(f"{pod}pod sets {field}: it would share the node's {shares}; prod never does")
        if resource_type == DAEMON_SET:
            continue
        read_only = _read_only_volumes(spec)
        for volume in map(_mapping, _sequence(spec.get("volumes"))):
            path = _dig(volume, ("hostPath", "path"))
            if path and (problem := host_mount_problem(str(path), volume.get("name") in read_only)):
                problems.append(f"{pod}volume '{volume.get('name')}': {problem}")
        for container in _containers(spec):
            if _dig(container, ("securityContext", "privileged")) is True:
                problems.append(
                    f"{pod}container '{container.get('name')}' runs privileged: every device and capability of the "
                    "node; prod never does"
                )
    return problems


def pod_hardening_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Every prod pod but a DaemonSet's (see pod_host_access_problems) runs a seccomp profile (RuntimeDefault or a
    Localhost one: the kubelet's default is Unconfined), no container may escalate privileges (setuid binaries,
    file capabilities), and no service-account token is mounted unless the pod runs as an account of its own
    (token_holder_problems then checks what that account may do)."""
    if resource_type == DAEMON_SET:
        return []
    problems = []
    for pod, spec in pod_specs(resource_type, props):
        pod_seccomp = _dig(spec, ("securityContext", "seccompProfile", "type"))
        if spec.get("automountServiceAccountToken") is not False and _service_account(spec) == "default":
            problems.append(f"{pod}pod mounts a service-account token: set automountServiceAccountToken: false")
        for container in _containers(spec):
            where = f"{pod}container '{container.get('name')}'"
            context = _mapping(container.get("securityContext"))
            if (_dig(context, ("seccompProfile", "type")) or pod_seccomp) not in ("RuntimeDefault", "Localhost"):
                problems.append(f"{where} runs without a seccomp profile: set seccompProfile RuntimeDefault")
            if context.get("allowPrivilegeEscalation") is not False:
                problems.append(f"{where} may escalate privileges: set allowPrivilegeEscalation: false")
    return problems


def _service_account(spec: Mapping[str, Any]) -> str:
    return str(spec.get("serviceAccountName") or "default")


SERVICE_ACCOUNT = "kubernetes:core/v1:ServiceAccount"
ROLE = "kubernetes:rbac.authorization.k8s.io/v1:Role"
ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:RoleBinding"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"
# What a token in a prod pod may be allowed to do: read (the router's pod discovery, components/workloads/router.py).
READ_VERBS = frozenset({"get", "list", "watch"})


def token_holder_problems(resources: Iterable[Declared]) -> list[tuple[str, str]]:
    """(message, urn) for each prod pod template that mounts a service-account token without being a reviewed
    reader: its account must be one the stack declares in the pod's namespace, bound by no ClusterRoleBinding, and
    only by the stack's RoleBindings to the stack's Roles whose every rule reads (READ_VERBS)."""
    resources = list(resources)

    def key(props: Mapping[str, Any]) -> tuple[Any, Any]:
        return _dig(props, ("metadata", "namespace")), _dig(props, ("metadata", "name"))

    accounts = {key(r.props) for r in resources if r.type == SERVICE_ACCOUNT}
    roles = {key(r.props): r.props for r in resources if r.type == ROLE}
    bindings = [r for r in resources if r.type in (ROLE_BINDING, CLUSTER_ROLE_BINDING)]
    problems = []
    for r in resources:
        namespace = _dig(r.props, ("metadata", "namespace"))
        for where, spec in pod_specs(r.type, r.props):
            if spec.get("automountServiceAccountToken") is False or _service_account(spec) == "default":
                continue  # refused or fine by pod_hardening_problems
            account = (namespace, _service_account(spec))
            pods = f"the pods of {r.type.rsplit(':', 1)[-1]} '{r.name}'" + (f" ({where.strip()})" if where else "")
            reasons = (
                [] if account in accounts else [f"its ServiceAccount '{account[1]}' is not one the stack declares"]
            )
            for binding in bindings:
                subjects = [_mapping(s) for s in _sequence(binding.props.get("subjects"))]
                if not any(
                    s.get("kind") == "ServiceAccount"
                    and s.get("name") == account[1]
                    and (s.get("namespace") or _dig(binding.props, ("metadata", "namespace"))) == namespace
                    for s in subjects
                ):
                    continue
                ref = _mapping(binding.props.get("roleRef"))
                role = roles.get((namespace, ref.get("name"))) if binding.type == ROLE_BINDING else None
                rules = [_mapping(rule) for rule in _sequence(role.get("rules"))] if role is not None else []
                if (
                    ref.get("kind") != "Role"
                    or role is None
                    or not all(set(_sequence(rule.get("verbs"))) <= READ_VERBS for rule in rules)
                ):
                    reasons.append(f"{binding.type.rsplit(':', 1)[-1]} '{binding.name}' grants more than reading")
            if reasons:
                problems.append(
                    (
                        f"{pods} mount a service-account token: " + "; ".join(reasons) + " (or set "
                        "automountServiceAccountToken: false)",
                        r.urn,
                    )
                )
    return problems


NETWORK_POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"


def _pod_labels(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(where, labels) of each pod template of a workload (not a bare Pod's own labels: the stack declares none)."""
    if resource_type == JOBSET:
        jobs = map(_mapping, _sequence(_dig(props, ("spec", "replicatedJobs"))))
        paths = [(f"replicated job '{j.get('name')}'", _dig(j, ("template", "spec", "template"))) for j in jobs]
    elif resource_type in _POD_SPEC_PATHS and resource_type != DAEMON_SET:
        paths = [("", _dig(props, _POD_SPEC_PATHS[resource_type][:-1]))]
    else:
        return []
    return [(where, _mapping(_dig(_mapping(template), ("metadata", "labels")))) for where, template in paths]


def unisolated_workloads(resources: Iterable[Declared]) -> list[tuple[str, str]]:
    """(message, urn) for each workload pod template no ingress NetworkPolicy selects (by matchLabels; by labels
    alone, since a namespace may be unknown during preview): such pods accept traffic from every pod."""
    resources = list(resources)
    selectors = [
        _mapping(_dig(r.props, ("spec", "podSelector", "matchLabels")))
        for r in resources
        if r.type == NETWORK_POLICY and "Ingress" in _sequence(_dig(r.props, ("spec", "policyTypes")))
    ]
    problems = []
    for r in resources:
        for where, labels in _pod_labels(r.type, r.props):
            if not any(all(labels.get(k) == v for k, v in selector.items()) for selector in selectors if selector):
                pods = f"the pods of {r.type.rsplit(':', 1)[-1]} '{r.name}'" + (f" ({where})" if where else "")
                problems.append((f"no ingress NetworkPolicy selects {pods}: they accept traffic from every pod", r.urn))
    return problems


# The Service annotation by which the program records the config's explicit opt-in to a LoadBalancer
# (`inference[].kubernetes.allowLoadBalancer`); its value is "true".
LOAD_BALANCER_OPT_IN = "rocm-stack/allow-load-balancer"


def load_balancer_problem(service_type: str | None, opted_in: bool) -> str | None:
    """Why prod refuses a Service type (None: allowed): a LoadBalancer publishes the port outside the cluster, to
    whatever the cloud's load balancer lets in; only with an explicit opt-in."""
    if service_type == "LoadBalancer" and not opted_in:
        return (
            "a LoadBalancer Service publishes the API outside the cluster: prod needs the explicit opt-in "
            "`allowLoadBalancer: true` (and a firewall in front), else use ClusterIP behind an ingress"
        )
    return None


def exposure_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Prod: a LoadBalancer Service only with the opt-in annotation; Helm charts only from https or OCI."""
    if resource_type == SERVICE:
        opted_in = _mapping(_dig(props, ("metadata", "annotations"))).get(LOAD_BALANCER_OPT_IN) == "true"
        problem = load_balancer_problem(_dig(props, ("spec", "type")), opted_in)
        return [problem] if problem else []
    if resource_type == HELM_RELEASE:
        urls = (_dig(props, ("repositoryOpts", "repo")), props.get("chart"))
        return [problem for url in urls if (problem := helm_repository_problem(url))]
    return []


# Pod Security Admission: the namespace label that sets the enforced level
# (https://kubernetes.io/docs/concepts/security/pod-security-admission/).
PSA_ENFORCE = "pod-security.kubernetes.io/enforce"


# Pod Security Standards (https://kubernetes.io/docs/concepts/security/pod-security-standards/), baseline: added
# capabilities only "AUDIT_WRITE, CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, MKNOD, NET_BIND_SERVICE, SETFCAP, SETGID,
# SETPCAP, SETUID, SYS_CHROOT"; no privileged container, no hostPath volume, no host namespaces (hostNetwork, hostPID,
# hostIPC), no hostPort. A pod needing any of these needs `privileged`, the only laxer level.
BASELINE_CAPABILITIES = frozenset(
    "AUDIT_WRITE CHOWN DAC_OVERRIDE FOWNER FSETID KILL MKNOD NET_BIND_SERVICE SETFCAP SETGID SETPCAP SETUID "
    "SYS_CHROOT".split()
)
# Strictest first.
POD_SECURITY_LEVELS = ("restricted", "baseline", "privileged")
LEADER_WORKER_SET = "kubernetes:leaderworkerset.x-k8s.io/v1:LeaderWorkerSet"


@dataclass(frozen=True)
class PodNeeds:
    """What of Pod Security's baseline a pod (or a workload's pods) would break."""

    capabilities: frozenset[str] = frozenset()
    host_paths: frozenset[str] = frozenset()
    host_network: bool = False
    host_pid_or_ipc: bool = False
    privileged: bool = False
    host_ports: bool = False

    def __or__(self, other: PodNeeds) -> PodNeeds:
        return PodNeeds(
            self.capabilities | other.capabilities,
            self.host_paths | other.host_paths,
            self.host_network or other.host_network,
            self.host_pid_or_ipc or other.host_pid_or_ipc,
            self.privileged or other.privileged,
            self.host_ports or other.host_ports,
        )

    def level(self) -> str:
        """The strictest Pod Security level that admits these needs: baseline, or privileged beyond it."""
        beyond = (
            self.privileged
            or self.host_network
            or self.host_pid_or_ipc
            or self.host_ports
            or bool(self.host_paths)
            or not self.capabilities <= BASELINE_CAPABILITIES
        )
        return "privileged" if beyond else "baseline"


def pod_needs(spec: Mapping[str, Any]) -> PodNeeds:
    """A pod spec's needs, read as Pod Security Admission reads them (every container kind)."""
    containers = [
        _mapping(c) for key in ("containers", "initContainers", "ephemeralContainers") for c in _sequence(spec.get(key))
    ]
    contexts = [_mapping(c.get("securityContext")) for c in containers]
    return PodNeeds(
        capabilities=frozenset(str(a) for ctx in contexts for a in _sequence(_dig(ctx, ("capabilities", "add")))),
        host_paths=frozenset(
            str(_dig(_mapping(v), ("hostPath", "path")))
            for v in _sequence(spec.get("volumes"))
            if _mapping(v).get("hostPath")
        ),
        host_network=spec.get("hostNetwork") is True,
        host_pid_or_ipc=spec.get("hostPID") is True or spec.get("hostIPC") is True,
        privileged=any(ctx.get("privileged") is True for ctx in contexts),
        host_ports=any(_mapping(port).get("hostPort") for c in containers for port in _sequence(c.get("ports"))),
    )


def workload_pod_specs(resource_type: str, props: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every pod template of a resource: pod_specs' and a LeaderWorkerSet's leader and worker templates."""
    if resource_type == LEADER_WORKER_SET:
        template = _mapping(_dig(props, ("spec", "leaderWorkerTemplate")))
        return [
            _mapping(_dig(template, (key, "spec"))) for key in ("leaderTemplate", "workerTemplate") if template.get(key)
        ]
    return [spec for _, spec in pod_specs(resource_type, props)]


def laxer_pod_security_problem(what: str, declared: str, needed: str) -> str | None:
    """`declared` (a namespace's enforced level, a workload's podSecurity) laxer than its pods need."""
    if declared not in POD_SECURITY_LEVELS or POD_SECURITY_LEVELS.index(declared) > POD_SECURITY_LEVELS.index(needed):
        return (
            f"{what} enforces Pod Security '{declared}' but its pods need only '{needed}': a laxer level lets anyone "
            f"who may create a pod there run it privileged, on the node's namespaces or with its files; use '{needed}'"
        )
    return None


def namespace_level_problems(resources: Iterable[Declared]) -> list[tuple[str, str]]:
    """(message, urn) for each namespace the stack creates whose enforced level is laxer than the pods the stack
    declares in it need. Namespaces a Helm release installs into are left out: its pods are not in the plan."""
    resources = list(resources)
    charted = {str(r.props.get("namespace")) for r in resources if r.type in HELM_TYPES}
    needs: dict[str, PodNeeds] = defaultdict(PodNeeds)
    for r in resources:
        namespace = str(_dig(r.props, ("metadata", "namespace")) or "default")
        for spec in workload_pod_specs(r.type, r.props):
            needs[namespace] = needs[namespace] | pod_needs(spec)
    problems = []
    for r in resources:
        name = str(_dig(r.props, ("metadata", "name")))
        level = _mapping(_dig(r.props, ("metadata", "labels"))).get(PSA_ENFORCE)
        if r.type != NAMESPACE or level is None or name in charted:
            continue
        problem = laxer_pod_security_problem(f"namespace '{name}'", str(level), needs[name].level())
        if problem:
            problems.append((problem, r.urn))
    return problems


def namespace_pod_security_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Prod: each namespace the stack creates states its Pod Security level, so the cluster's default (often
    baseline, or nothing) does not decide what its pods may do."""
    if resource_type != NAMESPACE:
        return []
    if _mapping(_dig(props, ("metadata", "labels"))).get(PSA_ENFORCE):
        return []
    name = _dig(props, ("metadata", "name"))
    return [f"namespace '{name}' has no {PSA_ENFORCE} label: label it with the Pod Security level its pods need"]


# --- GPU Operator driver upgrades (prod) ------------------------------------------------------------------


def driver_upgrade_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """The operator cordons and drains each node before it upgrades the amdgpu driver there.

    Only when the operator manages the driver (`spec.driver.enable`, CRD default true); with the host's inbox
    driver there is no operator-driven upgrade.
    """
    if resource_type != DEVICE_CONFIG:
        return []
    driver = _mapping(_dig(props, ("spec", "driver")))
    if driver.get("enable", True) is False:
        return []
    upgrade = _mapping(driver.get("upgradePolicy"))
    where = "spec.driver.upgradePolicy"
    if upgrade.get("enable") is not True:
        return [
            f"{where}.enable is not true: driver upgrades would not cordon and drain nodes; enable the "
            "upgrade policy with a nodeDrainPolicy"
        ]
    problems = []
    drain = upgrade.get("nodeDrainPolicy")
    if not isinstance(drain, Mapping):
        problems.append(
            f"{where}.nodeDrainPolicy is not set: set it so workloads are evicted before the driver is replaced"
        )
    elif drain.get("force") is True:
        problems.append(
            f"{where}.nodeDrainPolicy.force is true: pods without a controller would be deleted "
            "for good; drain without force in prod"
        )
    if upgrade.get("maxParallelUpgrades", 1) == 0:
        problems.append(
            f"{where}.maxParallelUpgrades is 0 (every node at once): draining then has nowhere to "
            "move workloads; upgrade a bounded number of nodes at a time"
        )
    return problems


# --- stack rules ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Declared:
    """A resource as stack validation sees it."""

    type: str
    name: str
    props: Mapping[str, Any]
    protect: bool
    urn: str = ""


def unprotected(
    resources: Iterable[Declared], charts: Iterable[str] = DEFAULT_PROTECTED_CHARTS
) -> list[tuple[str, str]]:
    """(message, urn) for each namespace and operator/cert-manager Helm release without `protect`.

    Deleting a namespace deletes everything in it, and deleting the operator's release removes the driver
    and device plugin from every GPU node: in prod either needs an explicit unprotect first.
    """
    charts = set(charts)
    problems = []
    for r in resources:
        if r.protect:
            continue
        if r.type == NAMESPACE:
            problems.append((f"namespace '{r.name}' is not protected: declare it with protect=True in prod", r.urn))
        elif r.type in HELM_TYPES and r.props.get("chart") in charts:
            problems.append(
                (
                    f"Helm release '{r.name}' (chart {r.props.get('chart')}) is not protected: "
                    "declare it with protect=True in prod",
                    r.urn,
                )
            )
    return problems


# --- vLLM's API key and exposure ----------------------------------------------------------------------------

# RFC 6750 §2.1 `b64token`, what a Bearer credential may be: letters, digits, - . _ ~ + / and trailing = padding.
_BEARER_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def api_key_problem(key: str) -> str | None:
    """Why `key` cannot be vLLM's API key (`rocm-stack:vllmApiKey`, which the proxy in front of vLLM compares), or
    None. The config loader applies it to the value; the pack sees only that the key is a secret."""
    if not key.strip():
        return (
            "is empty, which would leave vLLM without a key; set one with `pulumi config set --secret vllmApiKey <key>`"
        )
    if _BEARER_TOKEN.fullmatch(key) is None:
        return (
            "holds characters a Bearer token cannot carry (RFC 6750 section 2.1: letters, digits and - . _ ~ + /, "
            "then = padding); use e.g. `openssl rand -hex 32`"
        )
    return None


# Prod's floor for the secrets a person chooses (the config loader sees their values; the pack sees only that they
# are secrets). Anyone who reaches the published port may guess the vLLM key as often as nginx answers (no attempt
# limit), so it must carry 128 bits: 32 characters, what `openssl rand -hex 16` prints. Grafana's password guards a
# login that counts failures per user (its brute-force lockout), but `admin` is Grafana's own default
# (conf/defaults.ini `admin_password = admin`) and Grafana applies a GF_* variable only when it is non-empty, so an
# empty one leaves that default (issue 34's review, on the real Grafana): 16 characters and not the default.
API_KEY_MIN_LENGTH = 32
GRAFANA_PASSWORD_MIN_LENGTH = 16


# The secret -> (its floor, a command that makes a strong one).
SECRET_FLOORS = {
    "vllmApiKey": (API_KEY_MIN_LENGTH, "`openssl rand -hex 16`"),
    "grafanaAdminPassword": (GRAFANA_PASSWORD_MIN_LENGTH, "`openssl rand -base64 18`"),
}


def weak_secret_problem(value: str, min_length: int, fix: str) -> str | None:
    """Why `value` is too weak for prod, or None: shorter than `min_length`, or Grafana's default `admin`."""
    if value.strip().lower() == "admin":
        return f"is Grafana's default password `admin`, which prod refuses; {fix}"
    if len(value) < min_length:
        return f"has {len(value)} characters, fewer than the {min_length} prod requires; {fix}"
    return None


def _config_set_secret(key: str) -> str:
    return f"`pulumi config set --secret {key} <value>`"


def weak_secrets(
    values: Mapping[str, Any], how_to_set: Callable[[str], str] = _config_set_secret
) -> list[tuple[str, str]]:
    """(key, why) of each secret of SECRET_FLOORS whose decrypted text (`values`, keys without the namespace) is
    too weak for prod; a value that is no text (unset, or not decrypted) is not judged."""
    problems = []
    for key, (min_length, example) in SECRET_FLOORS.items():
        value = values.get(key)
        fix = f"set a stronger one with {how_to_set(key)} (e.g. {example})"
        if isinstance(value, str) and (problem := weak_secret_problem(value, min_length, fix)):
            problems.append((key, problem))
    return problems


# The PEM block labels nginx's ssl_certificate and ssl_certificate_key take (RFC 7468: CERTIFICATE; PRIVATE KEY for
# PKCS #8, RSA/EC PRIVATE KEY for the older forms OpenSSL also reads).
_PEM_LABELS = {
    "vllmTlsCertificate": ("CERTIFICATE",),
    "vllmTlsKey": ("PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY"),
}


def pem_problem(key: str, text: str) -> str | None:
    """Why `text` is not the PEM that `key` holds (a block of one of its labels), or None."""
    labels = _PEM_LABELS[key]
    if any(f"-----BEGIN {label}-----" in text and f"-----END {label}-----" in text for label in labels):
        return None
    return f"holds no PEM block `-----BEGIN {labels[0]}-----`: give the PEM file's text (`cat file.pem | pulumi config set --secret {key}`)"


def pem_problems(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, why) of each of the proxies' TLS secrets whose decrypted text (`values`, keys without the namespace) is
    not PEM of its kind; a value that is no text (unset, or not decrypted) is not judged."""
    return [
        (key, problem)
        for key in _PEM_LABELS
        if isinstance(value := values.get(key), str) and (problem := pem_problem(key, value))
    ]


# vLLM's own key guards only paths under /v1 (vllm/entrypoints/openai/api_server.py @ v0.11.2, build_app); so
# /invocations, /tokenize and /pooling answer anyone who reaches vLLM (vllm-project/vllm#58144), and a Host header
# passes its middleware before vLLM 0.22 (GHSA-94f4-hr76-p5j6). Only the authenticating proxy may reach it.
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


def _vllm_serve_args(command: Any) -> list[str] | None:
    """The arguments after `vllm serve` in a command (also behind `sh -c ... vllm`), or None: no vLLM server."""
    parts = [str(part) for part in _sequence(command)]
    for index, part in enumerate(parts[:-1]):
        if part.rsplit("/", 1)[-1] == "vllm" and parts[index + 1] == "serve":
            return parts[index + 2 :]
    return None


def _listen_host(args: Sequence[str]) -> str:
    """The address `vllm serve` listens on: the last --host given (or abbreviated), else every address (vLLM's
    default)."""
    return vllm_option_value(args, VLLM_HOST) or "0.0.0.0"


def exposed_vllm_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A vLLM server is reachable only through its authenticating proxy: a Docker container running `vllm serve`
    publishes no host port (the proxy's container does) and listens on the loopback of the proxy's network namespace
    (on an address of a bridge network, a neighbour routing to it through the host reaches it where the FORWARD
    policy is ACCEPT: moby#14041); a pod's vLLM listens on the pod's loopback only (the proxy sidecar holds the pod's
    port)."""
    if resource_type == CONTAINER:
        args = _vllm_serve_args(props.get("command"))
        if args is not None and _sequence(props.get("ports")):
            return [
                "publishes vLLM's own port, whose /invocations, /tokenize and /pooling need no key: publish the "
                "authenticating proxy's port instead (set `rocm-stack:vllmApiKey`)"
            ]
        if args is not None and (host := _listen_host(args)) not in _LOOPBACK:
            return [
                f"serves vLLM on {host}, which a neighbour routing the container's network through the host reaches "
                "around the key (moby#14041); listen on 127.0.0.1 in the proxy's network namespace (set "
                "`rocm-stack:vllmApiKey`)"
            ]
    problems = []
    for where, spec in pod_specs(resource_type, props):
        for container in _containers(spec):
            args = _vllm_serve_args([*_sequence(container.get("command")), *_sequence(container.get("args"))])
            if args is None:
                continue
            if (host := _listen_host(args)) not in _LOOPBACK:
                problems.append(
                    f"{where}container '{container.get('name')}' serves vLLM on {host}, reachable by every pod "
                    "around the key check; listen on 127.0.0.1 behind the authenticating proxy (set "
                    "`rocm-stack:vllmApiKey`)"
                )
    return problems


PROD_WORDS = frozenset({"prod", "production"})


def is_prod_stack(stack: str) -> bool:
    """A stack is prod when `prod` or `production`, in any case, is a word of its name (words split at any character
    but a letter or digit, and where case or letters and digits change, the config keys' rule `_words`): `prod`,
    `PROD`, `prod-eu`, `prod_eu`, `eu.prod`, `eu-prod`, `euProd`, `prod2`, `production`, also `non-prod` (fail
    closed: name a development stack otherwise); `product-demo` and `preprod` are not. `org/project/prod` counts as
    `prod`."""
    return not PROD_WORDS.isdisjoint(_words(stack.rsplit("/", 1)[-1]))


def environment_of(stack: str, configured: Any = None) -> str:
    """The environment a stack runs in: the program's config loader and the policy pack both decide with this.
    A stack's config may make it stricter (`environment: prod` on `lab`), never a prod stack laxer: the config is
    what the prod rules police, so it cannot switch them off."""
    return "prod" if is_prod_stack(stack) or configured == "prod" else "dev"


def laxer_environment_problem(stack: str, configured: Any) -> str | None:
    """Why a stack's `environment` is refused: `dev` on a stack whose name makes it prod."""
    if configured == "dev" and is_prod_stack(stack):
        return (
            f"stack '{stack}' is prod by its name (`prod` or `production` is a word of it), and its config cannot make it "
            "laxer: remove `environment: dev` (or set prod); a development stack takes another name (`dev`, `lab-*`)"
        )
    return None


def stack_of_urn(urn: str) -> str | None:
    """The stack of a resource URN, `urn:pulumi:<stack>::<project>::<type>::<name>` (Pulumi docs, "Resource
    URNs"); None for anything else."""
    if not urn.startswith("urn:pulumi:"):
        return None
    return urn[len("urn:pulumi:") :].split("::", 1)[0] or None


def _words(key: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(key)]


def is_credential_key(key: str) -> bool:
    """By the name's shape: `registryPassword`, `huggingfaceToken`, `grafana.apiKey`, `PGPASSWORD`, `APIKEY`,
    `GITHUB_PAT`, and an environment-style name ending in KEY, SECRET or AUTH (`OPENAI_KEY`). Not `tokenizer`,
    `secretName`, `maxTokens`, a taint's `key`, `AWS_SHARED_CREDENTIALS_FILE`."""
    name = key.rsplit(":", 1)[-1]
    words = _words(name)
    if not words:
        return False
    last = words[-1]
    env_style = name.isupper() and len(words) > 1
    return (
        last in _CREDENTIAL_WORDS
        or tuple(words[-2:]) in _CREDENTIAL_PAIRS
        or words == ["secret"]
        or last.endswith(_CREDENTIAL_SUFFIXES)  # one word: PGPASSWORD, GHTOKEN, APIKEY
        or (env_style and last in _ENV_CREDENTIAL_WORDS)
    )


# Prefixes of credentials issued by well-known services, with the length that follows, so that a value is found
# whatever key holds it (`DATABASE_URL`, `command`, an `extraArgs` flag):
# GitHub ghp_/gho_/ghu_/ghs_/ghr_ + 36 characters and github_pat_ ("About authentication to GitHub", GitHub's token
# formats: https://docs.github.com/en/authentication/keeping-your-account-and-data-secure/about-authentication-to-github#githubs-token-formats;
# https://github.blog/engineering/platform-security/behind-githubs-new-authentication-token-formats/), GitLab glpat-
# (https://docs.gitlab.com/security/tokens/#token-prefixes), Hugging Face hf_ (https://huggingface.co/docs/hub/security-tokens),
# OpenAI sk- / sk-proj- (https://platform.openai.com/docs/api-reference/authentication), Slack xoxb-/xoxp-/...
# (https://api.slack.com/authentication/token-types) and AWS access key IDs AKIA/ASIA + 16 (IAM "Unique identifiers":
# https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_identifiers.html#identifiers-unique-ids).
_TOKEN_SHAPES = (
    ("a GitHub token", re.compile(r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{30,}")),
    ("a GitHub token", re.compile(r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{22,}")),
    ("a GitLab token", re.compile(r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}")),
    ("a Hugging Face token", re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{30,}")),
    ("an OpenAI-style API key", re.compile(r"(?<![A-Za-z0-9-])sk-(?:proj-)?[A-Za-z0-9_-]{20,}")),
    ("a Slack token", re.compile(r"(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}")),
    ("an AWS access key ID", re.compile(r"(?<![A-Z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Z0-9])")),
)
# `scheme://user:password@host` (RFC 3986 section 3.2.1: "Use of the format user:password in the userinfo field is
# deprecated"): the password is in the text itself.
# A scheme is matched only from its first character, possessively: linear in the text's length.
_URL_PASSWORD = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*+://[^\s/@:]*+:[^\s/@]++@")
# A value that names a file holds no credential itself (`GOOGLE_APPLICATION_CREDENTIALS: /path/key.json`, Google's
# recommended form): absolute, relative to the working or home directory, or a file:// URL.
_FILE_REFERENCE = re.compile(r"(/|\./|\.\./|~/|file://)\S*")
# Not credentials whatever the name: switches and counts (`HF_HUB_DISABLE_IMPLICIT_TOKEN: "1"`).
_NOT_A_SECRET = re.compile(r"[0-9]+|true|false|yes|no|on|off", re.IGNORECASE)


def credential_in_value(value: str) -> str | None:
    """What credential a text holds by its shape ("a GitHub token", "a URL with a password"), or None."""
    if _URL_PASSWORD.search(value):
        return "a URL with a password"
    return next((what for what, shape in _TOKEN_SHAPES if shape.search(value)), None)


def credential_problem(key: str | int, value: Any) -> str | None:
    """Why a plain (not `secure:`) config value is a credential in plain text, or None: its text has a
    credential's shape, or its key is named like one and the value is neither a file path nor a switch."""
    if not isinstance(value, str) or not value:
        return None
    if what := credential_in_value(value):
        return f"holds {what}"
    if isinstance(key, str) and is_credential_key(key):
        if _FILE_REFERENCE.fullmatch(value) or _NOT_A_SECRET.fullmatch(value):
            return None
        return f"'{key.rsplit(':', 1)[-1]}' is named like a credential"
    return None


def is_secure(value: Any) -> bool:
    """A Pulumi secret in a stack file: a mapping whose one key `secure` holds text (config object.go L540-550)."""
    return isinstance(value, Mapping) and len(value) == 1 and isinstance(value.get("secure"), str)


def _leaves(config: Any, path: str = "") -> Iterator[tuple[str, str | int, Any]]:
    """(path, key, value) of every leaf of a config; a `secure:` value is one leaf."""
    items = config.items() if isinstance(config, Mapping) else enumerate(_sequence(config))
    for key, value in items:
        child = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        if isinstance(value, (Mapping, list)) and not is_secure(value):
            yield from _leaves(value, child)
        else:
            yield child, key, value


def secret_texts(written: Mapping[str, Any], decrypted: Mapping[str, Any]) -> set[str]:
    """The decrypted text of each `secure:` value of a stack file's config (`written`), read at the same place in
    the config the engine hands the pack (`decrypted`, PULUMI_CONFIG: every value decrypted, a structured one as JSON:
    pulumi/pulumi pkg/resource/plugin/analyzer_plugin.go constructEnv, constructConfig)."""

    def walk(w: Any, d: Any) -> Iterator[str]:
        if is_secure(w):
            if isinstance(d, str):
                yield d
        elif isinstance(w, Mapping) and isinstance(d, Mapping):
            for key, value in w.items():
                yield from walk(value, d.get(key))
        elif isinstance(w, list) and isinstance(d, list):
            for w_item, d_item in zip(w, d, strict=False):
                yield from walk(w_item, d_item)

    texts: set[str] = set()
    for key, value in written.items():
        engine = decrypted.get(key)
        if isinstance(value, (Mapping, list)) and not is_secure(value) and isinstance(engine, str):
            try:
                engine = json.loads(engine)
            except ValueError:
                continue
        texts.update(walk(value, engine))
    return texts


def environment_credential_problems(
    resource_type: str, props: Mapping[str, Any], secrets: Collection[str]
) -> list[str]:
    """Each environment variable of a declared container (Docker `envs`, a pod's `env[].value`) that is a credential
    by `credential_problem`, the config loader's rule (its name or its value's shape), and holds none of the stack's
    Pulumi secrets (`secrets`): a credential that a plain config value or the program itself put there."""
    problems = []
    for where, entries in _environments(resource_type, props):
        for entry in entries:
            name, _, value = entry.partition("=")
            if value not in secrets and (why := credential_problem(name, value)):
                problems.append(
                    f"{where}environment variable {name}: {why}, and no Pulumi secret holds it: store it with "
                    "`pulumi config set --path --secret` (or give a file's path)"
                )
    return problems


def plaintext_secrets(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config path `rocm-stack:registry.password`, why) of each credential that is not a `secure:` value. A list
    item is judged by its text only (`command`, `extraArgs`), as is a Docker endpoint (docker_endpoint_problems
    says more)."""
    return [(path, why) for path, key, value in _leaves(config) if (why := credential_problem(key, value))]


# Keys whose list items become a process's arguments, in plain text in the container's or pod's spec.
ARGUMENT_KEYS = ("command", "args", "extraArgs")


def _arguments(config: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(config path `inference[0].extraArgs[1]`, item) of every item of an argument list (ARGUMENT_KEYS)."""
    items = config.items() if isinstance(config, Mapping) else enumerate(_sequence(config))
    for key, child in items:
        at = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        if key in ARGUMENT_KEYS and isinstance(child, list):
            yield from ((f"{at}[{i}]", arg) for i, arg in enumerate(child))
        elif isinstance(child, (Mapping, list)) and not is_secure(child):
            yield from _arguments(child, at)


def secrets_in_arguments(config: Mapping[str, Any], is_secret: Callable[[Any], bool] = is_secure) -> list[str]:
    """Config paths of secret values inside an argument list: a Pulumi secret there is decrypted into the command
    line, which the container's spec (`docker inspect`, the pod) shows in plain text while synth shows "[secret]".
    `is_secret` says what a secret looks like: a stack file's `secure:` value, or the placeholder synth hands the
    program."""
    return [path for path, arg in _arguments(config) if is_secret(arg)]


def credential_flags(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config path, why) of each credential flag in an argument list (credential_flag_problem)."""
    return [
        (path, why)
        for path, arg in _arguments(config)
        if isinstance(arg, str) and (why := credential_flag_problem(arg))
    ]


SECRET_IN_ARGUMENTS = (
    "is a secret inside a command line: the container's spec holds it in plain text (`docker inspect`, the pod) and "
    "the program logs it; pass it in an environment variable (`env`, stored with `pulumi config set --path --secret`) "
    "or a file"
)


# How `vllm serve` reads its arguments: vLLM's FlexibleArgumentParser (vllm-project/vllm vllm/utils/argparse_utils.py;
# vllm/utils/__init__.py before the module was split out) is an argparse.ArgumentParser built with
# `super().__init__(*args, **kwargs)`, so argparse's `allow_abbrev=True` default holds: "Allows long options to be
# abbreviated if the abbreviation is unambiguous" (https://docs.python.org/3/library/argparse.html#allow-abbrev;
# `--hos 0.0.0.0` is `--host 0.0.0.0`). Its parse_args first turns `_` into `-` in an option's name up to its first
# `.` (`--trust_remote_code`; `--x.key` sets a key of the JSON option `--x`), and argparse takes `--opt=value` as well
# as `--opt value`, the last occurrence winning for a value.
# vLLM options the rules judge: the listening address, the credentials it takes on its command line, remote code.
VLLM_HOST, VLLM_API_KEY, VLLM_HF_TOKEN = "--host", "--api-key", "--hf-token"
VLLM_CREDENTIAL_OPTIONS = (VLLM_API_KEY, VLLM_HF_TOKEN)


def vllm_options(arg: Any, options: Iterable[str]) -> list[str]:
    """The long options of `options` that argument `arg` may select as vLLM's parser reads it: the one it names
    exactly, else each it abbreviates (an abbreviation shared by several is refused by argparse as ambiguous, so
    judging it as each of them refuses nothing vLLM would run)."""
    if not isinstance(arg, str) or not arg.startswith("--") or arg == "--":
        return []
    name = "--" + arg[2:].split("=", 1)[0].split(".", 1)[0].replace("_", "-")
    options = list(options)
    return [name] if name in options else [o for o in options if o.startswith(name)]


def vllm_option_value(args: Sequence[Any], option: str) -> str | None:
    """The value `option` gets from an argument list as vLLM's parser reads it (the last one given), or None."""
    value = None
    for index, arg in enumerate(args):
        if vllm_options(arg, [option]):
            if "=" in arg:
                value = arg.split("=", 1)[1]
            elif index + 1 < len(args):
                value = str(args[index + 1])
    return value


# Flags whose name reads as a credential but whose value is a name: the vLLM production-stack router's
# `--session-key` is the request header that names a session (src/vllm_router/parsers/parser.py @ vllm-stack-0.1.12:
# "The key (in the header) to identify a session.").
NOT_CREDENTIAL_FLAGS = frozenset({"--session-key"})


def credential_flag_problem(arg: str) -> str | None:
    """Why a command-line argument is refused: a credential flag (`--api-key`, `--hf-token=...`). vLLM logs its
    non-default arguments at start-up (vllm-project/vllm vllm/entrypoints/utils.py log_non_default_args:
    `logger.info("non-default args: %s", non_default_args)`, unredacted before releases added
    redact_sensitive_args), and any process's arguments show in `ps` on the host and in the container's spec."""
    flag = arg.split("=", 1)[0]
    if not flag.startswith("--") or flag in NOT_CREDENTIAL_FLAGS:
        return None
    if not is_credential_key(flag[2:].replace("-", "_").upper()) and not vllm_options(arg, VLLM_CREDENTIAL_OPTIONS):
        return None
    return (
        f"'{flag}' passes a credential on the command line, which the container's spec and `ps` show and vLLM logs "
        "at start-up; pass it in an environment variable or a file (vLLM reads VLLM_API_KEY: the stack's "
        "`vllmApiKey` secret)"
    )


# Linux refuses an argument or environment string of MAX_ARG_STRLEN (32 pages, 131072 bytes with 4 KiB pages) or
# more with E2BIG (include/uapi/linux/binfmts.h `#define MAX_ARG_STRLEN (PAGE_SIZE * 32)`, fs/exec.c
# copy_strings), and execve takes C strings, so a NUL byte would cut the value short.
MAX_ARG_STRLEN = 131072


def text_problem(value: str) -> str | None:
    """Why a config text cannot become an argument or an environment value of a process, or None."""
    if "\0" in value:
        return "holds a NUL byte, which no program argument or environment value can carry (execve takes C strings)"
    size = len(value.encode())
    if size >= MAX_ARG_STRLEN - 256:  # the environment entry adds its `NAME=`
        return (
            f"is {size} bytes: Linux refuses an argument or environment value of {MAX_ARG_STRLEN} bytes or more "
            "(MAX_ARG_STRLEN); put large content in a file"
        )
    return None


def text_problems(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(config path, why) of each text leaf `text_problem` refuses (keys too: an env name is a text)."""
    problems = []
    for path, key, value in _leaves(config):
        for text in (str(key), value) if isinstance(value, str) else (str(key),):
            if why := text_problem(text):
                problems.append((path, why))
                break
    return problems


def command_lines(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(where, arguments) of each process a Docker container or a pod spec starts."""
    if resource_type == CONTAINER:
        return [("", [str(a) for a in (*_sequence(props.get("entrypoints")), *_sequence(props.get("command")))])]
    return [
        (
            f"{where}container '{c.get('name')}': ",
            [str(a) for a in (*_sequence(c.get("command")), *_sequence(c.get("args")))],
        )
        for where, spec in pod_specs(resource_type, props)
        for c in _containers(spec)
    ]


def _environments(resource_type: str, props: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """(where, `NAME=value` entries) of each process's environment, as execve receives it."""
    if resource_type == CONTAINER:
        return [("", [str(e) for e in _sequence(props.get("envs"))])]
    return [
        (
            f"{where}container '{c.get('name')}': ",
            [f"{e.get('name')}={e.get('value')}" for e in map(_mapping, _sequence(c.get("env"))) if "value" in e],
        )
        for where, spec in pod_specs(resource_type, props)
        for c in _containers(spec)
    ]


def command_line_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Credential flags and credentials by shape on a declared command line, and arguments or environment values
    no process can be started with (text_problem), in prod."""
    problems = []
    for where, args in command_lines(resource_type, props):
        for arg in args:
            if why := credential_flag_problem(arg):
                problems.append(where + why)
            elif what := credential_in_value(arg):
                problems.append(f"{where}an argument holds {what}: pass it in an environment variable or a file")
            elif why := text_problem(arg):
                problems.append(f"{where}an argument {why}")
    for where, entries in _environments(resource_type, props):
        problems += [
            f"{where}environment value '{e.split('=', 1)[0]}' {why}" for e in entries if (why := text_problem(e))
        ]
    return problems


TRUST_REMOTE_CODE = "--trust-remote-code"


# The labels of a workload's Kubernetes objects (components/workloads/pods.py labels_of): its kind (`vllm` for an
# inference workload) and its name.
APP_LABEL, INSTANCE_LABEL = "app.kubernetes.io/name", "app.kubernetes.io/instance"


def is_remote_code_flag(arg: Any) -> bool:
    """`--trust-remote-code` as vLLM's parser reads it (vllm_options): also `--trust_remote_code`, with `=value`, and
    abbreviated (`--trust-remote`)."""
    return bool(vllm_options(arg, [TRUST_REMOTE_CODE]))


def remote_code_flags(config: Mapping[str, Any]) -> list[str]:
    """Config paths of the flag written into an argument list (command, args, extraArgs) anywhere in a config:
    prod runs the model repository's code only through `inference[].trustRemoteCode`."""
    return [path for path, arg in _arguments(config) if is_remote_code_flag(arg)]


REMOTE_CODE_FLAG_PROBLEM = "runs the model repository's code; opt in explicitly with `trustRemoteCode: true` instead"


def remote_code_opt_ins(inference: Any) -> set[str]:
    """What names the servers of each inference workload that opts in (`trustRemoteCode: true`) in a stack file's
    `inference`: its name (its Kubernetes objects' INSTANCE_LABEL, with APP_LABEL `vllm`) and its Docker partitions
    (PARTITION_LABEL; a partition serves one workload: schema/derived.py partitions_claimed)."""
    names: set[str] = set()
    for workload in map(_mapping, _sequence(inference)):
        if workload.get("trustRemoteCode") is True:
            names.add(str(workload.get("name")))
            names.update(str(p) for p in _sequence(_mapping(workload.get("docker")).get("partitions")))
    return names


def remote_code_problems(resource_type: str, props: Mapping[str, Any], opted_in: Collection[str]) -> list[str]:
    """vLLM's `--trust-remote-code` runs the model repository's Python code in the server; prod runs it only in the
    servers of an inference workload that opts in (`remote_code_opt_ins`: `inference[].trustRemoteCode: true`, which
    adds the flag to that workload's servers alone)."""
    labels = _mapping(_dig(props, ("metadata", "labels")))
    owner = partition_of(props) if resource_type == CONTAINER else None
    if resource_type != CONTAINER and labels.get(APP_LABEL) == "vllm":
        owner = labels.get(INSTANCE_LABEL)
    if owner in opted_in:
        return []
    return [
        f"{where}runs {TRUST_REMOTE_CODE} without `trustRemoteCode: true` on its own inference workload "
        f"({owner or 'none'})"
        for where, args in command_lines(resource_type, props)
        if any(map(is_remote_code_flag, args))
    ]


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
