"""Docker GPU-host section of the stack config: hosts, their GPUs, images and containers.

Why one file: the Docker section's models and the placement of its partitions onto GPUs (render-node maps, the
placement lock) read each other throughout; the placement is the part to move out next.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import AfterValidator, BeforeValidator, ByteSize, Field, PrivateAttr, ValidationError, field_validator

from domain.gpus import (
    MAX_GPUS_PER_HOST,
    MODELS,
    ComputePartition,
    Gfx,
    MemoryPartition,
    ModelName,
    logical_per_gpu,
)

if TYPE_CHECKING:  # imported where used: `pulumi up` reads no topology module for a stack without one
    from domain.topology import Topology

from domain.render_nodes import CAPTURE, RenderNodesError, load_render_nodes, smi_renumbering
import rules
from rules.docker_hosts import (
    GPU_PARTITIONS_ISOLATED,
    NO_DEBUG_PRIVILEGES_IN_PROD,
    ONE_HOST_ENTRY_PER_MACHINE,
    PROD_HOST_ACCESS,
)
from rules.supply import PINNED_IMAGES
from rules import unpinned_reason
from .base import ConfigModel, by_environment, environment_default, shown_default
from .bounds import MAX_HOSTS, MAX_ITEMS, MAX_NUMA_NODES
from .stackfile import StackFileError, read_document
from .types import (
    AbsolutePath,
    CpuList,
    EnvName,
    EnvValue,
    GpuCount,
    GpuIndex,
    LogFileSize,
    MemoryLimit,
    Name,
    Port,
    ShmSize,
    StopGraceSeconds,
    WaitSeconds,
    cpus_of,
)


def _ip_address(value: str) -> str:
    # Docker parses the address of `-p IP:HOST:CONTAINER` with net.ParseIP and refuses anything else
    # (docker/go-connections nat/nat.go ParsePortSpec: "invalid IP address: %s"); names are not resolved.
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"expected an IP address such as 0.0.0.0, 127.0.0.1 or ::1 (got {value!r})") from None
    return value


IpAddress = Annotated[str, AfterValidator(_ip_address)]


def _numeric_gid(value: object) -> object:
    # Docker resolves a group *name* in the image's /etc/group, not the host's (moby daemon/oci_linux.go getUser ->
    # user.GetAdditionalGroupsPath): recent rocm/pytorch images have no `render` group, so `--group-add render`
    # stops the container ("Unable to find group render", ROCm/rocm-libraries PR #6563), and where an image has
    # one its GID rarely equals the host's. A numeric GID passes through as-is.
    if isinstance(value, str) and not value.strip().isdigit():
        raise ValueError(
            f"'{value}' is a group name, which Docker looks up in the image's /etc/group, not the host's; give the "
            "numeric GID that owns the device nodes on the host (`stat -c %g /dev/kfd /dev/dri/renderD*`)"
        )
    return value


# A host group ID for `--group-add` (moby/sys/user accepts 0 .. 2^31-1).
Gid = Annotated[int, BeforeValidator(_numeric_gid), Field(ge=0, le=2**31 - 1)]

# docker/distribution reference grammar, reduced to what pinning needs: repository[:tag][@digest].
_IMAGE_REF = re.compile(
    r"^(?P<repository>[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[a-f0-9]{64}))?$"
)

DEFAULT_IMAGES = {
    "pytorch": "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.8.0",
    "vllm": "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210",
}
# The ROCm release of each default image, which the host preflight checks the amdgpu driver against
# (programs/preflight.py DRIVER_ROCM). AMD's vLLM version history
# (rocm.docs.amd.com/en/latest/how-to/rocm-for-ai/inference/benchmark-docker/previous-versions/vllm-history.html):
# "rocm/vllm:rocm7.0.0_vllm_0.11.2_20251210 | ROCm 7.0.0 | vLLM 0.11.2 | PyTorch 2.9.0"; the rocm/pytorch tag
# names its release (AMD's ROCm 7.0.0 install tabs pull rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.8.0).
# Other images: the tag's `rocmX.Y`, or `rocm-stack:checks.imageRocm`.
DEFAULT_IMAGE_ROCM = {"pytorch": "7.0", "vllm": "7.0"}
# The authenticating proxy in front of every keyed vLLM server (components/workloads/proxy.py): nginx's stable branch,
# the official image (hub.docker.com/_/nginx, built from github.com/nginx/docker-nginx stable/alpine). The digest is
# the one public repositories pin for this tag (not read from the registry here: no network); refresh it with
# `docker buildx imagetools inspect nginx:1.28-alpine`.
PROXY_IMAGE = "nginx:1.28-alpine@sha256:a8b39bd9cf0f83869a2162827a0caf6137ddf759d50a171451b335cecc87d236"


def image_pin_problem(ref: str) -> str | None:
    """Why `ref` is not a reproducible pin, or None: it needs a digest or an explicit non-`latest` tag."""
    match = _IMAGE_REF.match(ref)
    if match is None:
        return f"'{ref}' is not a Docker image reference (repository[:tag][@sha256:digest])"
    reason = unpinned_reason(ref)
    if reason is None:
        return None
    return PINNED_IMAGES.refusal(
        f"'{ref}' is not pinned: it {reason}; use an explicit version tag or an @sha256 digest"
    )


def _always_pinned(value: str) -> str:
    problem = image_pin_problem(value)
    if problem:
        raise ValueError(problem)
    return value


# An image reference pinned in every environment (a version tag or a digest, image_pin_problem).
PinnedImage = Annotated[str, AfterValidator(_always_pinned)]


# An image for every GPU family, or one per LLVM target: AMD publishes separate vLLM images for gfx942 (MI300X/MI325X)
# and gfx950 (MI350X/MI355X), e.g. rocm/vllm:rocm7.12.0_gfx94X-dcgpu_... and rocm/vllm:rocm7.12.0_gfx950-dcgpu_...
# (rocm.docs.amd.com/en/7.12.0-preview/rocm-for-ai/vllm.html, "Pull the ROCm vLLM Docker image" per device).
ImageRef = str | dict[Gfx, str]


def image_refs(images: dict[str, ImageRef]) -> Iterable[tuple[str, str]]:
    """(key path under `images`, reference) of every reference: `vllm`, or `vllm.gfx950` for a per-family one."""
    for key, ref in images.items():
        if isinstance(ref, str):
            yield key, ref
        else:
            yield from ((f"{key}.{gfx}", one) for gfx, one in ref.items())


def host_gfx(host: HostConfig) -> str | None:
    """The host's GPU family (LLVM target); None for `other`."""
    return MODELS[host.gpu_model].gfx if host.gpu_model in MODELS else None


def image_for(images: dict[str, ImageRef], key: str, gfx: str | None) -> str | None:
    """The reference of image `key` for GPUs of family `gfx`: a plain reference for every family, else the
    family's own; None when the key has none for it (or the host's family is unknown)."""
    ref = images[key]
    if isinstance(ref, str):
        return ref
    return ref.get(gfx) if gfx is not None else None  # type: ignore[call-overload]


def host_images(host: HostConfig, images: dict[str, ImageRef]) -> dict[str, str]:
    """Every image key the host's GPU family has a reference for, resolved."""
    gfx = host_gfx(host)
    return {key: ref for key in images if (ref := image_for(images, key, gfx)) is not None}


