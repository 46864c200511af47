"""The one way this stack installs a Helm chart: pinned, rolled back on failure (unless the chart's delete
hooks make that unsafe), protected in prod."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
from pulumi_kubernetes.helm import v3 as helm_v3


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
) -> helm_v3.Release:
    """`repository` None: `chart` is a full OCI reference (oci://...). `create_namespace`: Helm creates the
    namespace when missing and accepts an existing one (helm pkg/action/install.go ignores IsAlreadyExists);
    it is not part of the release, so an uninstall leaves it. `skip_crds`: the chart's crds/ are not installed (the
    stack declares those CRDs itself, so that a new chart version upgrades them)."""
    return helm_v3.Release(
        resource_name,
        name=release_name,  # a fixed Helm release name: no random suffix
        chart=chart,
        version=version,
        repository_opts=helm_v3.RepositoryOptsArgs(repo=repository) if repository is not None else None,
        namespace=namespace,
        create_namespace=create_namespace or None,
        skip_crds=skip_crds or None,
        values=dict(values),
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
