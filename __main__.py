"""rocm-stack: read the stack config, declare each layer by its one entry. All logic lives in components/."""

import pulumi

from schema import ConfigError, from_pulumi
from components import supply
from components.docker.hosts import build_docker_hosts
from components.k8s import build_kubernetes_layer
from components.monitoring.docker_layer import build_docker_monitoring
from components.workloads import build_workloads

try:
    cfg, secrets = from_pulumi()
except ConfigError as error:
    # Nothing has been declared yet: stop with the list of problems, not a traceback.
    raise pulumi.RunError(str(error)) from None

# Every image, chart and CRD file below comes from the mirror when the stack has one (components/supply.py).
supply.use(cfg.mirror)

hosts = build_docker_hosts(cfg, secrets)
pulumi.export("environment", cfg.environment)
pulumi.export("dockerHosts", {name: host.provider.host for name, host in hosts.items()})

for name, value in build_docker_monitoring(cfg, secrets, hosts).items():
    pulumi.export(name, value)

kubernetes = build_kubernetes_layer(cfg)
if kubernetes is not None:
    pulumi.export("kubernetesNamespaces", sorted(kubernetes.namespaces))
    pulumi.export("gpuResourceName", kubernetes.gpu_resource_name)

workloads = build_workloads(cfg, secrets, kubernetes, hosts)
pulumi.export("workloads", workloads.outputs())
# Every image the stack pulls, at its source (`rocm-stack images`: what an air-gapped mirror must hold).
pulumi.export("images", supply.pulled())
