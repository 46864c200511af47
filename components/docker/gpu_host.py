"""A GPU host running Docker: its provider, pinned ROCm images and GPU containers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_docker as docker

from rules import PARTITION_LABEL
from schema import RegistryConfig
from schema.docker import (
    SHELL_COMMAND,
    ContainerConfig,
    HostConfig,
    PortMapping,
    SecurityProfile,
    gpu_devices,
    partition_gpus,
)
from components import supply
from .environment import container_envs
from .checks import HostChecksArgs, check_programs_volume, gpucheck_container, preflight_container, verdict
from .deadlines import create_timeouts, pull_timeouts
from .logs import log_args
from .readback import as_stored
from .stop import INIT_REPLACES, graceful_stop, with_init


@dataclass(frozen=True)
class GpuHostArgs:
    host: HostConfig
    images: dict[str, str]
    """Image key -> the reference for this host's GPU family (schema.docker.host_images)."""
    security_profile: SecurityProfile
    registry: RegistryConfig | None = None
    registry_password: pulumi.Input[str] | None = None
    checks: HostChecksArgs | None = None
    """The preflight and the GPU check of every partition (None: `checks.enable` is off)."""
    secret_env: bool = False
    """`hosts` is a secret stack key (a nested `secure:` env value): the containers' environments are secret."""


def visibility_env(host: HostConfig, container: ContainerConfig, variable: str) -> dict[str, str]:
    """The visibility variable a partition needs, or none: with device-level isolation (or every GPU of the host)
    the container sees exactly its GPUs as 0..N-1, and host indices there would select the wrong ones or none."""
    visible = gpu_devices(host, container).visible
    return {} if visible is None else {variable: ",".join(str(g) for g in visible)}


def rocm_access(
    host: HostConfig, container: ContainerConfig, profile: SecurityProfile, shm_size_bytes: int
) -> dict[str, Any]:
    """The `docker.Container` arguments every ROCm GPU partition gets, whoever declares it."""
    access = gpu_devices(host, container)
    return {
        "shm_size": shm_size_bytes // (1024 * 1024),  # the provider takes MiB
        # /dev/kfd and the render nodes the host's gpuAccess gives (ROCm docs, "Running ROCm Docker containers"
        # and "Restricting GPU access"), or the AMD Container Toolkit's CDI devices.
        "devices": [
            docker.ContainerDeviceArgs(host_path=h, container_path=c, permissions="rwm") for h, c in access.devices
        ]
        or None,
        "device_requests": [docker.ContainerDeviceRequestArgs(driver="cdi", device_ids=list(access.cdi_devices))]
        if access.cdi_devices
        else None,
        # Numeric host GIDs only (see schema.docker.Gid); none by default, the ROCm images run as root.
        "group_adds": [str(g) for g in host.device_groups] or None,
        "labels": [docker.ContainerLabelArgs(label=PARTITION_LABEL, value=f"{host.name}/{container.name}")],
        # RCCL and DataLoader workers exchange data through /dev/shm: the partition's own, or the host's for a host's
        # only container (schema.docker.with_ipc_decided; the ranks of a partition all run in its container).
        "ipc_mode": container.ipc,
        **_memory_args(container),
        **log_args(host.logs),
        # The CPUs of the partition's NUMA node keep host memory next to its GPUs.
        "cpu_set": container.cpuset,
        "capabilities": docker.ContainerCapabilitiesArgs(adds=profile.capabilities),
        # With what dockerd adds for host IPC (label=disable), or every deploy would replace the container.
        "security_opts": as_stored("securityOpts", profile.security_opts, ipcMode=container.ipc),
    }


# The limits of a partition's container, which a change replaces (the resource option replaceOnChanges): `docker
# update` cannot remove one. TFD's update sends 0 or "" for a removed limit (resource_docker_container_funcs.go
# L1032-1068), which dockerd reads as "unchanged" (moby container/container_unix.go UpdateContainer L285-303 @
# v28.5.2; tests/e2e/test_e2e_limits.py): the limit would stay while the state said none, and every refresh would
# read it back. No new input tells a removal from a change without one on every container, which would replace every
# prod partition once (their cpusets come from the topology); a new limit is rare and mostly comes with a GPU move,
# which replaces the container anyway.
LIMITS_REPLACE = ("memory", "memorySwap", "cpuSet")


def _memory_args(container: ContainerConfig) -> dict[str, int]:
    """The partition's memory limit in the provider's MiB, with `memory_swap` equal to it: no swap for a GPU
    partition, and what the provider reads back. Unset, the daemon stores MemorySwap = 2 x Memory (moby v20.10.24
    daemon/daemon_unix.go L343-346), which the provider reads into `memory_swap` (terraform-provider-docker v4.5.0
    resource_docker_container_funcs.go L940-944; Optional, not Computed): a diff after every refresh."""
    if container.memory is None:
        return {}
    mib = container.memory // (1024 * 1024)
    return {"memory": mib, "memory_swap": mib}


def published(ports: Sequence[PortMapping]) -> list[docker.ContainerPortArgs]:
    """Published ports in the form the provider reads them back (components/docker/readback.py): ordered by
    container port, with the address and protocol spelt out."""
    return [
        docker.ContainerPortArgs(internal=p.internal, external=p.external, ip=p.ip, protocol="tcp")
        for p in sorted(ports, key=lambda p: p.internal)
    ]