def no_image_problem(host: HostConfig, key: str, images: dict[str, ImageRef]) -> str:
    families = ", ".join(sorted(images[key]))
    return (
        f"host '{host.name}' has {host.gpu_model} GPUs ({host_gfx(host) or 'no known family'}) but images.{key} "
        f"has references only for {families}; add images.{key}.{host_gfx(host) or '<gfx>'} or make "
        f"images.{key} one reference for every family"
    )


class GpuAccess(str, Enum):
    """How a container reaches its GPUs. ROCm's "GPU isolation techniques": environment variables "shouldn't be
    used for isolating untrusted applications, as an application can reset them"; the kernel (KFD) checks the
    device cgroup for each GPU's render node, so mapping only some render nodes is real isolation."""

    # /dev/kfd plus only the partition's /dev/dri/renderD<minor> nodes, from the host's saved render-node map.
    render_nodes = "renderNodes"
    # The AMD Container Toolkit's CDI devices `amd.com/gpu=<index>` (host prerequisite: `amd-ctk cdi generate`).
    cdi = "cdi"
    # /dev/kfd and all of /dev/dri, a visibility variable picks the GPUs: single-tenant workstations only.
    all = "all"


class DevicePaths(ConfigModel):
    """Where the host keeps its GPU device nodes; containers always see them at /dev/kfd and /dev/dri/.
    Only the end-to-end tests move them (stand-in nodes made with mknod in a temporary directory); prod refuses
    anything but /dev/kfd and /dev/dri (docs/security.md)."""

    kfd: AbsolutePath = "/dev/kfd"
    """Host path of the KFD compute interface."""
    dri: AbsolutePath = "/dev/dri"
    """Host directory of the render nodes."""


class SecurityProfile(str, Enum):
    """`debug` adds what rocgdb/rocprof need; `hardened` keeps Docker's default seccomp profile."""

    debug = "debug"
    hardened = "hardened"

    @property
    def capabilities(self) -> list[str]:
        """What its GPU containers add (`--cap-add`). debug: what rocgdb / rocprof need to attach to processes.
        hardened: Docker's default seccomp profile only allows mbind/set_mempolicy (used by ROCm's NUMA-aware
        allocator) with CAP_SYS_NICE."""
        return ["SYS_PTRACE"] if self is SecurityProfile.debug else ["SYS_NICE"]

    @property
    def security_opts(self) -> list[str]:
        """Its `--security-opt`s."""
        return ["seccomp=unconfined"] if self is SecurityProfile.debug else ["no-new-privileges:true"]


class SecurityConfig(ConfigModel):
    profile: SecurityProfile | None = Field(
        None, json_schema_extra=by_environment(SecurityProfile.debug, SecurityProfile.hardened)
    )
    """The GPU containers' privileges (docs/security.md)."""
    allow_debug_in_prod: bool = False
    """Prod refuses `profile: debug` unless this is `true`."""


class DockerEndpoint(ConfigModel):
    host: str = "unix:///var/run/docker.sock"
    """The Docker daemon: `unix:///...`, `ssh://user@host[:port]` or `tcp://host:port`."""
    ssh_opts: Annotated[list[str], Field(max_length=MAX_ITEMS)] = []
    """Extra `ssh` options, e.g. `["-o", "StrictHostKeyChecking=yes"]`."""
    pull_timeout_seconds: WaitSeconds = 3600
    """How long pulling one image onto this host may take before `pulumi up` fails it (plus a 300 s margin: the
    image's create timeout, docs/workloads.md "Deadlines"). ROCm images are tens of GB: an hour pulls ~20 GB at
    50 Mbit/s."""

    @field_validator("host")
    @classmethod
    def _known_scheme(cls, value: str) -> str:
        expected = "expected unix:///path/to/docker.sock, ssh://user@host[:port] or tcp://host:port"
        if re.fullmatch(r"unix:///\S+", value):
            # unix(7): sun_path holds 108 bytes with the terminating NUL; connect(2) refuses a longer path.
            if len(value.removeprefix("unix://").encode()) > 107:
                raise ValueError(
                    f"the socket path of {value!r} is longer than the 107 bytes a Unix socket address holds "
                    "(unix(7) sun_path): link the socket from a shorter path"
                )
            return value
        if not re.fullmatch(r"(ssh|tcp)://\S+", value):
            raise ValueError(f"{expected} (got {value!r})")
        # The Docker CLI splits ssh:// and tcp:// hosts with Go's net/url (docker/cli cli/connhelper/ssh/ssh.go
        # ParseURL: u.Hostname(), u.Port()), which takes everything after the last ':' for the port: an IPv6
        # address needs brackets, as in any URL (RFC 3986 section 3.2.2).
        parts = urlsplit(value)
        host_port = parts.netloc.rpartition("@")[2]
        if host_port.count(":") > 1 and not host_port.startswith("["):
            user = parts.netloc.rpartition("@")[0] + "@" if "@" in parts.netloc else ""
            raise ValueError(
                f"an IPv6 address goes in brackets: {parts.scheme}://{user}[{host_port}] "
                f"(with a port: {parts.scheme}://{user}[{host_port}]:22)"
            )
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"the port of {value!r} must be a number from 1 to 65535") from None
        if port == 0 or not parts.hostname or parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError(f"{expected} (got {value!r}); the port is a number from 1 to 65535")
        if parts.scheme == "tcp" and port is None:
            raise ValueError(f"tcp:// needs a port, e.g. tcp://{parts.hostname}:2376")
        return value


class PortMapping(ConfigModel):
    internal: Port
    external: Port | None = None
    ip: IpAddress = "0.0.0.0"


class VolumeMount(ConfigModel):
    host_path: AbsolutePath
    container_path: AbsolutePath
    read_only: bool = False


# What a partition without a workload or `command` runs: it stays up until stopped. The images' own default command is a shell
# (ROCm/pytorch .ci/docker/ubuntu-rocm/Dockerfile: `CMD ["bash"]`, its last line; ROCm/ROCm-docker
# framework/PyTorch/Dockerfile: `CMD ["/bin/bash"]`), which reads EOF at once from the closed stdin of a container
# created without `-it` and exits 0: Docker restarts it in a loop (`unless-stopped`), and the provider's refresh sees a
# stopped `must_run` container and plans an update on every `pulumi up` (kreuzwerker/terraform-provider-docker
# v4.5.0 internal/provider/resource_docker_container_funcs.go L812-822). GNU coreutils' sleep takes `infinity`
# (coreutils manual, "sleep invocation"); tests/e2e/test_e2e_shell.py runs both on a real daemon.
SHELL_COMMAND = ("sleep", "infinity")


