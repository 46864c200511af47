"""The one way this stack installs a Helm chart: pinned, rolled back on failure (unless the chart's delete
hooks make that unsafe), protected in prod; and the CRDs of a chart that keeps them in crds/."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.helm import v3 as helm_v3
from pulumi_kubernetes.yaml import v2 as yaml_v2

from schema.kubernetes import ProviderConfig
from components import supply


def pinned_release(
    resource_name: str,
    *,
    release_name: str,
    chart: str,
    version: str,
    repository: str | None,
    namespace: pulumi.Input[str],
    values: Mapping[str, Any],
    timeout_seconds: int,
    environment: str,
    parent: pulumi.Resource | None,
    provider: pulumi.ProviderResource,
    depends_on: Sequence[pulumi.Resource] | None = None,
    atomic: bool = True,
    create_namespace: bool = False,
    skip_crds: bool = False,
    aliases: Sequence[pulumi.Alias] | None = None,
    images: Sequence[supply.ChartImage] = (),
) -> helm_v3.Release:
    """`repository` None: `chart` is a full OCI reference (oci://...). `create_namespace`: Helm creates the
    namespace when missing and accepts an existing one (helm pkg/action/install.go ignores IsAlreadyExists);
    it is not part of the release, so an uninstall leaves it. `skip_crds`: the chart's crds/ are not installed (the
    stack declares those CRDs itself, so that a new chart version upgrades them). `images`: the chart's image values
    (components/supply.py), set to the mirror's references when the stack has one; the chart too comes from it."""
    chart, repository = supply.chart(chart, repository)
    return helm_v3.Release(
        resource_name,
        name=release_name,  # a fixed Helm release name: no random suffix
        chart=chart,
        version=version,
        repository_opts=helm_v3.RepositoryOptsArgs(repo=repository) if repository is not None else None,
        namespace=namespace,
        create_namespace=create_namespace or None,
        skip_crds=skip_crds or None,
        values=supply.chart_values(images, values),
        timeout=timeout_seconds,
        # A failed install or upgrade rolls back instead of leaving half-deployed webhooks and CRDs.
        atomic=atomic,
        cleanup_on_fail=True,
        opts=pulumi.ResourceOptions(
            parent=parent,
            provider=provider,
            protect=environment == "prod",
            depends_on=list(depends_on) if depends_on else None,
            aliases=list(aliases) if aliases else None,
        ),
    )


@dataclass(frozen=True)
class CrdChart:
    """A pinned chart that keeps its CRDs in crds/, which Helm installs but never upgrades ("There is no support at
    this time for upgrading or deleting CRDs using Helm": https://helm.sh/docs/chart_best_practices/
    custom_resource_definitions/): the stack applies them itself and the release skips them."""

    chart: str
    """A full OCI reference (oci://...)."""
    release_name: str
    version: str
    values: Mapping[str, Any]
    timeout_seconds: int
    crds: Mapping[str, str]
    """ConfigFile resource name -> the URL of a CRD file of this chart version."""
    images: Sequence[supply.ChartImage] = ()
    """The chart's image values (pinned_release)."""


@dataclass(frozen=True)
class CrdChartArgs:
    environment: str
    provider: Provider
    namespace: pulumi.Input[str]
    """Created by the release if missing (createNamespace)."""
    cluster: ProviderConfig
    """The cluster `provider` reaches: the CRDs' own provider reaches the same one."""


class CrdChartController(pulumi.ComponentResource):
    """A controller from a CrdChart: its CRDs (never deleted), then its release without them."""

    crds: list[yaml_v2.ConfigFile]
    release: helm_v3.Release

    def __init__(
        self, type_token: str, name: str, chart: CrdChart, args: CrdChartArgs, opts: pulumi.ResourceOptions | None
    ):
        super().__init__(type_token, name, None, opts)
        self.crds = chart_crds(name, chart.crds, args.cluster, args.environment, self)
        # The CRDs and webhooks are cluster-wide: one release per cluster.
        self.release = pinned_release(
            name,
            release_name=chart.release_name,
            chart=chart.chart,
            version=chart.version,
            repository=None,
            namespace=args.namespace,
            values=chart.values,
            timeout_seconds=chart.timeout_seconds,
            environment=args.environment,
            parent=self,
            provider=args.provider,
            create_namespace=True,
            skip_crds=True,
            depends_on=self.crds,
            images=chart.images,
        )
        self.register_outputs({"release": self.release.name, "version": self.release.version})


def chart_crds(
    name: str, files: Mapping[str, str], cluster: ProviderConfig, environment: str, parent: pulumi.Resource | None
) -> list[yaml_v2.ConfigFile]:
    """The CRDs of a chart's version, applied by Pulumi (`files`: resource name -> URL). Deleting a CRD deletes every
    object of it: never deleted (retainOnDelete, and protect in prod; the engine passes both on to the file's
    objects, pulumi/pulumi pkg/resource/deploy/source_eval.go inheritFromParent). Their provider (`<name>-crds`)
    adopts the CRD an earlier install left (Helm's, from crds/: a plain create fails AlreadyExists since
    pulumi-kubernetes 4.29, provider/pkg/await/await.go) and takes over the fields Helm's field manager owns."""
    provider = Provider(
        f"{name}-crds",
        kubeconfig=cluster.kubeconfig,
        context=cluster.context,
        upsert_existing_objects=True,
        enable_patch_force=True,
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return [
        yaml_v2.ConfigFile(
            resource_name,
            file=supply.url(url),
            opts=pulumi.ResourceOptions(
                parent=parent, provider=provider, retain_on_delete=True, protect=environment == "prod"
            ),
        )
        for resource_name, url in files.items()
    ]
