"""The Docker hosts layer: one GpuHost per configured host (`build_docker_hosts`), its partitions without those a
workload claims (the workload declares that container: components/workloads), and its checks."""

from __future__ import annotations

from schema import StackConfig, StackSecrets
from schema.docker import host_images
from components.docker.gpu_host import GpuHost, GpuHostArgs
from components.workloads import host_checks, host_for_gpu_host


def build_docker_hosts(cfg: StackConfig, secrets: StackSecrets) -> dict[str, GpuHost]:
    """Host name -> its GpuHost (its Docker provider, images, partitions and checks)."""
    return {
        host.name: GpuHost(
            host.name,
            GpuHostArgs(
                host=host_for_gpu_host(cfg, host),
                images=host_images(host, cfg.images),
                security_profile=cfg.security_profile,
                registry=cfg.registry,
                registry_password=secrets.registry_password,
                checks=host_checks(cfg, host),
                secret_env=secrets.env_is_secret("hosts"),
            ),
        )
        for host in cfg.hosts
    }
