"""Where the program's images, Helm charts and CRD files come from: their public sources, or the stack's
`rocm-stack:mirror` (schema/mirror.py). Every reference the program declares passes through here, built by one of
`image`, `chart`, `url` and `chart_values`; each image is recorded for `rocm-stack images` (the stack output
`images`).

The program sets the mirror once, first (`use`, from __main__): module state, as Pulumi's own config is, so the
components need no mirror argument; each run starts afresh.

A chart pulls images its values name: CHART_IMAGES lists every image-naming value of each chart's values.yaml (and
its subcharts') at the pinned version, read from the chart sources (tests/test_k8s_mirror.py reads them again and
fails on a value the table misses). With a mirror, each is set to its mirror reference; without, the values stay as
they are (no change to a deployed release) and the images are only recorded.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from schema.mirror import MirrorConfig, qualified
from schema.queues import KUEUE_IMAGE_REPOSITORY

_mirror: MirrorConfig | None = None
_pulled: dict[str, None] = {}


def use(mirror: MirrorConfig | None) -> None:
    """The mirror of this program run (None: the public sources); forgets the images of an earlier run."""
    global _mirror
    _mirror = mirror
    _pulled.clear()


def pulled() -> list[str]:
    """Every image this run declared or installs through a chart, fully qualified, at its source."""
    return sorted(_pulled)


def image(reference: str) -> str:
    _pulled[qualified(reference)] = None
    return _mirror.image(reference) if _mirror is not None else reference


def chart(chart: str, repository: str | None) -> tuple[str, str | None]:
    """(chart, repository) as the release takes them: an OCI reference in the mirror (no repository), or as given."""
    return (_mirror.chart(chart), None) if _mirror is not None else (chart, repository)


def url(address: str) -> str:
    return _mirror.url(address) if _mirror is not None else address


@dataclass(frozen=True)
class ChartImage:
    """A chart value that names an image: a whole reference, a repository (its tag set elsewhere) or a registry."""

    value: str
    """Dotted path in the chart's values (a subchart's under its name)."""
    kind: Literal["image", "repository", "registry"]
    source: str
    """What the chart (or the stack's own values) has there."""
    pulls: tuple[str, ...] = ()
    """The images pulled through it at the pinned chart version (tags as the chart defaults them); () where the
    stack leaves the feature off."""

    def mirrored(self, mirror: MirrorConfig) -> str:
        if self.kind == "image":
            return mirror.image(self.source)
        if self.kind == "repository":
            return mirror.repository(self.source)
        return mirror.registry_of(self.source)


def _set(values: dict[str, Any], path: str, value: str) -> None:
    *parents, leaf = path.split(".")
    for key in parents:
        values = values.setdefault(key, {})
    values[leaf] = value


def chart_values(images: Collection[ChartImage], values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` with every image value of `images` in the mirror (unchanged without one); records their pulls."""
    result = copy.deepcopy(dict(values))
    for entry in images:
        for reference in entry.pulls:
            _pulled[qualified(reference)] = None
        if _mirror is not None:
            _set(result, entry.value, entry.mirrored(_mirror))
    return result


# --- the charts' image values, read at their pinned versions --------------------------------------------------------

# ROCm/gpu-operator v1.5.1 helm-charts-k8s/values.yaml (L37 remediation.controller.image; L64-68 the operator, also the
# image of its pre-upgrade/pre-delete/post-delete hook Jobs: templates/*-hook.yaml), charts/kmm/values.yaml (L8-13 the
# worker, signer and kaniko images KMM starts, L22-26 and L105-109 its two Deployments), and the subchart
# node-feature-discovery v0.18.3 (deployment/helm/node-feature-discovery/values.yaml L1-2, tag its appVersion).
# `deviceConfig.spec.*` are the default DeviceConfig's, which the stack does not install (crds.defaultCR.install
# false): its own DeviceConfig names every operand image (components/k8s/gpu_operator.py).
GPU_OPERATOR_IMAGES_READ_AT = "v1.5.1"


def gpu_operator_images(kmm: bool, nfd: bool, remediation: bool) -> list[ChartImage]:
    rocm = "docker.io/rocm"
    return [
        ChartImage(
            "controllerManager.manager.image.repository",
            "repository",
            f"{rocm}/amd-gpu-operator",
            (f"{rocm}/amd-gpu-operator:v1.5.1",),
        ),
        ChartImage(
            "kmm.controller.manager.image.repository",
            "repository",
            f"{rocm}/kernel-module-management-operator",
            (f"{rocm}/kernel-module-management-operator:latest",) if kmm else (),
        ),
        ChartImage(
            "kmm.webhookServer.webhookServer.image.repository",
            "repository",
            f"{rocm}/kernel-module-management-webhook-server",
            (f"{rocm}/kernel-module-management-webhook-server:latest",) if kmm else (),
        ),
        *(
            ChartImage(f"kmm.controller.manager.env.{key}", "image", reference, (reference,) if kmm else ())
            for key, reference in (
                ("relatedImageBuild", "gcr.io/kaniko-project/executor:v1.23.2"),
                ("relatedImageSign", f"{rocm}/kernel-module-management-signimage:latest"),
                ("relatedImageWorker", f"{rocm}/kernel-module-management-worker:latest"),
            )
        ),
        ChartImage(
            "node-feature-discovery.image.repository",
            "repository",
            "registry.k8s.io/nfd/node-feature-discovery",
            ("registry.k8s.io/nfd/node-feature-discovery:v0.18.3",) if nfd else (),
        ),
        ChartImage(
            "remediation.controller.image",
            "image",
            "quay.io/argoproj/workflow-controller:v4.0.3",
            ("quay.io/argoproj/workflow-controller:v4.0.3",) if remediation else (),
        ),
    ]


# cert-manager v1.21.1 deploy/charts/cert-manager/values.yaml L182 `imageRegistry: quay.io`, L189 `imageNamespace:
# jetstack`: every image of the chart is <imageRegistry>/<imageNamespace>/<name>:<appVersion> (templates/_helpers.tpl
# L182-221 "cert-manager.image", used by the controller, webhook, cainjector, acmesolver and startupapicheck).
CERT_MANAGER_IMAGES_READ_AT = "v1.21.1"


def cert_manager_images() -> list[ChartImage]:
    names = ("controller", "webhook", "cainjector", "acmesolver", "startupapicheck")
    return [
        ChartImage(
            "imageRegistry", "registry", "quay.io", tuple(f"quay.io/jetstack/cert-manager-{n}:v1.21.1" for n in names)
        )
    ]


# kedacore/charts v2.20.2 keda/values.yaml L22-43: three images under ghcr.io, tag the appVersion 2.20.2 (templates
# */deployment.yaml: `.Values.global.image.registry | default .Values.image.<x>.registry`).
KEDA_IMAGES_READ_AT = "2.20.2"


def keda_images() -> list[ChartImage]:
    return [
        ChartImage(f"image.{key}.registry", "registry", "ghcr.io", (f"ghcr.io/kedacore/{name}:2.20.2",))
        for key, name in (
            ("keda", "keda"),
            ("metricsApiServer", "keda-metrics-apiserver"),
            ("webhooks", "keda-admission-webhooks"),
        )
    ]


# prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3 charts/kube-prometheus-stack/values.yaml (the
# operator's images default to the appVersion v0.93.1), and its subcharts at the versions its Chart.yaml pins:
# kube-state-metrics 8.4.0 (appVersion 2.20.0, tag v<appVersion>), prometheus-node-exporter 4.56.1 (1.12.1),
# grafana-community/helm-charts grafana 12.11.1 (13.2.0). Each image's registry is its own value.
KUBE_PROMETHEUS_STACK_IMAGES_READ_AT = "88.5.3"


def kube_prometheus_stack_images(grafana: bool) -> list[ChartImage]:
    operator = "v0.93.1"
    used: list[tuple[str, str, str]] = [  # (value of the registry, registry, the image pulled)
        ("alertmanager.alertmanagerSpec.image", "quay.io", "quay.io/prometheus/alertmanager:v0.34.0"),
        (
            "prometheusOperator.admissionWebhooks.deployment.image",
            "quay.io",
            f"quay.io/prometheus-operator/admission-webhook:{operator}",
        ),
        ("prometheusOperator.admissionWebhooks.patch.image", "ghcr.io", "ghcr.io/jkroepke/kube-webhook-certgen:1.8.7"),
        ("prometheusOperator.image", "quay.io", f"quay.io/prometheus-operator/prometheus-operator:{operator}"),
        (
            "prometheusOperator.prometheusConfigReloader.image",
            "quay.io",
            f"quay.io/prometheus-operator/prometheus-config-reloader:{operator}",
        ),
        ("prometheus.prometheusSpec.image", "quay.io", "quay.io/prometheus/prometheus:v3.14.0-distroless"),
        (
            "kube-state-metrics.image",
            "registry.k8s.io",
            "registry.k8s.io/kube-state-metrics/kube-state-metrics:v2.20.0",
        ),
        ("prometheus-node-exporter.image", "quay.io", "quay.io/prometheus/node-exporter:v1.12.1"),
    ]
    if grafana:
        used += [
            ("grafana.image", "docker.io", "docker.io/grafana/grafana:13.2.0"),
            ("grafana.sidecar.image", "quay.io", "quay.io/kiwigrid/k8s-sidecar:2.10.1"),
        ]
    off = [  # features the stack leaves off: rewritten all the same, pulled never
        ("crds.upgradeJob.image.busybox", "docker.io"),
        ("crds.upgradeJob.image.kubectl", "registry.k8s.io"),
        ("prometheusOperator.thanosImage", "quay.io"),
        ("thanosRuler.thanosRulerSpec.image", "quay.io"),
        ("kube-state-metrics.kubeRBACProxy.image", "quay.io"),
        ("prometheus-node-exporter.kubeRBACProxy.image", "quay.io"),
        ("prometheus-node-exporter.permissionInitContainer.image", "quay.io"),
        ("grafana.testFramework.image", "docker.io"),
        ("grafana.downloadDashboardsImage", "docker.io"),
        ("grafana.initChownData.image", "docker.io"),
        ("grafana.imageRenderer.image", "docker.io"),
        *((("grafana.image", "docker.io"), ("grafana.sidecar.image", "quay.io")) if not grafana else ()),
    ]
    return [
        *(ChartImage(f"{value}.registry", "registry", registry, (pulls,)) for value, registry, pulls in used),
        *(ChartImage(f"{value}.registry", "registry", registry) for value, registry in off),
    ]


def repository_images(value: str, repository: str, tag: str) -> list[ChartImage]:
    """A chart whose one image the stack pins itself (JobSet, LWS, Kueue: `<value>` = repository, tag alongside)."""
    return [ChartImage(value, "repository", repository, (f"{repository}:{tag}",))]


# kubernetes-sigs/kueue v0.19.2 charts/kueue/values.yaml: the manager (L47-51, whose release pin the stack sets:
# schema/queues.py) and KueueViz (L301-305, L357-361), off (`enableKueueViz: false`, L27).
def kueue_images(version: str) -> list[ChartImage]:

    staging = "us-central1-docker.pkg.dev/k8s-staging-images/kueue"
    return [
        *repository_images("controllerManager.manager.image.repository", KUEUE_IMAGE_REPOSITORY, f"v{version}"),
        *(
            ChartImage(f"kueueViz.{part}.image.repository", "repository", f"{staging}/kueueviz-{part}")
            for part in ("backend", "frontend")
        ),
    ]


def chart_versions_read() -> Mapping[str, str]:
    """Chart -> the version its image table was read at: another version may pull other images."""
    return {
        "gpu-operator-charts": GPU_OPERATOR_IMAGES_READ_AT,
        "cert-manager": CERT_MANAGER_IMAGES_READ_AT,
        "keda": KEDA_IMAGES_READ_AT,
        "kube-prometheus-stack": KUBE_PROMETHEUS_STACK_IMAGES_READ_AT,
    }
