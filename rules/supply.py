"""The catalogue's rules on what the stack pulls: images and Helm charts pinned."""

from __future__ import annotations

from . import HELM_RELEASE, REMOTE_IMAGE, helm_release_problems, unpinned_images
from .rule import EVERY_ENVIRONMENT, Declared, Example, Rule

PYTORCH = "rocm/pytorch:rocm7.0_ubuntu22.04_py3.10_pytorch_release_2.7.1"

PINNED_IMAGES = Rule(
    id="pinned-images",
    statement="Images are pinned: a version tag or a digest, never 'latest', a moving tag (nightly, main, ...) or no "
    "tag (Docker images, every pod template including JobSets', the DeviceConfig's images).",
    reason="A moving tag is resolved at each pull, so two hosts (or one host before and after a restart) run different "
    "code under one config; Docker pulls `latest` when no tag is given (docs.docker.com/reference/cli/docker/image/pull: "
    "'If no tag is provided, Docker Engine uses the :latest tag as a default'). The moving tags are a deny-list "
    "(`MOVING_TAGS`); a digest decides whatever the tag says. Dev may run unpinned images: the pack reports them there "
    "(advisory), the config loader refuses them in prod only.",
    environments=EVERY_ENVIRONMENT,
    config_keys=("images.*", "kubernetes.gpuOperator.deviceConfig.*.image", "kubernetes.devicePlugin.image"),
    plan_fields=(
        "RemoteImage name",
        "Container image",
        "pod templates' containers[].image",
        "DeviceConfig spec.*.image",
    ),
    check=unpinned_images,
    scope="resource",
    passing=(
        Example(
            "a version tag",
            {"images": {"pytorch": PYTORCH}},
            (Declared(REMOTE_IMAGE, "pytorch", {"name": PYTORCH}),),
        ),
    ),
    failing=(
        Example(
            "the `latest` tag",
            {"images": {"pytorch": "rocm/pytorch:latest"}},
            (Declared(REMOTE_IMAGE, "pytorch", {"name": "rocm/pytorch:latest"}),),
        ),
    ),
)

GPU_OPERATOR = "gpu-operator-charts"
KUBERNETES = {"provider": {"context": "gpu-prod"}}

PINNED_CHARTS = Rule(
    id="pinned-charts",
    statement="Helm releases name an exact chart version, never a range or none.",
    reason="Helm's --version is a constraint: 'a specific tag (e.g. 1.1.1) or ... a valid range (e.g. ^2.0.0). If this "
    "is not specified, the latest version is used' (`helm install --help`, helm/helm pkg/cmd/flags.go "
    "addChartPathOptionsFlags), so a range installs whatever the repository holds newest at each `pulumi up`; Helm reads "
    "it with Masterminds/semver v3 (README, 'Wildcards In Comparisons': `1.2.x` is `>= 1.2.0, < 1.3.0`; a `v` prefix "
    "optional). An exact "
    "version is SemVer 2's MAJOR.MINOR.PATCH with its optional pre-release and build (semver.org, 2.0.0), `v` allowed "
    "as charts tag either way. The config loader applies it to every `chartVersion` key (schema/types.py "
    "pinned_chart_version), the pack to the declared releases.",
    environments=EVERY_ENVIRONMENT,
    config_keys=(
        "kubernetes.gpuOperator.chartVersion",
        "kubernetes.certManager.chartVersion",
        "kubernetes.jobSet.chartVersion",
        "kubernetes.leaderWorkerSet.chartVersion",
        "kubernetes.keda.chartVersion",
        "kubernetes.kueue.chartVersion",
        "monitoring.kubePrometheusStack.chartVersion",
    ),
    plan_fields=("Release chart", "Release version"),
    check=helm_release_problems,
    scope="resource",
    passing=(
        Example(
            "an exact version",
            {"hosts": [], "kubernetes": {**KUBERNETES, "gpuOperator": {"chartVersion": "v1.5.1"}}},
            (Declared(HELM_RELEASE, "gpu-operator", {"chart": GPU_OPERATOR, "version": "v1.5.1"}),),
        ),
    ),
    failing=(
        Example(
            "a wildcard range (any 1.5 patch)",
            {"hosts": [], "kubernetes": {**KUBERNETES, "gpuOperator": {"chartVersion": "v1.5.x"}}},
            (Declared(HELM_RELEASE, "gpu-operator", {"chart": GPU_OPERATOR, "version": "v1.5.x"}),),
        ),
    ),
)

RULES = (PINNED_IMAGES, PINNED_CHARTS)