class ContainerConfig(ConfigModel):
    name: Name
    """DNS label, unique on the host; names the container and its resources (docs/configuration.md, "Stable
    names")."""
    image: str = "pytorch"
    """A key of `images`; the host takes the reference of its GPU family."""
    # Explicit GPU indices on the host (logical GPUs in a partition mode). Each index is checked against the host's
    # own GPUs (problems), which says how many it has.
    gpus: Annotated[list[Annotated[int, Field(ge=0)]], Field(max_length=MAX_GPUS_PER_HOST)] | None = Field(
        None, json_schema_extra=shown_default("every GPU of the host")
    )
    """GPU indices of this partition; indices must be in range and not overlap."""
    gpu_count: GpuCount | None = None
    """Instead of `gpus`: a partition size, placed by the host's topology (all containers of a host use `gpus` or all
    use `gpuCount`; docs/configuration.md, "Placement lock")."""
    cpuset: CpuList | None = Field(None, json_schema_extra=shown_default("the NUMA node's CPUs (`numaCpus`)"))
    """`--cpuset-cpus` of the container."""
    command: Annotated[list[str], Field(max_length=MAX_ITEMS)] = Field(
        [], json_schema_extra=shown_default("`sleep infinity`")
    )
    """The partition's command and arguments when no workload runs on it. Unset: `sleep infinity`, so that the shell
    stays up for `docker exec` (the images' own command is an interactive shell, which exits at once without a
    terminal)."""
    env: Annotated[dict[EnvName, EnvValue], Field(max_length=MAX_ITEMS)] = {}
    """Environment variables (GPU visibility variables are set by rocm-stack and refused here)."""
    # RCCL and PyTorch DataLoader workers exchange tensors through /dev/shm; Docker's 64 MiB default is far too small.
    # The Docker provider takes whole MiB; less would silently become Docker's 64 MiB default.
    shm_size: ShmSize = ByteSize(16 * 1024**3)
    """`--shm-size` (`64GiB`, `512MiB`, at least `1MiB`): the partition's own /dev/shm; with `ipc: host` Docker mounts
    the host's /dev/shm instead and ignores it."""
    ports: Annotated[list[PortMapping], Field(max_length=MAX_ITEMS)] = []
    """Published ports: `{internal, external, ip}`."""
    volumes: Annotated[list[VolumeMount], Field(max_length=MAX_ITEMS)] = []
    """Bind mounts: `{hostPath, containerPath, readOnly}` (absolute paths)."""
    restart: Literal["no", "on-failure", "always", "unless-stopped"] = "unless-stopped"
    """Docker's restart policy."""
    ipc: Literal["private", "host"] | None = Field(
        None, json_schema_extra=shown_default("`host` for a host's only container, else `private`")
    )
    """The partition's IPC namespace: `private` (its own /dev/shm of `shmSize`, which no other container sees) or
    `host` (the host's /dev/shm, shared with every host-IPC container; `shmSize` is ignored). Unset: `host` when the
    container is alone on its host, `private` beside other partitions; prod refuses `host` there."""
    memory: MemoryLimit | None = None
    """Memory limit of the partition's container and its GPU check, with no swap on top; beyond it the kernel's OOM
    killer ends a process of the partition. Its /dev/shm pages count against it. Unset: no limit."""
    stop_grace_seconds: StopGraceSeconds = 30
    """Seconds from SIGTERM to SIGKILL when the container stops: `docker stop`, a Docker daemon shutdown and the
    delete before a `pulumi up` replaces it all wait this long (docs/workloads.md, "Stopping and replacing").
    A partition running a workload takes the workload's (`training[].docker.stopGraceSeconds`,
    `inference[].docker.stopGraceSeconds`)."""


class LogConfig(ConfigModel):
    """Docker's json-file log of each container on the host, rotated: Docker's default keeps one file without
    any size limit (docs.docker.com/engine/logging/drivers/json-file: max-size "Defaults to -1 (unlimited)")."""

    max_size: LogFileSize = ByteSize(100 * 1024**2)
    """Size at which a container's log file is rotated (whole MiB)."""
    max_file: int = Field(5, ge=1, le=MAX_ITEMS)
    """Log files kept per container, the current one included: at most `maxSize` x `maxFile` per container."""

    @property
    def opts(self) -> dict[str, str]:
        """`--log-opt`s as the daemon stores them (HostConfig.LogConfig.Config, strings as given; the provider reads
        the map back as is)."""
        return {"max-file": str(self.max_file), "max-size": f"{self.max_size // 1024**2}m"}


class HostConfig(ConfigModel):
    # Set by `place_partitions`, never from the stack file: the proven gap of the placement it made (for the lock).
    _placement_gap: float | None = PrivateAttr(default=None)

    @property
    def placement_gap(self) -> float | None:
        return self._placement_gap

    name: Name
    """DNS label; names every resource of the host (docs/configuration.md, "Stable names")."""
    docker: DockerEndpoint = DockerEndpoint()
    """How the program reaches the host's Docker daemon."""
    gpus: GpuCount = 1
    """Physical GPUs of the host. With a `computePartition` the host shows more logical GPUs (`gpus` x 2, 4 or
    one per XCD), which container `gpus`, `gpuCount`, the topology file and the render-node map count in."""
    gpu_model: ModelName | Literal["other"] = "MI300X"
    """The board (domain/gpus.py): its GPU family picks per-family images, alert defaults and GPU check floors;
    `other` is a GPU the stack has no figures for."""
    compute_partition: ComputePartition | None = None
    """The compute partition mode the host's GPUs are set to (`amd-smi set -C`): SPX, DPX, QPX or CPX, 1, 2, 4 or
    one logical GPU per XCD (8 on MI300X/MI325X/MI350X/MI355X, 4 on MI308X) per physical GPU. Unset: SPX."""
    memory_partition: MemoryPartition | None = None
    """The memory partition mode (`amd-smi set -M`): NPS1, NPS2 or NPS4, validated with `computePartition`
    against what the `gpuModel` supports. Unset: NPS1."""
    topology: str | None = None
    """A saved `rocm-smi --showtopo` / `amd-smi topology [--json]` file (path from the project directory) used to
    place `gpuCount` partitions."""
    numa_cpus: Annotated[
        dict[Annotated[int, Field(ge=0, lt=MAX_NUMA_NODES)], CpuList], Field(max_length=MAX_NUMA_NODES)
    ] = {}
    """CPU list per NUMA node, e.g. `{0: "0-95,192-287", 1: "96-191,288-383"}` (from `lscpu`; rocm-smi does not print
    them); with a topology, a partition on one NUMA node gets `--cpuset-cpus` of that node."""
    gpu_access: GpuAccess = Field(
        GpuAccess.all, json_schema_extra=by_environment(GpuAccess.all, GpuAccess.render_nodes)
    )
    """How containers reach their GPUs: `renderNodes` (/dev/kfd and only the partition's render nodes), `cdi`
    (the AMD Container Toolkit's `amd.com/gpu=<index>`: GPU indices are then the toolkit's, `amd-ctk cdi list`,
    and a `topology` file is refused; Docker >= 25 with CDI on) or `all` (all of /dev/dri, a visibility variable
    picks the GPUs). Unset: `renderNodes` in prod, `all` in dev."""
    render_nodes: str | None = None
    """The host's saved GPU -> render-node map (`amd-smi list -e --json` or the KFD topology's `drm_render_minor`;
    hosts/README.md), relative to the project directory, keyed by the index HIP uses. Required by `renderNodes`: a
    render minor is not 128 + index."""
    device_groups: Annotated[list[Gid], Field(max_length=MAX_ITEMS)] = []
    """Numeric host GIDs for `--group-add` (`stat -c %g /dev/kfd /dev/dri/renderD*`). Empty: none, as the ROCm
    images run as root; group names are refused (Docker looks them up in the image's /etc/group)."""
    device_paths: DevicePaths = DevicePaths()
    """Where the host keeps /dev/kfd and /dev/dri; only tests move them (stand-in nodes): prod refuses it."""
    logs: LogConfig = LogConfig()
    """Log rotation of every container rocm-stack runs on the host (partitions, workloads, checks, the exporter)."""
    # At least one: omit the key for the default container (a host without any would run nothing of ours).
    containers: Annotated[list[ContainerConfig], Field(min_length=1, max_length=MAX_ITEMS)] = [
        ContainerConfig(name="rocm-dev")
    ]
    """The host's GPU partitions."""

    @property
    def per_gpu(self) -> int:
        """Logical GPUs per physical GPU in the host's compute mode."""
        return logical_per_gpu(self.gpu_model, self.compute_partition)

    @property
    def logical_gpus(self) -> int:
        """The GPUs the host shows (what indices, gpuCount, the topology file and render-node map count)."""
        return self.gpus * self.per_gpu


