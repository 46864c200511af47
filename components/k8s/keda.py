"""KEDA (kedacore/keda) from its pinned Helm chart: it runs the ScaledObjects of autoscaled vLLM Deployments
(components/workloads/autoscaling.py), creating and feeding one HPA per ScaledObject.

The chart renders its CRDs from templates/crds/ (keda/templates/crds/crd-scaledobjects.yaml @ v2.20.2, `{{- if
.Values.crds.install }}`, true by default), not crds/, which Helm never upgrades: Helm applies them with every install
and upgrade, so a new chart version upgrades them, as with Kueue. The release is protected in prod: uninstalling it
would delete the CRDs and with them every ScaledObject (and so every HPA KEDA made).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_kubernetes import Provider
from pulumi_kubernetes.helm import v3 as helm_v3

from schema.autoscaling import KEDA_CHART, KEDA_REPOSITORY, KedaConfig
from components.k8s.helm import pinned_release
from components.supply import keda_images

RELEASE_NAME = "keda"
# The stack's ScaledObjects use no TriggerAuthentication (autoscaling.py: an unauthenticated Prometheus query), so
# KEDA needs no Secret beyond its own certificates. The chart's default `restrict.secret: false` gives the operator a
# ClusterRole to list and watch every Secret of the cluster (kedacore/charts keda/values.yaml L913-922,
# templates/manager/clusterrole.yaml L51-57 `{{- if not .Values.permissions.operator.restrict.secret }}` @ v2.20.2);
# `true` drops it for a Role on the Secrets of KEDA's own namespace (templates/manager/minimal-rbac.yaml L36-43,
# L61-65) and makes the operator and the metrics server read only there (KEDA_RESTRICT_SECRET_ACCESS,
# templates/manager/deployment.yaml L180-183, templates/metrics-server/deployment.yaml L120-123).
RESTRICTED_SECRETS = {
    "permissions": {"operator": {"restrict": {"secret": True}}, "metricServer": {"restrict": {"secret": True}}}
}


@dataclass(frozen=True)
class KedaArgs:
    config: KedaConfig
    environment: str
    provider: Provider
    namespace: pulumi.Input[str]
    """Created by the release if missing (createNamespace)."""


class Keda(pulumi.ComponentResource):
    release: helm_v3.Release

    def __init__(self, name: str, args: KedaArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("rocm-stack:k8s:Keda", name, None, opts)
        config = args.config
        # KEDA serves the cluster's one external-metrics APIService (v1beta1.external.metrics.k8s.io): one release
        # per cluster, named after the chart as the production stack's install command names it.
        self.release = pinned_release(
            name,
            release_name=RELEASE_NAME,
            chart=KEDA_CHART,
            version=config.chart_version,
            repository=KEDA_REPOSITORY,
            namespace=args.namespace,
            values=RESTRICTED_SECRETS,
            timeout_seconds=config.timeout_seconds,
            environment=args.environment,
            parent=self,
            provider=args.provider,
            create_namespace=True,
            images=keda_images(),
        )
        self.register_outputs({"release": self.release.name, "version": self.release.version})
