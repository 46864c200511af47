"""A workload's container on a Docker GPU-host partition, with the device access GpuHost gives its own.

The ROCm device access, groups, IPC mode, cpuset and security profile come from components.docker.gpu_host's
`rocm_access` and `visibility_env`, so a workload container gets exactly what a GpuHost container gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_docker as docker

from schema.docker import ContainerConfig, HostConfig, SecurityProfile
from schema.derived import partition_size
from .deadlines import create_timeouts
from .environment import container_envs
from .gpu_host import LIMITS_REPLACE, GpuHost, pulled_image, rocm_access, visibility_env
from .stop import graceful_stop


@dataclass(frozen=True)
class Partition:
    """One `host/container` slot of `rocm-stack:hosts`, and the GpuHost component of its host."""

    host: HostConfig
    container: ContainerConfig
    gpu_host: GpuHost
    """The parent of the partition's container whatever runs in it, so that its URN never depends on its role."""

    @property
    def provider(self) -> docker.Provider:
        return self.gpu_host.provider

    @property
    def gates(self) -> Sequence[pulumi.Input[pulumi.Resource]]:
        """What the partition's container must wait for: its host's preflight and its GPU check."""
        return self.gpu_host.gates.get(self.container.name, ())

    @property
    def ref(self) -> str:
        return f"{self.host.name}/{self.container.name}"

    @property
    def resource_name(self) -> str:
        # The name GpuHost would give the container: host and container names, never positions.
        return f"{self.host.name}-{self.container.name}"

    @property
    def gpu_count(self) -> int:
        return partition_size(self.host, self.container)

    def visibility_env(self, variable: str) -> dict[str, str]:
        return visibility_env(self.host, self.container, variable)


def pull_on_hosts(
    workload: str, images: Mapping[str, str], partitions: Sequence[Partition], parent: pulumi.Resource
) -> dict[str, docker.RemoteImage]:
    """The workload's image (`images`: host -> the reference for its GPU family), pulled once on every host that
    has one of its partitions, by host name."""
    hosts = {p.host.name: p for p in partitions}
    return {
        host: pulled_image(
            f"{host}-{workload}",
            images[host],
            partition.host.docker.pull_timeout_seconds,
            pulumi.ResourceOptions(parent=parent, provider=partition.provider),
        )
        for host, partition in hosts.items()
    }


@dataclass(frozen=True)
class WorkloadContainerArgs:
    image: pulumi.Input[str]
    command: Sequence[str]
    env: Mapping[str, pulumi.Input[str]]
    """The workload's environment; the partition's own `env` wins (host-specific settings such as
    NCCL_SOCKET_IFNAME), and the visibility variable, where one is needed, always matches the partition."""
    shm_size_bytes: int
    security_profile: SecurityProfile
    restart: str
    stop_grace_seconds: int
    """From SIGTERM to SIGKILL when the container stops (components/docker/stop.py)."""
    max_retry_count: int | None = None
    volumes: Sequence[docker.ContainerVolumeArgs] = ()
    ports: Sequence[docker.ContainerPortArgs] = ()
    networks: Sequence[docker.ContainerNetworksAdvancedArgs] = ()
    """User-defined networks, instead of the daemon's default one."""
    network_mode: pulumi.Input[str] | None = None
    """`container:<ID>`: another container's network namespace, instead of networks of its own."""
    uploads: Sequence[docker.ContainerUploadArgs] = ()
    healthcheck: docker.ContainerHealthcheckArgs | None = None
    visibility_variable: str = "HIP_VISIBLE_DEVICES"
    """The variable the workload's runtime reads to select GPUs when the partition needs one (gpuAccess all)."""
    wait_timeout_seconds: int | None = None
    """Set: `pulumi up` waits up to this long for the health check to pass (the provider's `wait`), else fails."""
    secret_env: bool = False
    """The environment came (in part) from a secret stack key (StackSecrets.secret_sections)."""
    after: Sequence[pulumi.Resource] = ()
    """Containers this one waits for, in a create and in a replacement: a rolling order (components/workloads/inference.py
    ROLLING)."""


def workload_container(
    partition: Partition, args: WorkloadContainerArgs, workload: pulumi.Resource
) -> docker.Container:
    """The partition's container running `workload`'s program: the same resource as the partition's shell (GpuHost's
    child, same name and Docker name), so that a change of role is a replacement of one URN, which pulumi-docker
    does delete-first (DeleteBeforeReplace), never a create that meets the old container's Docker name."""
    c = partition.container
    env = {**args.env, **c.env, **partition.visibility_env(args.visibility_variable)}
    volumes = [
        *args.volumes,
        *(
            docker.ContainerVolumeArgs(host_path=v.host_path, container_path=v.container_path, read_only=v.read_only)
            for v in c.volumes
        ),
    ]
    return docker.Container(
        partition.resource_name,
        name=c.name,
        image=args.image,
        command=list(args.command),
        envs=container_envs(env, args.secret_env),
        **rocm_access(partition.host, c, args.security_profile, args.shm_size_bytes),
        ports=list(args.ports) or None,
        networks_advanced=list(args.networks) or None,
        network_mode=args.network_mode,
        volumes=volumes or None,
        uploads=list(args.uploads) or None,
        healthcheck=args.healthcheck,
        restart=args.restart,
        max_retry_count=args.max_retry_count,
        # A container a person stopped stays stopped: with must_run true the provider's Read would store no ports for
        # one that publishes some, and the next `pulumi up` would replace it (tests/e2e/test_e2e_stopped.py).
        must_run=False,
        wait=args.wait_timeout_seconds is not None or None,
        wait_timeout=args.wait_timeout_seconds,
        **graceful_stop(args.stop_grace_seconds),
        opts=pulumi.ResourceOptions(
            parent=partition.gpu_host,
            provider=partition.provider,
            depends_on=[*partition.gates, *args.after],
            custom_timeouts=create_timeouts(args.wait_timeout_seconds or 0),
            replace_on_changes=list(LIMITS_REPLACE),
            # Stacks deployed before hold the container under its workload: the engine finds it there (its old URN,
            # pulumi step_generator.go getOldResource) and moves it instead of creating it beside the old one.
            aliases=[pulumi.Alias(parent=workload)],
        ),
    )