# What selects GPUs by environment (HIP, the ROCr runtime below it, and CUDA_VISIBLE_DEVICES, which vLLM on ROCm
# reads): rocm-stack sets them from `gpus`/`gpuCount` and `gpuAccess`, nobody else.
VISIBILITY_VARIABLES = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")
# The container side of the device nodes, whatever the host paths (DevicePaths).
KFD, DRI = "/dev/kfd", "/dev/dri"
# The CDI device kind the AMD Container Toolkit generates (`amd-ctk cdi generate`: amd.com/gpu=<index>).
CDI_GPU_KIND = "amd.com/gpu"


@dataclass(frozen=True)
class GpuDevices:
    """How one container reaches its GPUs: one definition for GpuHost, workload containers and the config checks."""

    # (host path, container path) of each device node mapped.
    devices: tuple[tuple[str, str], ...]
    # CDI device names (`amd.com/gpu=<index>`) for a `cdi` device request.
    cdi_devices: tuple[str, ...] = ()
    # Host GPU indices a visibility variable has to select, or None: the container sees exactly its own GPUs,
    # numbered 0..N-1 (device-level isolation, or all GPUs of the host), so no variable is set.
    visible: tuple[int, ...] | None = None


def partition_gpus(host: HostConfig, container: ContainerConfig) -> list[int]:
    """The host GPU indices of a placed container (every GPU when it names none)."""
    return list(container.gpus) if container.gpus is not None else list(range(host.logical_gpus))


def gpu_devices(host: HostConfig, container: ContainerConfig) -> GpuDevices:
    """The device access of a placed container under its host's `gpuAccess`."""
    gpus = partition_gpus(host, container)
    kfd = (host.device_paths.kfd, KFD)
    if host.gpu_access is GpuAccess.cdi:
        # The toolkit's spec maps /dev/kfd and the GPU's render node itself.
        return GpuDevices((), tuple(f"{CDI_GPU_KIND}={g}" for g in gpus))
    if host.gpu_access is GpuAccess.render_nodes:
        assert host.render_nodes is not None, "problems() requires renderNodes with gpuAccess renderNodes"
        minors = load_render_nodes(host.render_nodes)
        nodes = [f"renderD{minor}" for g in gpus for minor in minors[g]]
        return GpuDevices((kfd, *((f"{host.device_paths.dri}/{n}", f"{DRI}/{n}") for n in nodes)))
    every_gpu = sorted(gpus) == list(range(host.logical_gpus))
    return GpuDevices((kfd, (host.device_paths.dri, DRI)), visible=None if every_gpu else tuple(gpus))


def with_ipc_decided(host: HostConfig) -> HostConfig:
    """The whole host (before workloads claim partitions) with every container's `ipc` decided: the host's namespace
    for a host's only container (PyTorch's Docker guidance gives `--ipc=host` or `--shm-size`; a workstation keeps
    what it ran before) and a private one beside other partitions."""
    default = "host" if len(host.containers) == 1 else "private"
    containers = [c if c.ipc is not None else c.model_copy(update={"ipc": default}) for c in host.containers]
    return host.model_copy(update={"containers": containers})


def with_default_gpu_access(data: object) -> object:
    """Raw stack config with each host's gpuAccess defaulted by environment: prod isolates partitions by device
    (renderNodes), dev keeps a workstation simple (all)."""
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list):
        return data
    environment = "prod" if data.get("environment") == "prod" else "dev"
    default = environment_default(HostConfig, "gpu_access", environment).value
    hosts = [
        {"gpuAccess": default, **h} if isinstance(h, dict) and not {"gpuAccess", "gpu_access"} & set(h) else h
        for h in data["hosts"]
    ]
    return {**data, "hosts": hosts}


def _duplicates(names: Iterable[str]) -> set[str]:
    return {name for name, count in Counter(names).items() if count > 1}


def _cpu_ranges(cpus: set[int]) -> str:
    ranges: list[list[int]] = []
    for cpu in sorted(cpus):
        if ranges and ranges[-1][1] == cpu - 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def ssh_password_problem(endpoint: str) -> str | None:
    """Why the Docker provider cannot use an ssh:// endpoint with a password: docker/cli v28.5.2 (the provider's:
    terraform-provider-docker v4.5.0 go.mod) cli/connhelper/ssh/ssh.go L52-55 refuses it ("plain-text password is not
    supported"), in every environment."""
    parts = urlsplit(endpoint)
    if parts.scheme != "ssh" or parts.password is None:
        return None
    host = parts.netloc.rpartition("@")[2]
    return (
        "a password in the URL is refused by Docker's ssh helper ('plain-text password is not supported'): write "
        f"ssh://{parts.username}@{host} and log in with your SSH agent or a key (sshOpts: [-i, KEY])"
    )


