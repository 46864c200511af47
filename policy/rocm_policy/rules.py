"""The rules of the rocm-stack policy pack as plain functions over what the engine hands a policy.

Each resource rule takes (resource type token, input properties) and returns violation messages (empty:
compliant); the stack rules take the declared resources with their `protect` option or the stack's config.
Properties are read through the Mapping/Sequence interfaces only, so the engine's proxies (which raise
UnknownValueError for values unknown during preview) work as well as plain dicts in tests.
Field names are the provider's (camelCase): pulumi_docker 5.x Container/RemoteImage, Kubernetes API objects,
and the GPU Operator CRD `amd.com/v1alpha1` DeviceConfig (helm-charts-k8s/crds/deviceconfig-crd.yaml).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
CONTAINER = "docker:index/container:Container"
DEVICE_CONFIG = "kubernetes:amd.com/v1alpha1:DeviceConfig"
NAMESPACE = "kubernetes:core/v1:Namespace"
HELM_TYPES = ("kubernetes:helm.sh/v3:Release", "kubernetes:helm.sh/v4:Chart")
GPU_RESOURCE = "amd.com/gpu"
# Docker label on every GPU partition's container (a partition's shell or the workload running in it): host/container.
PARTITION_LABEL = "rocm-stack.partition"
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

_CREDENTIAL_WORDS = frozenset({"password", "passwd", "passphrase", "token", "credential", "credentials"})
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


def unpinned_reason(reference: str) -> str | None:
    """Why an image reference does not pin one image ("has no tag, ..."), or None. A digest or an image ID pins;
    `latest` in any case or spelling (`nightly-latest`, `LATEST`) never does. The stack config's check
    (schema/docker.py image_pin_problem) uses this rule too, so config and pack never disagree."""
    if reference.startswith("sha256:") or "@" in reference:
        return None  # an image ID or a digest names exactly one image
    repository = reference.rsplit("/", 1)[-1]  # a registry host may carry a port: registry:5000/rocm/x
    tag = repository.partition(":")[2]
    if not tag:
        return "has no tag, so it pulls ':latest'"
    if re.fullmatch(r"(.*[-_.])?latest", tag, re.IGNORECASE):
        return f"uses the moving tag '{tag}'"
    return None


def image_pin_problem(reference: str) -> str | None:
    """Why an image reference is not pinned, or None."""
    if not reference:
        return "no image reference"
    reason = unpinned_reason(reference)
    return f"image '{reference}' {reason}; pin a version tag or a digest" if reason else None


def pod_spec(resource_type: str, props: Mapping[str, Any]) -> Mapping[str, Any] | None:
    path = _POD_SPEC_PATHS.get(resource_type)
    return _mapping(_dig(props, path)) if path else None


def _containers(spec: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for field in ("initContainers", "containers"):
        yield from (_mapping(c) for c in _sequence(spec.get(field)))


def unpinned_images(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """RemoteImage `name`, Container `image` and every container image of a Kubernetes pod spec."""
    if resource_type == REMOTE_IMAGE:
        references = [("", props.get("name") or "")]
    elif resource_type == CONTAINER:
        references = [("", props.get("image") or "")]
    elif (spec := pod_spec(resource_type, props)) is not None:
        references = [(f"container '{c.get('name')}': ", c.get("image") or "") for c in _containers(spec)]
    else:
        return []
    return [where + problem for where, ref in references if (problem := image_pin_problem(ref))]


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
    for label in map(_mapping, _sequence(props.get("labels"))):
        if label.get("label") == PARTITION_LABEL:
            return str(label.get("value"))
    return None


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


# --- debugging privileges (prod) --------------------------------------------------------------------------


def _is_ptrace_or_all(capability: Any) -> bool:
    return str(capability).upper().removeprefix("CAP_") in ("SYS_PTRACE", "ALL")


def _gpu_limited(container: Mapping[str, Any]) -> bool:
    resources = _mapping(container.get("resources"))
    return any(GPU_RESOURCE in _mapping(resources.get(k)) for k in ("limits", "requests"))


def debug_privilege_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """SYS_PTRACE, privileged mode and an unconfined seccomp profile: debugging aids that prod never runs.

    Docker: every container. Kubernetes: the GPU workloads (containers asking for amd.com/gpu); the device
    plugin and node labeller DaemonSets are privileged by upstream design and ask for no GPU.
    """
    problems = []
    if resource_type == CONTAINER:
        if any(_is_ptrace_or_all(c) for c in _sequence(_mapping(props.get("capabilities")).get("adds"))):
            problems.append("adds capability SYS_PTRACE (or ALL): a debugging aid, not for prod")
        if props.get("privileged") is True:
            problems.append("runs privileged: every device and capability of the host; prod never does")
        for option in _sequence(props.get("securityOpts")):
            if str(option).lower().replace(":", "=", 1).replace(" ", "") == "seccomp=unconfined":
                problems.append("security option seccomp=unconfined: keep Docker's default seccomp profile in prod")
    elif (spec := pod_spec(resource_type, props)) is not None:
        pod_seccomp = _dig(spec, ("securityContext", "seccompProfile", "type"))
        for container in filter(_gpu_limited, _containers(spec)):
            where = f"GPU container '{container.get('name')}'"
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
    spec = pod_spec(resource_type, props)
    if spec is None:
        return []
    memory_volumes = {
        _mapping(v).get("name")
        for v in _sequence(spec.get("volumes"))
        if _dig(_mapping(v), ("emptyDir", "medium")) == "Memory"
    }
    problems = []
    for container in filter(_gpu_limited, _containers(spec)):
        where = f"GPU container '{container.get('name')}'"
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


def default_environment(stack: str) -> str:
    """The environment of a stack that sets no `rocm-stack:environment`: `prod` and `prod-*` are prod.

    The program's config loader and the pack's enforcement level both use this (one definition); a stack
    whose name merely starts with the letters (`product-demo`) is dev. `org/project/prod` counts as `prod`."""
    name = stack.rsplit("/", 1)[-1]
    return "prod" if name == "prod" or name.startswith("prod-") else "dev"


def _words(key: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(key)]


def is_credential_key(key: str) -> bool:
    """`registryPassword`, `huggingfaceToken`, `grafana.apiKey`: yes. `tokenizer`, `secretName`: no."""
    words = _words(key.rsplit(":", 1)[-1])
    return bool(words) and (
        words[-1] in _CREDENTIAL_WORDS or tuple(words[-2:]) in _CREDENTIAL_PAIRS or words == ["secret"]
    )


def _is_secure(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"secure"}


def plaintext_secrets(config: Mapping[str, Any], path: str = "") -> list[str]:
    """Config paths (`rocm-stack:registry.password`) holding a credential that is not a `secure:` value."""
    found = []
    items = config.items() if isinstance(config, Mapping) else enumerate(_sequence(config))
    for key, value in items:
        child = f"{path}[{key}]" if isinstance(key, int) else (f"{path}.{key}" if path else str(key))
        if _is_secure(value):
            continue
        if (
            isinstance(key, str)
            and is_credential_key(key)
            and value not in (None, "")
            and not isinstance(value, (Mapping, list))
        ):
            found.append(child)
        elif isinstance(value, (Mapping, list)):
            found.extend(plaintext_secrets(value, child))
    return found