def pulled_image(
    resource_name: str, reference: str, pull_timeout_seconds: int, opts: pulumi.ResourceOptions
) -> docker.RemoteImage:
    """An image pulled onto a GPU host, within the host's `docker.pullTimeoutSeconds` (components/docker/deadlines.py).
    Several containers share an image; never delete a multi-GB layer set on destroy."""
    return docker.RemoteImage(
        resource_name,
        name=supply.image(reference),
        keep_locally=True,
        opts=pulumi.ResourceOptions.merge(
            opts, pulumi.ResourceOptions(custom_timeouts=pull_timeouts(pull_timeout_seconds))
        ),
    )


class GpuHost(pulumi.ComponentResource):
    """One Docker daemon with GPUs. Children are named after the host and container names only,
    so reordering or adding hosts never renames (and so replaces) anything. Every partition's container is a child,
    its shell declared here and a workload's by the workload (`containers` holds the shells)."""

    provider: docker.Provider
    images: dict[str, docker.RemoteImage]
    containers: dict[str, docker.Container]
    programs: docker.Volume | None
    preflight: docker.Container | None
    checks: dict[str, docker.Container]
    # Partition name -> what its container (a shell here, or a workload's) must wait for: the passed checks.
    gates: dict[str, list[pulumi.Input[pulumi.Resource]]]

    def __init__(self, name: str, args: GpuHostArgs, opts: pulumi.ResourceOptions | None = None):
        """`name` is the host's name (`args.host.name`): the stack's resource names depend on it."""
        host = args.host
        super().__init__("rocm-stack:docker:GpuHost", name, None, opts)
        registry_auth = None
        if args.registry is not None:
            registry_auth = [
                docker.ProviderRegistryAuthArgs(
                    address=args.registry.server,
                    username=args.registry.username,
                    password=args.registry_password,
                )
            ]
        self.provider = docker.Provider(
            host.name,
            host=host.docker.host,
            ssh_opts=host.docker.ssh_opts or None,
            registry_auth=registry_auth,
            opts=pulumi.ResourceOptions(parent=self),
        )
        on_host = pulumi.ResourceOptions(parent=self, provider=self.provider)
        self.images = {
            key: pulled_image(f"{host.name}-{key}", args.images[key], host.docker.pull_timeout_seconds, on_host)
            for key in sorted(
                {c.image for c in host.containers} | set(args.checks.partition_images.values() if args.checks else ())
            )
        }
        self.programs, self.preflight, self.checks, self.gates = None, None, {}, {}
        if args.checks is not None:
            self._declare_checks(args.checks, args.security_profile, args.secret_env, on_host)
        self.containers = {
            c.name: self._container(
                host,
                c,
                args.security_profile,
                args.secret_env,
                pulumi.ResourceOptions.merge(
                    on_host,
                    pulumi.ResourceOptions(depends_on=self.gates.get(c.name, []), custom_timeouts=create_timeouts()),
                ),
            )
            for c in host.containers
        }
        self.register_outputs(
            {
                "dockerHost": host.docker.host,
                "containers": {name: c.name for name, c in self.containers.items()},
                "gpus": {c.name: partition_gpus(host, c) for c in host.containers},
            }
        )

    def _declare_checks(
        self, checks: HostChecksArgs, profile: SecurityProfile, secret_env: bool, on_host: pulumi.ResourceOptions
    ) -> None:
        """The host's preflight, then each partition's GPU check with the partition's own device access and
        environment; a partition's container waits for both verdicts."""
        host = checks.host
        # Every ROCm image has python3; the first partition's runs the preflight.
        key = checks.partition_images[min(checks.partition_images)]
        self.programs = check_programs_volume(host.name, on_host)
        self.preflight = preflight_container(checks, key, self.images[key].image_id, self.programs, on_host)
        preflight_passed = verdict(
            self.preflight, f"host {host.name}: preflight", checks.preflight_strict, checks.daemon_inputs
        )
        after_preflight = pulumi.ResourceOptions.merge(on_host, pulumi.ResourceOptions(depends_on=[preflight_passed]))
        for c in host.containers:
            key = checks.partition_images[c.name]
            check = gpucheck_container(
                checks,
                c,
                self.images[key].image_id,
                rocm_access(host, c, profile, c.shm_size),
                {**c.env, **visibility_env(host, c, "HIP_VISIBLE_DEVICES")},
                self.programs,
                after_preflight,
                secret_env=secret_env,
            )
            self.checks[c.name] = check
            self.gates[c.name] = [
                preflight_passed,
                verdict(check, f"partition {host.name}/{c.name}: GPU check", strict=True),
            ]

    def _container(
        self,
        host: HostConfig,
        c: ContainerConfig,
        profile: SecurityProfile,
        secret_env: bool,
        opts: pulumi.ResourceOptions,
    ) -> docker.Container:
        env: dict[str, Any] = {**c.env, **visibility_env(host, c, "HIP_VISIBLE_DEVICES")}
        return docker.Container(
            f"{host.name}-{c.name}",
            name=c.name,
            image=self.images[c.image].image_id,
            command=c.command or list(SHELL_COMMAND),
            envs=container_envs(env, secret_env),
            **rocm_access(host, c, profile, c.shm_size),
            ports=published(c.ports) or None,
            volumes=[
                docker.ContainerVolumeArgs(
                    host_path=v.host_path, container_path=v.container_path, read_only=v.read_only
                )
                for v in c.volumes
            ]
            or None,
            restart=c.restart,
            # A shell a person stopped stays stopped (with must_run true the provider would replace one that publishes
            # ports: tests/e2e/test_e2e_stopped.py).
            must_run=False,
            **graceful_stop(c.stop_grace_seconds),
            **with_init(),
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(replace_on_changes=[*INIT_REPLACES, *LIMITS_REPLACE])
            ),
        )
