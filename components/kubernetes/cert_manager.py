"""cert-manager from its Helm chart: the AMD GPU Operator's webhooks need its certificates."""
from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.helm import v3 as helm_v3

from components.config.kubernetes import CertManagerConfig

CHART = "cert-manager"


@dataclass(frozen=True)
class CertManagerArgs:
    config: CertManagerConfig
    environment: str
    provider: Provider
    # The namespace's name output, so the release waits for the namespace.
    namespace: pulumi.Input[str]


class CertManager(pulumi.ComponentResource):
    release: helm_v3.Release

    def __init__(self, name: str, args: CertManagerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:CertManager", name, None, opts)
        config = args.config
        self.release = helm_v3.Release(
            name,
            name=CHART,  # a fixed Helm release name: no random suffix, one cert-manager per cluster
            chart=CHART,
            version=config.chart_version,
            repository_opts=helm_v3.RepositoryOptsArgs(repo=config.repository),
            namespace=args.namespace,
            values=config.crd_values(),
            timeout=config.timeout_seconds,
            # A failed install or upgrade rolls back instead of leaving a half-deployed webhook.
            atomic=True,
            cleanup_on_fail=True,
            opts=pulumi.ResourceOptions(
                parent=self, provider=args.provider, protect=args.environment == "prod"
            ),
        )
        self.register_outputs({"release": self.release.name, "version": self.release.version})
