"""The catalogue's rules on Docker GPU hosts: device access, partitions isolated, what a container may reach of its
host, debugging privileges, one host entry per machine."""

from __future__ import annotations

from typing import Any

from . import (
    CONTAINER,
    DOCKER_PROVIDER,
    PARTITION_LABEL,
    debug_privilege_problems,
    docker_gpu_container_problems,
    duplicate_endpoint_problems,
    host_access_problems,
    host_isolation_problems,
)
from .rule import EVERY_ENVIRONMENT, PROD, Declared, Example, Rule


def partition(name: str, gpus: tuple[int, ...], **inputs: Any) -> dict[str, Any]:
    """A partition's container on host `h1` as GpuHost declares it: the KFD, a render node per GPU, its own IPC."""
    return {
        "name": name,
        "image": "sha256:" + "ab" * 32,
        "ipcMode": "private",
        "devices": [
            {"hostPath": path, "containerPath": path, "permissions": "rwm"}
            for path in ("/dev/kfd", *(f"/dev/dri/renderD{128 + 8 * gpu}" for gpu in gpus))
        ],
        "labels": [{"label": PARTITION_LABEL, "value": f"h1/{name}"}],
        **inputs,
    }


def host(*containers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """One Docker host `h1` of 8 MI300X GPUs in the stack config, reached over ssh, its render nodes mapped."""
    return {
        "name": "h1",
        "gpus": 8,
        "docker": {"host": "ssh://deploy@gpu-1"},
        "renderNodes": "hosts/mi300x-8gpu.render-nodes.json",
        "containers": list(containers) or [{"name": "a", "gpus": [0]}],
        **fields,
    }


def hosts(*entries: dict[str, Any], **config: Any) -> dict[str, Any]:
    """A stack config of these hosts and no monitoring host (whose Grafana would need its password)."""
    return {"hosts": list(entries), "monitoring": {"host": False}, **config}


DOCKER_GPU_CONTAINER_DEVICES = Rule(
    id="docker-gpu-container-devices",
    statement="Docker GPU containers map /dev/kfd and render nodes (or CDI GPUs), have a /dev/shm (IPC private or "
    "host) and add only numeric groups.",
    reason="ROCm opens the KFD (compute) and a render node per GPU (ROCm docs, 'Running ROCm Docker containers': "
    "`--device=/dev/kfd --device=/dev/dri`); RCCL and DataLoader workers need a /dev/shm, which ipcMode `none` lacks "
    "(moby v20.10.24 daemon/oci_linux.go L553-555); a group name is looked up in the image's /etc/group, and recent "
    "rocm/pytorch images have no `render` group (ROCm/rocm-libraries PR #6563). The program maps the devices from "
    "`gpus` and `gpuAccess`: no config asks otherwise.",
    environments=EVERY_ENVIRONMENT,
    config_keys=(),
    plan_fields=("Container devices", "Container deviceRequests (cdi)", "Container ipcMode", "Container groupAdds"),
    check=docker_gpu_container_problems,
    scope="resource",
    passing=(Example("the KFD and a render node", {}, (Declared(CONTAINER, "train", partition("train", (0,))),)),),
    failing=(
        Example(
            "no /dev/kfd",
            None,
            (Declared(CONTAINER, "train", partition("train", (0,), devices=[{"hostPath": "/dev/dri/renderD128"}])),),
        ),
    ),
)

GPU_PARTITIONS_ISOLATED = Rule(
    id="gpu-partitions-isolated",
    statement="The partitions of a Docker host have disjoint render nodes; in prod none maps the whole /dev/dri or "
    "uses the host's IPC namespace beside another partition.",
    reason="KFD checks the device cgroup for each GPU's render node (linux drivers/gpu/drm/amd/amdkfd/kfd_priv.h "
    "kfd_devcgroup_check_permission), so render nodes isolate partitions; visibility variables do not (ROCm 'GPU "
    "isolation techniques': an application 'can reset them'). Host IPC shares the host's /dev/shm between "
    "partitions (moby v20.10.24 daemon/container_operations_unix.go setupIpcDirs).",
    environments=EVERY_ENVIRONMENT,
    config_keys=("hosts[].gpuAccess", "hosts[].containers[].gpus", "hosts[].containers[].ipc"),
    plan_fields=("Container labels (rocm-stack.partition)", "Container devices", "Container ipcMode"),
    check=host_isolation_problems,
    scope="stack",
    passing=(
        Example(
            "two partitions, each its own GPUs and IPC",
            hosts(host({"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [2, 3]})),
            (Declared(CONTAINER, "a", partition("a", (0, 1))), Declared(CONTAINER, "b", partition("b", (2, 3)))),
        ),
    ),
    failing=(
        Example(
            "a partition on the host's IPC beside another",
            hosts(host({"name": "a", "gpus": [0, 1], "ipc": "host"}, {"name": "b", "gpus": [2, 3]})),
            (
                Declared(CONTAINER, "a", partition("a", (0, 1), ipcMode="host")),
                Declared(CONTAINER, "b", partition("b", (2, 3))),
            ),
        ),
    ),
)

ONE_HOST_ENTRY_PER_MACHINE = Rule(
    id="one-host-entry-per-machine",
    statement="In prod no two Docker hosts reach the same machine (each would hand out the same GPUs).",
    reason="Each host entry partitions its machine's GPUs on its own, so two entries for one machine give the same "
    "GPUs to two partitions and none of the isolation rules holds (found by the security review: "
    "tests/attacks/4-duplicate-endpoints.yaml). The machine is the endpoint's host, its user and port aside.",
    environments=PROD,
    config_keys=("hosts[].docker.host",),
    plan_fields=("Docker provider host",),
    check=duplicate_endpoint_problems,
    scope="stack",
    passing=(
        Example(
            "two machines",
            hosts(host(), {**host(), "name": "h2", "docker": {"host": "ssh://deploy@gpu-2"}}),
            (
                Declared(DOCKER_PROVIDER, "h1", {"host": "ssh://deploy@gpu-1"}),
                Declared(DOCKER_PROVIDER, "h2", {"host": "ssh://deploy@gpu-2"}),
            ),
        ),
    ),
    failing=(
        Example(
            "one machine twice",
            hosts(host(), {**host(), "name": "h2", "docker": {"host": "ssh://admin@gpu-1"}}),
            (
                Declared(DOCKER_PROVIDER, "h1", {"host": "ssh://deploy@gpu-1"}),
                Declared(DOCKER_PROVIDER, "h2", {"host": "ssh://admin@gpu-1"}),
            ),
        ),
    ),
)

PROD_HOST_ACCESS = Rule(
    id="prod-host-access",
    statement="In prod a Docker container mounts neither the Docker socket nor a system path of its host, maps only "
    "GPU device nodes and publishes no SSH port; a Docker provider reaches its daemon over ssh:// (or a local socket) "
    "with host keys checked and no password in the URL.",
    reason="The Docker socket is root on the host (docs.docker.com/engine/security/#docker-daemon-attack-surface: "
    "'only trusted users should be allowed to control your Docker daemon'), read-only or not: connect() asks write "
    "permission on the socket's inode only (linux net/unix/af_unix.c unix_find_bsd). A system path (/etc, /usr, "
    "/var/lib/docker, ...) or a directory above one lets the container take the host over. `--device` with a "
    "directory maps every node under it (moby v20.10.24 oci/devices_linux.go DevicesFromPath). tcp:// without TLS is "
    "root for whoever reaches the port (docs.docker.com/engine/security/protect-access/); StrictHostKeyChecking=no "
    "accepts any host key (ssh_config(5)). A password in the URL is refused in every environment (Docker's ssh "
    "helper refuses it).",
    environments=PROD,
    config_keys=(
        "hosts[].containers[].volumes[].hostPath",
        "hosts[].containers[].ports[]",
        "hosts[].devicePaths",
        "hosts[].docker.host",
        "hosts[].docker.sshOpts",
        "training[].docker.checkpointDir",
        "inference[].docker.modelCacheDir",
        "inference[].docker.publishedPort",
        "monitoring.exporterPort",
    ),
    plan_fields=("Container volumes", "Container devices", "Container ports", "Docker provider host, sshOpts"),
    check=host_access_problems,
    scope="resource",
    passing=(
        Example(
            "a data directory of its own",
            hosts(host({"name": "a", "gpus": [0], "volumes": [{"hostPath": "/srv/data", "containerPath": "/d"}]})),
            (
                Declared(
                    CONTAINER, "a", partition("a", (0,), volumes=[{"hostPath": "/srv/data", "containerPath": "/d"}])
                ),
            ),
        ),
    ),
    failing=(
        Example(
            "the Docker socket mounted",
            hosts(
                host(
                    {
                        "name": "a",
                        "gpus": [0],
                        "volumes": [{"hostPath": "/var/run/docker.sock", "containerPath": "/var/run/docker.sock"}],
                    }
                )
            ),
            (
                Declared(
                    CONTAINER,
                    "a",
                    partition(
                        "a",
                        (0,),
                        volumes=[{"hostPath": "/var/run/docker.sock", "containerPath": "/var/run/docker.sock"}],
                    ),
                ),
            ),
        ),
    ),
)

NO_DEBUG_PRIVILEGES_IN_PROD = Rule(
    id="no-debug-privileges-in-prod",
    statement="Prod runs no SYS_PTRACE, privileged or seccomp-unconfined containers.",
    reason="SYS_PTRACE reads and writes any process's memory that the container can see, privileged mode hands "
    "over every device and capability of the host, and seccomp=unconfined lifts Docker's default syscall filter "
    "(docs.docker.com/engine/security/seccomp/): debugging aids that prod never runs. `security.profile: debug` "
    "adds them; `security.allowDebugInProd: true` accepts the risk in the config (the pack still reports it).",
    environments=PROD,
    config_keys=("security.profile", "security.allowDebugInProd"),
    plan_fields=("Container capabilities.adds, privileged, securityOpts", "GPU pods' securityContext"),
    check=debug_privilege_problems,
    scope="resource",
    passing=(
        Example(
            "the hardened profile",
            {"security": {"profile": "hardened"}},
            (Declared(CONTAINER, "a", partition("a", (0,), capabilities={"adds": ["SYS_NICE"]})),),
        ),
    ),
    failing=(
        Example(
            "the debug profile",
            {"security": {"profile": "debug"}},
            (Declared(CONTAINER, "a", partition("a", (0,), capabilities={"adds": ["SYS_PTRACE"]})),),
        ),
    ),
)

RULES = (
    DOCKER_GPU_CONTAINER_DEVICES,
    GPU_PARTITIONS_ISOLATED,
    ONE_HOST_ENTRY_PER_MACHINE,
    PROD_HOST_ACCESS,
    NO_DEBUG_PRIVILEGES_IN_PROD,
)
