"""The LeaderWorkerSet controller (kubernetes-sigs/lws) from its pinned OCI Helm chart: a multi-node vLLM replica is
one LeaderWorkerSet group (a leader pod and its workers), created, restarted and rolled together
(components/workloads/multinode.py)."""

from __future__ import annotations

import pulumi

from schema.kubernetes import LWS_CHART, LWS_IMAGE_REPOSITORY, LeaderWorkerSetConfig
from components.supply import repository_images
from components.k8s.helm import CrdChart, CrdChartArgs, CrdChartController

RELEASE_NAME = "lws"


class LeaderWorkerSetController(CrdChartController):
    def __init__(
        self, name: str, config: LeaderWorkerSetConfig, args: CrdChartArgs, opts: pulumi.ResourceOptions | None = None
    ):
        chart = CrdChart(
            chart=LWS_CHART,
            release_name=RELEASE_NAME,  # as its install doc names it
            version=config.chart_version,
            values=config.chart_values(),
            timeout_seconds=config.timeout_seconds,
            # One ConfigFile per CRD, named by its file (`lws-crds-leaderworkersets`): a URN a new version keeps.
            crds={
                f"{name}-crds-{file.removesuffix('.yaml').split('_', 1)[1]}": url
                for file, url in config.crd_urls().items()
            },
            images=repository_images("image.manager.repository", LWS_IMAGE_REPOSITORY, f"v{config.chart_version}"),
        )
        super().__init__("rocm-stack:k8s:LeaderWorkerSetController", name, chart, args, opts)
