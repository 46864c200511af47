"""rocm-stack: read the stack config, wire the components. All logic lives in components/."""
import pulumi

from components.config import ConfigError, from_pulumi
from components.gpu_host import GpuHost, GpuHostArgs
from components.kubernetes import build_kubernetes

try:
    cfg, secrets = from_pulumi()
except ConfigError as error:
    # Nothing has been declared yet: stop with the list of problems, not a traceback.
    raise pulumi.RunError(str(error)) from None

hosts = {
    host.name: GpuHost(GpuHostArgs(
        host=host,
        images=cfg.images,
        security_profile=cfg.security_profile,
        registry=cfg.registry,
        registry_password=secrets.registry_password,
    ))
    for host in cfg.hosts
}

pulumi.export("environment", cfg.environment)
pulumi.export("dockerHosts", {name: host.provider.host for name, host in hosts.items()})

if cfg.kubernetes is not None:
    kubernetes = build_kubernetes(cfg.kubernetes, cfg.environment)
    pulumi.export("kubernetesNamespaces", sorted(kubernetes.namespaces))
    pulumi.export("gpuResourceName", kubernetes.gpu_resource_name)
