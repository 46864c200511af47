"""cert-manager from its Helm chart: the AMD GPU Operator's webhooks need its certificates."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.helm import v3 as helm_v3

from schema.kubernetes import CertManagerConfig
from components.k8s.helm import pinned_release
from components.supply import cert_manager_images

CHART = "cert-manager"


@dataclass(frozen=True)
class CertManagerArgs:
    config: CertManagerConfig
    environment: str
    provider: Provider
    namespace: pulumi.Input[str]
    """Created by the release if missing (createNamespace); an owned namespace's name output when listed in
    `kubernetes.namespaces`, so the release waits for it."""


class CertManager(pulumi.ComponentResource):
    release: helm_v3.Release

    def __init__(self, name: str, args: CertManagerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:CertManager", name, None, opts)
        config = args.config
        # One cert-manager per cluster: the Helm release is always named after the chart.
        self.release = pinned_release(
            name,
            release_name=CHART,
            chart=CHART,
            version=config.chart_version,
            repository=config.repository,
            namespace=args.namespace,
            values=config.crd_values(),
            timeout_seconds=config.timeout_seconds,
            environment=args.environment,
            parent=self,
            provider=args.provider,
            # Clusters often have the namespace already: a Namespace resource would fail with AlreadyExists
            # (client-side create since pulumi-kubernetes 4.29.0, #2926); Helm's createNamespace accepts it.
            create_namespace=True,
            images=cert_manager_images(),
        )
        self.register_outputs({"release": self.release.name, "version": self.release.version})
