"""The JobSet controller (kubernetes-sigs/jobset) from its pinned OCI Helm chart: multi-node training runs as a
JobSet, which starts its pods together, gives them a headless Service and restarts the whole set on failure."""

from __future__ import annotations

import pulumi

from schema.kubernetes import JOBSET_CHART, JOBSET_IMAGE_REPOSITORY, JobSetConfig
from components.supply import repository_images
from components.k8s.helm import CrdChart, CrdChartArgs, CrdChartController

RELEASE_NAME = "jobset"


class JobSetController(CrdChartController):
    def __init__(self, name: str, config: JobSetConfig, args: CrdChartArgs, opts: pulumi.ResourceOptions | None = None):
        chart = CrdChart(
            chart=JOBSET_CHART,
            release_name=RELEASE_NAME,  # named after the chart
            version=config.chart_version,
            values=config.chart_values(),
            timeout_seconds=config.timeout_seconds,
            crds={f"{name}-crds": config.crd_url},
            images=repository_images("image.repository", JOBSET_IMAGE_REPOSITORY, f"v{config.chart_version}"),
        )
        super().__init__("rocm-stack:k8s:JobSetController", name, chart, args, opts)