def problems(
    hosts: list[HostConfig], images: dict[str, ImageRef], environment: str, security: SecurityConfig
) -> Iterable[tuple[str, str]]:
    """Cross-field checks of the Docker section; yields (key path, what is expected)."""
    for name in sorted(_duplicates(h.name for h in hosts)):
        yield "hosts", f"host name '{name}' is used twice; host names must be unique"
    for index, host in enumerate(hosts):
        if (problem := ssh_password_problem(host.docker.host)) is not None:
            yield f"hosts[{index}].docker.host", problem
    for key, ref in image_refs(images):
        problem = image_pin_problem(ref)
        if problem and (environment == "prod" or "not a Docker image reference" in problem):
            yield f"images.{key}", problem
    if environment == "prod" and security.profile is not None and not security.allow_debug_in_prod:
        profile = security.profile
        for why in rules.docker_debug_privileges(profile.capabilities, profile.security_opts, privileged=False):
            yield (
                "security.profile",
                NO_DEBUG_PRIVILEGES_IN_PROD.refusal(
                    f"the {profile.value} profile {why}; use 'hardened' or set security.allowDebugInProd: true to "
                    "accept the risk"
                ),
            )
    if environment == "prod":
        yield from _host_access_problems(hosts)
    for h_index, host in enumerate(hosts):
        at = f"hosts[{h_index}]"
        yield from _partition_mode_problems(host, at)
        for name in sorted(_duplicates(c.name for c in host.containers)):
            yield f"{at}.containers", f"container name '{name}' is used twice on host '{host.name}'"
        owner: dict[int, str] = {}
        for c_index, container in enumerate(host.containers):
            c_at = f"{at}.containers[{c_index}]"
            if container.image not in images:
                yield f"{c_at}.image", f"unknown image '{container.image}'; expected one of {sorted(images)}"
            elif image_for(images, container.image, host_gfx(host)) is None:
                yield f"{c_at}.image", no_image_problem(host, container.image, images)
            if container.gpus is not None and container.gpu_count is not None:
                yield f"{c_at}.gpuCount", "set either `gpus` (explicit indices) or `gpuCount` (a size), not both"
            if container.gpus is None:
                continue
            if not container.gpus:
                yield f"{c_at}.gpus", "an empty GPU list; omit the key to give the container every GPU"
            for g_index, gpu in enumerate(container.gpus):
                if gpu >= host.logical_gpus:
                    yield (
                        f"{c_at}.gpus[{g_index}]",
                        (
                            f"GPU {gpu} is out of range: host '{host.name}' has {_gpus_phrase(host)} "
                            f"(0..{host.logical_gpus - 1})"
                        ),
                    )
                elif gpu in owner:
                    yield (
                        f"{c_at}.gpus[{g_index}]",
                        (f"GPU {gpu} is already given to container '{owner[gpu]}'; partitions must not overlap"),
                    )
                else:
                    owner[gpu] = container.name
        sized = [c for c in host.containers if c.gpu_count is not None]
        if sized and len(sized) != len(host.containers):
            yield (
                f"{at}.containers",
                ("give every container of a host a `gpuCount`, or none: sizes are placed on the whole host"),
            )
        elif len(host.containers) > 1 and any(c.gpus is None and c.gpu_count is None for c in host.containers):
            yield (
                f"{at}.containers",
                (
                    "when a host has several containers each must list its `gpus` or `gpuCount`, "
                    "otherwise they would all share every GPU"
                ),
            )
        if sum(c.gpu_count or 0 for c in sized) > host.logical_gpus:
            yield (
                f"{at}.containers",
                (
                    f"the gpuCount sizes {[c.gpu_count for c in sized]} need {sum(c.gpu_count or 0 for c in sized)} "
                    f"GPUs but host '{host.name}' has "
                    f"{host.gpus if host.compute_partition is None else _gpus_phrase(host)}"
                ),
            )
        for c_index, container in enumerate(host.containers):
            size = container.gpu_count
            if size is not None and host.per_gpu > 1 and size > host.per_gpu and size % host.per_gpu:
                # Placement takes whole physical GPUs for a partition larger than one (docs/topology.md).
                yield (
                    f"{at}.containers[{c_index}].gpuCount",
                    (
                        f"{size} logical GPUs would split a physical GPU: in {host.compute_partition} one {host.gpu_model} "
                        f"shows {host.per_gpu}; use at most {host.per_gpu} (one physical GPU) or a multiple of "
                        f"{host.per_gpu} (whole physical GPUs)"
                    ),
                )
        for node in host.numa_cpus:
            if node < 0:
                yield f"{at}.numaCpus", f"NUMA node {node} is not a node number (0, 1, ...)"
        if host.numa_cpus and host.topology is None:
            # place_partitions finds each partition's NUMA node in the topology file; without one numaCpus
            # would be silently ignored.
            yield (
                f"{at}.numaCpus",
                (
                    "is used with `topology` (the saved file that says which NUMA node each GPU is "
                    "on); add `topology` or remove numaCpus"
                ),
            )
        if host.gpu_access is GpuAccess.cdi and host.topology is not None:
            # The toolkit numbers GPUs by PCI address (container-toolkit internal/amdgpu/amdgpu.go GetAMDGPUsWithFS:
            # the sorted glob of /sys/module/amdgpu/drivers/pci:amdgpu/*, a GPU's partitions by render minor);
            # amd-smi numbers them in its own discovery order, which differs from HIP's on some hosts (ROCm/
            # rocm-systems PR #4406). Nothing here checks that the topology file's GPU i is amd.com/gpu=i.
            yield (
                f"{at}.topology",
                (
                    "gpuAccess cdi selects GPUs by the AMD Container Toolkit's index (`amd-ctk cdi list`, PCI "
                    "address order), which is not checked to be the topology file's GPU index; remove `topology` "
                    "(and numaCpus) and give each partition `gpus` from `amd-ctk cdi list`, or use gpuAccess "
                    "renderNodes to place by topology"
                ),
            )
        host_cpus = set().union(*map(cpus_of, host.numa_cpus.values())) if host.numa_cpus else set()
        for c_index, container in enumerate(host.containers):
            missing = sorted(cpus_of(container.cpuset) - host_cpus) if container.cpuset and host_cpus else []
            if missing:
                # The daemon refuses a cpuset outside the host's CPUs when it creates the container
                # (moby daemon/daemon_unix.go verifyPlatformContainerResources: "Requested CPUs are not available").
                yield (
                    f"{at}.containers[{c_index}].cpuset",
                    (
                        f"CPU {missing[0]} is not a CPU of host '{host.name}' (its numaCpus list {_cpu_ranges(host_cpus)})"
                    ),
                )
        for c_index, container in enumerate(host.containers):
            for name in sorted(set(container.env) & set(VISIBILITY_VARIABLES)):
                yield (
                    f"{at}.containers[{c_index}].env.{name}",
                    (
                        "GPU visibility is set by rocm-stack from gpus/gpuCount and the host's gpuAccess (with "
                        "device-level isolation the container sees its GPUs as 0..N-1); remove it here"
                    ),
                )
        yield from _render_node_problems(host, at)


def _host_access_problems(hosts: list[HostConfig]) -> Iterable[tuple[str, str]]:
    """What prod's containers may reach of their hosts: the policy pack's rules (rules/containers.py), here
    on what the config asks for, there on what the program declares."""
    index = {h.name: i for i, h in enumerate(hosts)}
    for name, message in rules.duplicate_endpoint_problems({h.name: h.docker.host for h in hosts}):
        yield f"hosts[{index[name]}].docker.host", ONE_HOST_ENTRY_PER_MACHINE.refusal(message)
    for path, message in _access_problems(hosts):
        yield path, PROD_HOST_ACCESS.refusal(message)


def _access_problems(hosts: list[HostConfig]) -> Iterable[tuple[str, str]]:
    """prod-host-access on what each host's entry asks for: its endpoint, device paths, mounts and ports."""
    for h_index, host in enumerate(hosts):
        at = f"hosts[{h_index}]"
        for message in rules.docker_endpoint_problems(host.docker.host):
            yield f"{at}.docker.host", message
        if ssh_problem := rules.ssh_options_problem(host.docker.ssh_opts):
            yield f"{at}.docker.sshOpts", ssh_problem
        # The host side of every device node a container gets (gpu_devices): the KFD, and /dev/dri or its nodes.
        for key, host_path, inside in (("kfd", host.device_paths.kfd, KFD), ("dri", host.device_paths.dri, DRI)):
            if problem := rules.device_problem(host_path, inside):
                yield f"{at}.devicePaths.{key}", f"{problem}; remove devicePaths"
        for c_index, container in enumerate(host.containers):
            c_at = f"{at}.containers[{c_index}]"
            for v_index, volume in enumerate(container.volumes):
                if problem := rules.host_mount_problem(volume.host_path, volume.read_only):
                    yield f"{c_at}.volumes[{v_index}].hostPath", problem
            for p_index, port in enumerate(container.ports):
                if problem := rules.published_port_problem(port.internal, port.external):
                    yield f"{c_at}.ports[{p_index}]", problem


