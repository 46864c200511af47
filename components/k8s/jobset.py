"""The JobSet controller (kubernetes-sigs/jobset) from its pinned OCI Helm chart: multi-node training runs as a
JobSet, which starts its pods together, gives them a headless Service and restarts the whole set on failure."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.helm import v3 as helm_v3
from pulumi_kubernetes.yaml import v2 as yaml_v2

from schema.kubernetes import JOBSET_CHART, JobSetConfig, ProviderConfig
from components.k8s.helm import pinned_release

RELEASE_NAME = "jobset"


@dataclass(frozen=True)
class JobSetControllerArgs:
    config: JobSetConfig
    environment: str
    provider: Provider
    namespace: pulumi.Input[str]
    """Created by the release if missing (createNamespace), like cert-manager's."""
    cluster: ProviderConfig
    """The cluster `provider` reaches: the CRD's own provider reaches the same one."""


class JobSetController(pulumi.ComponentResource):
    crds: yaml_v2.ConfigFile
    release: helm_v3.Release

    def __init__(self, name: str, args: JobSetControllerArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:JobSetController", name, None, opts)
        config = args.config
        # The CRD of the chart's version, applied by Pulumi (Helm never upgrades a chart's crds/). Deleting a CRD
        # deletes every JobSet: never deleted (retainOnDelete, and protect in prod; the engine passes both on to
        # the file's objects, pulumi/pulumi pkg/resource/deploy/source_eval.go inheritFromParent). Its provider
        # adopts the CRD an earlier install left (Helm's, from crds/: a plain create fails AlreadyExists since
        # pulumi-kubernetes 4.29, provider/pkg/await/await.go) and takes over the fields Helm's field manager owns.
        crd_provider = Provider(
            f"{name}-crds",
            kubeconfig=args.cluster.kubeconfig,
            context=args.cluster.context,
            upsert_existing_objects=True,
            enable_patch_force=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.crds = yaml_v2.ConfigFile(
            f"{name}-crds",
            file=config.crd_url,
            opts=pulumi.ResourceOptions(
                parent=self,
                provider=crd_provider,
                retain_on_delete=True,
                protect=args.environment == "prod",
            ),
        )
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
            skip_crds=True,
            depends_on=[self.crds],
        )
        self.register_outputs({"release": self.release.name, "version": self.release.version})
