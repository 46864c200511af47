"""The JobSet controller (kubernetes-sigs/jobset) from its pinned OCI Helm chart: multi-node training runs as a
JobSet, which starts its pods together, gives them a headless Service and restarts the whole set on failure."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.helm import v3 as helm_v3

from schema.kubernetes import JOBSET_CHART, JobSetConfig
from components.k8s.helm import pinned_release

RELEASE_NAME = "jobset"


@dataclass(frozen=True)
class JobSetControllerArgs:
    config: JobSetConfig
    environment: str
    provider: Provider
    namespace: pulumi.Input[str]
    """Created by the release if missing (createNamespace), like cert-manager's."""


class JobSetController(pulumi.ComponentResource):
    release: helm_v3.Release

    def __init__(self, name: str, args: JobSetControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:JobSetController", name, None, opts)
        config = args.config
        # The JobSet CRD and its webhooks are cluster-wide: one release per cluster, named after the chart.
        self.release = pinned_release(
            name,
            release_name=RELEASE_NAME,
            chart=JOBSET_CHART,
            version=config.chart_version,
            repository=None,
            namespace=args.namespace,
            values=config.chart_values(),
            timeout_seconds=config.timeout_seconds,
            environment=args.environment,
            parent=self,
            provider=args.provider,
            create_namespace=True,
        )
        self.register_outputs({"release": self.release.name, "version": self.release.version})