def _gpus_phrase(host: HostConfig) -> str:
    """How many GPUs the host shows, in words: "8 GPUs", or "64 logical GPUs (8 MI300X in CPX)"."""
    if host.compute_partition is None:
        return f"{host.gpus} GPUs"
    return f"{host.logical_gpus} logical GPUs ({host.gpus} {host.gpu_model} in {host.compute_partition})"


def recapture_hint(host: HostConfig) -> str:
    """How to save the host's topology and render-node map again, in its partition mode."""
    mode = (
        ""
        if host.compute_partition is None
        else (
            f"after setting the mode (`sudo amd-smi set -C {host.compute_partition}`"
            + (f"; `sudo amd-smi set -M {host.memory_partition}` and a driver reload" if host.memory_partition else "")
            + ") "
        )
    )
    return (
        f"capture both on host '{host.name}' {mode}with `amd-smi topology --json > "
        f"{host.topology or 'hosts/<host>.topology.json'}` and `amd-smi list -e --json > "
        f"{host.render_nodes or 'hosts/<host>.render-nodes.json'}` (one entry per logical GPU)"
    )


def _partition_mode_problems(host: HostConfig, at: str) -> Iterable[tuple[str, str]]:
    """The host's compute/memory partition modes against its model's (domain/gpus.py, each mode with its source)."""
    if host.compute_partition is None and host.memory_partition is None:
        return
    key = f"{at}.computePartition" if host.compute_partition is not None else f"{at}.memoryPartition"
    model = MODELS.get(host.gpu_model)
    if model is None or not model.modes:
        what = (
            "gpuModel 'other' has no known partition modes; set gpuModel to the host's model"
            if model is None
            else f"{host.gpu_model} GPUs have no partition modes (MI3xx only)"
        )
        yield key, f"{what}, or remove computePartition and memoryPartition"
        return
    compute, memory = host.compute_partition or "SPX", host.memory_partition or "NPS1"
    if model.mode(host.compute_partition, host.memory_partition) is None:
        yield (
            key,
            (
                f"{compute} with {memory} is not a partition mode of {model.name} (memory partitions cannot "
                f"outnumber compute partitions, and each model supports its own pairs); supported "
                f"compute/memory pairs: {', '.join(map(str, model.modes))}"
            ),
        )
    elif host.logical_gpus > MAX_GPUS_PER_HOST:
        yield (
            key,
            (
                f"{host.gpus} GPUs in {compute} show {host.logical_gpus} logical GPUs; a host shows at most "
                f"{MAX_GPUS_PER_HOST}: lower gpus or use a mode with fewer partitions"
            ),
        )


def _render_node_problems(host: HostConfig, at: str) -> Iterable[tuple[str, str]]:
    if host.render_nodes is None:
        if host.gpu_access is GpuAccess.render_nodes:
            yield (
                f"{at}.renderNodes",
                (
                    f"gpuAccess renderNodes needs host '{host.name}''s GPU -> render-node map (the render minor is "
                    f"not 128 + index): save {CAPTURE} from the host under hosts/ and set renderNodes to that file; "
                    "or set gpuAccess: all on a single-tenant host"
                ),
            )
        return
    try:
        minors = load_render_nodes(host.render_nodes)
    except RenderNodesError as error:
        yield f"{at}.renderNodes", str(error)
        return
    if len(minors) != host.logical_gpus and (host.compute_partition is not None or len(minors) > host.logical_gpus):
        # Each logical GPU is its own render node (AMD SMI docs, rocm-systems projects/amdsmi/docs/conceptual/
        # partition.md "Device enumeration"): a map saved in another partition mode lists another number of GPUs.
        yield (
            f"{at}.renderNodes",
            (
                f"{host.render_nodes} lists {len(minors)} GPUs but host '{host.name}' shows {_gpus_phrase(host)}: it was "
                f"saved in another partition mode (or on another host); the topology {host.topology or '(none)'} must "
                f"match the mode too: {recapture_hint(host)}"
            ),
        )
        return
    renumbered = smi_renumbering(host.render_nodes)
    if renumbered and host.topology is not None:
        # The topology file's GPU ids are amd-smi's (or rocm-smi's) order; the partitions get HIP's GPUs.
        pairs = ", ".join(f"amd-smi GPU {gpu} is HIP GPU {hip}" for gpu, hip in sorted(renumbered.items()))
        yield (
            f"{at}.topology",
            (
                f"{host.render_nodes} shows amd-smi numbering host '{host.name}''s GPUs unlike HIP ({pairs}), and "
                f"the topology {host.topology} is in amd-smi's order, so placement would weigh other GPUs than the "
                "partitions get; remove `topology` (and numaCpus) and give each partition `gpus` by `hip_id`"
            ),
        )
    missing = sorted(set(range(host.logical_gpus)) - set(minors))
    if missing:
        yield (
            f"{at}.renderNodes",
            (
                f"the file has no render node for GPU(s) {missing} of host '{host.name}' "
                f"({_gpus_phrase(host)}); save it again on the host"
            ),
        )
    owners: dict[int, int] = {}
    for gpu, node_minors in sorted(minors.items()):
        for minor in node_minors:
            if minor in owners:
                yield (
                    f"{at}.renderNodes",
                    (
                        f"renderD{minor} is listed for GPU {owners[minor]} and GPU {gpu}; "
                        "render-node sets of GPUs are disjoint on a real host"
                    ),
                )
            owners.setdefault(minor, gpu)


def isolation_problems(host: HostConfig, at: str, environment: str) -> list[tuple[str, str]]:
    """The placed host's partitions against the pack's isolation rules (rules/containers.py, GPUs and IPC):
    the same functions judge the config here and the declared containers in the policy pack."""
    reach = {}
    for container in host.containers:
        devices = gpu_devices(host, container)
        reach[container.name] = rules.GpuReach.of(
            [host_path for host_path, _ in devices.devices],
            [container_path for _, container_path in devices.devices],
            devices.cdi_devices,
        )
    index = {c.name: i for i, c in enumerate(host.containers)}
    found = [(f"{at}.gpuAccess", message) for message in rules.isolation_problems(reach, prod=environment == "prod")]
    found += [
        (f"{at}.containers[{index[name]}].ipc", message)
        for name, message in rules.ipc_problems({c.name: c.ipc for c in host.containers}, environment == "prod")
    ]
    return [(path, GPU_PARTITIONS_ISOLATED.refusal(message)) for path, message in found]


# ---------------------------------------------------------------------------------------- placement lock
# `gpuCount` partitions are placed by the program, so a change elsewhere on the host (a partition added, a container
# renamed) could move them, and `pulumi up` would replace running containers onto other GPUs (issue 11, item 4).
# The lock pins each placed partition, like a package lockfile: `make lock STACK=<stack>` writes it, it is committed
# and reviewed, and the program places locked partitions exactly there and new ones only on free GPUs.
# `stacks/placement.<stack>.yaml`, not `Pulumi.<stack>.lock.yaml`: Pulumi would read that name as the config of a
# stack called `<stack>.lock` (stack names may contain dots; stackConfigDir is stacks/).


# The proven gap (Placement.gap) a prod placement may have at most: beyond it the lock must pin the GPUs by hand.
PROD_PLACEMENT_GAP = 0.02


def lock_file(stack: str) -> str:
    """The placement lock of a stack, relative to the project directory."""
    return f"stacks/placement.{stack}.yaml"


def lock_command(stack: str, relock: str | None = None) -> str:
    return f"make lock STACK={stack}" + (f" RELOCK={relock}" if relock else "")


class HostLock(ConfigModel):
    """What the partitions of one host were placed on (the basis), and their GPUs."""

    gpus: GpuCount
    # The compute partition mode the partitions were placed in (none: unpartitioned): a GPU index means another GPU
    # in another mode.
    compute_partition: ComputePartition | None = None
    # sha256 of the parsed topology (format-independent): a re-captured or changed topology invalidates the lock.
    topology: str | None = None
    # The proven gap of the placement that chose GPUs on this host when it was last locked (0: optimal; see
    # domain/topology.py Placement.gap). Absent in locks written before it was recorded: read as before.
    gap: Annotated[float, Field(ge=0, le=1)] | None = None
    partitions: Annotated[
        dict[str, Annotated[list[GpuIndex], Field(max_length=MAX_GPUS_PER_HOST)]], Field(max_length=MAX_ITEMS)
    ] = {}


class PlacementLock(ConfigModel):
    hosts: Annotated[dict[str, HostLock], Field(max_length=MAX_HOSTS)] = {}


def read_lock(stack: str, project_dir: Path = Path(".")) -> tuple[PlacementLock, list[tuple[str, str]]]:
    """The stack's lock (empty when the file does not exist) and the problems reading it."""
    path = project_dir / lock_file(stack)
    if not path.is_file():
        return PlacementLock(), []
    try:
        # Read as the stack file is, under yaml.v3's alias limit: the lock is committed text a change may alter too.
        data = read_document(path.read_text(), lock_file(stack)) or {}
        return PlacementLock.model_validate(data), []
    except (StackFileError, ValidationError) as error:
        detail = (
            str(error)
            if isinstance(error, StackFileError)
            else "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.errors(include_url=False))
        )
        return PlacementLock(), [
            (
                "hosts",
                (
                    f"the placement lock {lock_file(stack)} is not valid ({detail}); restore it from version control "
                    f"or delete it and run `{lock_command(stack)}`"
                ),
            )
        ]


def lock_text(stack: str, lock: PlacementLock) -> str:
    header = (
        f"# Placement lock of stack '{stack}', written by `{lock_command(stack)}`: the GPUs of every gpuCount\n"
        "# partition. Commit it; the program keeps these partitions exactly here and places new ones on free GPUs.\n"
    )
    data = {
        "hosts": {name: lock.hosts[name].model_dump(by_alias=True, exclude_none=True) for name in sorted(lock.hosts)}
    }
    return header + str(yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=120))


def topology_digest(topology: Topology) -> str:
    """What placement reads of a topology, hashed: the same host captured again gives the same digest."""
    basis = [topology.gpus, topology.numa, topology.weight, topology.hops, topology.link_type]
    return "sha256:" + hashlib.sha256(json.dumps(basis).encode()).hexdigest()


def unlocked(hosts: Iterable[HostConfig], lock: PlacementLock) -> list[str]:
    """`host/container GPUs [..]` of every gpuCount partition the lock does not hold (placed by the program)."""
    found = []
    for host in hosts:
        held = lock.hosts.get(host.name)
        for c in host.containers:
            if c.gpu_count is not None and (held is None or c.name not in held.partitions):
                found.append(f"{host.name}/{c.name} GPUs {c.gpus}")
    return found


def place_partitions(
    host: HostConfig,
    at: str,
    lock: HostLock | None = None,
    *,
    stack: str = "",
    require_lock: bool = False,
    max_gap: float | None = None,
) -> tuple[HostConfig, list[tuple[str, str]]]:
    """The host with every container's `gpus` and `cpuset` decided, and the problems found doing so.

    A `gpuCount` partition held by the lock keeps its GPUs; the others are placed on the GPUs left free, with the
    host's topology file (least XGMI/PCIe link weight inside each set, one NUMA node per set where it fits), or on
    the lowest free GPUs without one, in container-name order. With `require_lock` (prod) a partition the lock
    does not hold is refused instead; with `max_gap` (prod: PROD_PLACEMENT_GAP, also for `make lock`) so is a
    placement whose proven gap exceeds it (possible on a flat host of more than EXACT_GPUS GPUs): the lock must pin
    it. A container's set on one NUMA node gets that node's CPUs from `numaCpus` unless it names its own `cpuset`.
    The placed host carries the proven gap of the placement made here (`placement_gap`; None: nothing placed).
    """
    # Here, not at the top: domain.topology adds ~50 ms to every config load that places nothing (python -X importtime).
    from domain.topology import (
        EXACT_GPUS,
        Placement,
        PlacementError,
        TopologyError,
        load_topology,
        numa_node_of,
        place,
        place_partitioned,
    )

    topology = None
    if host.topology is not None:
        try:
            topology = load_topology(host.topology)
        except TopologyError as error:
            return host, [
                (f"{at}.topology", f"{error}; expected saved `rocm-smi --showtopo` or `amd-smi topology` output")
            ]
        if len(topology.gpus) != host.logical_gpus:
            if host.compute_partition is None:
                detail = f"the host declares gpus: {host.gpus}"
            else:  # a partitioned GPU shows each logical GPU in the tables (AMD SMI partition.md, IDs 0-63)
                detail = (
                    f"host '{host.name}' shows {_gpus_phrase(host)}: it was saved in another partition mode; "
                    f"the render-node map {host.render_nodes or '(none)'} must match the mode too: "
                    f"{recapture_hint(host)}"
                )
            return host, [(f"{at}.topology", f"the file describes {len(topology.gpus)} GPUs but {detail}")]
        numa_problems = _numa_problems(host, at, topology)
        if numa_problems:
            return host, numa_problems
    index_of = {c.name: i for i, c in enumerate(host.containers)}
    sized = sorted((c for c in host.containers if c.gpu_count is not None), key=lambda c: c.name)
    gpus_of, problems = _locked_gpus(host, at, sized, lock, topology, stack)
    new = [c for c in sized if c.name not in gpus_of]
    # A partition the lock holds on a changed basis is no new one: the basis problem says why and how to relock it.
    unheld = [c for c in new if lock is None or c.name not in lock.partitions]
    if unheld and require_lock:
        problems += [
            (
                f"{at}.containers[{index_of[c.name]}].gpuCount",
                (
                    f"partition '{host.name}/{c.name}' has no GPUs in the placement lock {lock_file(stack)}; run "
                    f"`{lock_command(stack)}` and commit the file, so that later changes never move it"
                ),
            )
            for c in unheld
        ]
    if problems:
        return host, sorted(problems)
    if new:
        # Placed in container-name order among the free GPUs, so that reordering the list moves nothing.
        taken = {g for gpus in gpus_of.values() for g in gpus}
        free = [g for g in (topology.gpus if topology is not None else range(host.logical_gpus)) if g not in taken]
        sizes = [c.gpu_count for c in new if c.gpu_count is not None]  # all of them: `sized`
        try:
            if host.per_gpu > 1:
                sets = place_partitioned(topology, free, sizes, host.per_gpu)
            elif topology is not None:
                sets = place(topology.subset(free), sizes)
            else:
                starts = [sum(sizes[:i]) for i in range(len(sizes))]
                sets = Placement(tuple(free[start : start + size]) for start, size in zip(starts, sizes))
        except PlacementError as error:
            return host, [(f"{at}.containers", str(error))]
        if max_gap is not None and sets.gap > max_gap:
            return host, [
                (
                    f"{at}.containers",
                    (
                        f"the placement of partitions {[c.name for c in new]} on host '{host.name}' is not proven "
                        f"within {max_gap:.0%} of optimal: on {len(free)} GPUs (exact up to {EXACT_GPUS}) the "
                        f"solver's time limit left a gap of {sets.gap:.1%} (weight {sets.weight}, lower bound "
                        f"{sets.bound}) with {[list(s) for s in sets]}; pin GPUs yourself: write them into "
                        f"{lock_file(stack)} under hosts.{host.name}.partitions, or give the containers `gpus`"
                    ),
                )
            ]
        gpus_of.update({c.name: list(gpus) for c, gpus in zip(new, sets)})
    containers = [c.model_copy(update={"gpus": gpus_of[c.name]}) if c.name in gpus_of else c for c in host.containers]
    if topology is not None and host.numa_cpus:
        placed = []
        for c in containers:
            node = numa_node_of(topology, c.gpus if c.gpus is not None else topology.gpus)
            if c.cpuset is None and node in host.numa_cpus:
                c = c.model_copy(update={"cpuset": host.numa_cpus[node]})
            placed.append(c)
        containers = placed
    placed_host = host.model_copy(update={"containers": containers})
    # Rounded up: the lock states a bound the placement is proven within.
    placed_host._placement_gap = math.ceil(sets.gap * 1e4) / 1e4 if new else None
    return placed_host, []


def _numa_problems(host: HostConfig, at: str, topology: Topology) -> list[tuple[str, str]]:
    """GPUs whose NUMA node numaCpus cannot turn into a cpuset: unknown in the topology file (-1 or missing), or a
    node numaCpus does not list. Either would silently leave their partitions unpinned."""
    if not host.numa_cpus:
        return []
    problems = []
    unknown = [g for g, node in zip(topology.gpus, topology.numa) if node is None]
    if unknown:
        problems.append(
            (
                f"{at}.topology",
                (
                    f"{host.topology} gives no NUMA node (-1 or none) for GPU(s) {unknown}, so numaCpus cannot pin their "
                    "partitions: save it with the NUMA section (`rocm-smi --showtopo` prints 'Numa Nodes'; after `amd-smi "
                    "topology` append `amd-smi static --numa`), or remove numaCpus"
                ),
            )
        )
    unlisted = sorted({node for node in topology.numa if node is not None and node not in host.numa_cpus})
    if unlisted:
        gpus = [g for g, node in zip(topology.gpus, topology.numa) if node in unlisted]
        problems.append(
            (
                f"{at}.numaCpus",
                (
                    f"GPU(s) {gpus} are on NUMA node(s) {unlisted} ({host.topology}), which numaCpus does not list (it lists "
                    f"{sorted(host.numa_cpus)}); add their CPUs (`lscpu | grep 'NUMA node'`)"
                ),
            )
        )
    return problems


def host_lock(host: HostConfig, topology: Topology | None) -> HostLock:
    """The lock entry of a placed host: its basis and the GPUs of its gpuCount partitions."""
    return HostLock(
        gpus=host.gpus,
        compute_partition=host.compute_partition,
        topology=topology_digest(topology) if topology is not None else None,
        partitions={
            c.name: list(c.gpus)
            for c in sorted(host.containers, key=lambda c: c.name)
            if c.gpu_count is not None and c.gpus is not None
        },
    )


def _locked_gpus(
    host: HostConfig,
    at: str,
    sized: list[ContainerConfig],
    lock: HostLock | None,
    topology: Topology | None,
    stack: str,
) -> tuple[dict[str, list[int]], list[tuple[str, str]]]:
    """The GPUs the lock holds for this host's partitions, or why an entry no longer fits."""
    if lock is None:
        return {}, []
    held = {c.name: lock.partitions[c.name] for c in sized if c.name in lock.partitions}
    if not held:
        return {}, []
    index_of = {c.name: i for i, c in enumerate(host.containers)}
    path = lock_file(stack)
    basis = host_lock(host, topology)
    if (lock.gpus, lock.compute_partition, lock.topology) != (basis.gpus, basis.compute_partition, basis.topology):
        if lock.gpus != basis.gpus:
            key, what = f"{at}.gpus", f"gpus {lock.gpus} -> {basis.gpus}"
        elif lock.compute_partition != basis.compute_partition:
            key, what = (
                f"{at}.computePartition",
                (f"computePartition {lock.compute_partition or 'unset'} -> {basis.compute_partition or 'unset'}"),
            )
        else:
            key, what = f"{at}.topology", f"topology {host.topology or '(none)'} is not the one locked"
        return {}, [
            (
                key,
                (
                    f"host '{host.name}' changed since its partitions {sorted(held)} were locked in {path} ({what}); "
                    f"run `{lock_command(stack, host.name)}` to place them anew (their containers move), and commit it"
                ),
            )
        ]
    problems = []
    owner: dict[int, str] = {}
    for c in sized:
        gpus = held.get(c.name)
        if gpus is None:
            continue
        fix = f"run `{lock_command(stack, f'{host.name}/{c.name}')}` to place it anew (its container moves)"
        shows = f"gpus: {host.gpus}" if host.compute_partition is None else _gpus_phrase(host)
        c_at = f"{at}.containers[{index_of[c.name]}].gpuCount"
        out_of_range = [g for g in gpus if g >= host.logical_gpus]
        clash = sorted({owner[g] for g in gpus if g in owner})
        if len(gpus) != c.gpu_count:
            problems.append(
                (
                    c_at,
                    f"partition '{host.name}/{c.name}' is locked in {path} on {len(gpus)} GPUs "
                    f"{gpus} but asks for gpuCount {c.gpu_count}; {fix}",
                )
            )
        elif out_of_range or len(set(gpus)) != len(gpus):
            problems.append(
                (
                    c_at,
                    f"partition '{host.name}/{c.name}' is locked in {path} on GPUs {gpus}, which "
                    f"host '{host.name}' ({shows}) does not have; {fix}",
                )
            )
        elif clash:
            problems.append(
                (
                    c_at,
                    f"partition '{host.name}/{c.name}' is locked in {path} on GPUs {gpus}, which "
                    f"overlap those of {clash}; {fix}",
                )
            )
        owner.update((g, c.name) for g in gpus)
    return held, problems
