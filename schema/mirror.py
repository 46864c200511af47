"""`rocm-stack:mirror`: air-gapped clusters and hosts. Every image, Helm chart and CRD file the stack declares, on the
Docker hosts and on Kubernetes (chart values that name images included), is taken from the mirror instead of the
public registries, chart repositories and raw.githubusercontent.com (docs/operations.md, "Air-gapped install").

The layouts are those the usual copy tools make, so a mirror is filled without renaming anything:

- images: `<registry>/<source registry>/<path>[:tag][@digest]`, the layout of `skopeo sync --scoped` ("The FQDN of
  the registry hosting the image will be added as new root namespace of the image", containers/skopeo
  docs/skopeo-sync.1.md), with the source named as Docker names it (`rocm/pytorch` is `docker.io/rocm/pytorch`,
  `nginx` is `docker.io/library/nginx`: distribution/reference normalize.go splitDockerDomain);
- charts: `<charts>/<chart name>` of an OCI registry, where `helm push <chart>-<version>.tgz <charts>` puts it
  ("the chart name ... [is] appended to the registry reference": https://helm.sh/docs/topics/registries/);
- files (CRDs): `<files>/<host>/<path>` of an HTTP(S) server, the URL's host and path under the prefix (what
  `wget --mirror`/`wget -x` writes locally: `<host>/<path>`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated
from urllib.parse import urlsplit

from pydantic import AfterValidator

from .base import ConfigModel, matching
from .types import valid_tcp_port

if TYPE_CHECKING:
    from .kubernetes import KubernetesConfig

DOCKER_HUB = "docker.io"
# A registry host and optional path: lowercase DNS name (or IP), optional port, then path components.
_REGISTRY = r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*"
RegistryPrefix = Annotated[
    str,
    matching(_REGISTRY, "a registry host and optional path, e.g. registry.example.internal/mirror"),
    AfterValidator(valid_tcp_port),
]
ChartPrefix = Annotated[
    str,
    matching(rf"oci://{_REGISTRY}", "an OCI chart repository, e.g. oci://registry.example.internal/charts"),
    AfterValidator(valid_tcp_port),
]
FilePrefix = Annotated[
    str,
    matching(r"https://[^\s/?#]+(/[^\s?#]*[^\s/?#])?", "an https:// URL prefix, e.g. https://files.example.internal"),
    AfterValidator(valid_tcp_port),
]


def split_image(reference: str) -> tuple[str, str]:
    """(registry, rest) of an image reference as Docker reads it: the first component is a registry when it has a '.'
    or ':' or is `localhost`, else the reference is Docker Hub's, whose one-component names are under `library/`
    (distribution/reference normalize.go splitDockerDomain)."""
    first, slash, rest = reference.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        return ("docker.io" if first == "index.docker.io" else first), rest
    return DOCKER_HUB, reference if slash else f"library/{reference}"


def qualified(reference: str) -> str:
    """The fully qualified reference (registry/path:tag@digest), as `skopeo`, `crane` and the mirror take it."""
    registry, rest = split_image(reference)
    return f"{registry}/{rest}"


class MirrorConfig(ConfigModel):
    """Where an air-gapped stack takes its images, charts and CRD files from (docs/operations.md, "Air-gapped
    install"); `rocm-stack images --stack S` lists what to copy there."""

    registry: RegistryPrefix
    """Image registry prefix: `rocm/pytorch:T` is pulled as `<registry>/docker.io/rocm/pytorch:T` (skopeo sync
    --scoped's layout)."""
    charts: ChartPrefix
    """OCI chart repository prefix: every chart is installed from `<charts>/<chart name>` (where `helm push` puts it)."""
    files: FilePrefix
    """HTTPS prefix of the CRD files the stack applies itself: `https://HOST/PATH` is read from `<files>/HOST/PATH`."""

    def image(self, reference: str) -> str:
        return f"{self.registry}/{qualified(reference)}"

    def repository(self, repository: str) -> str:
        """An image repository without tag (a chart value that takes its tag elsewhere)."""
        return f"{self.registry}/{qualified(repository)}"

    def registry_of(self, registry: str) -> str:
        """A chart value that names only a source registry (`quay.io`): the mirror's part holding its images."""
        return f"{self.registry}/{registry}"

    def chart(self, chart: str) -> str:
        """A chart's OCI reference in the mirror: by its name (the last component of an oci:// reference)."""
        return f"{self.charts}/{chart.rsplit('/', 1)[-1]}"

    def url(self, url: str) -> str:
        parts = urlsplit(url)
        return f"{self.files}/{parts.netloc}{parts.path}"


def problems(
    mirror: MirrorConfig | None, k8s: KubernetesConfig | None, registry_server: str | None
) -> Iterable[tuple[str, str]]:
    """The Docker hosts' registry login is for the registry they pull from, the mirror's. The operator's driver
    repository is the cluster's own (KMM pushes the images it builds there and the nodes pull them from it): the
    stack does not move it, so with a mirror it must be in the mirror's registry."""
    if mirror is None:
        return
    host = mirror.registry.split("/", 1)[0]
    if registry_server is not None and registry_server != host:
        yield (
            "registry.server",
            f"'{registry_server}' is not the mirror's registry '{host}' (rocm-stack:mirror.registry), the only one the "
            f"hosts pull from with a mirror: log in to '{host}', or remove rocm-stack:registry",
        )
    if k8s is None or k8s.mode != "operator":
        return
    image = k8s.gpu_operator.device_config.driver.image
    if image is not None and not image.startswith(f"{mirror.registry}/"):
        yield (
            "kubernetes.gpuOperator.deviceConfig.driver.image",
            f"'{image}' is outside rocm-stack:mirror.registry '{mirror.registry}': name a repository there "
            f"(e.g. {mirror.registry}/amd/amdgpu-driver); the nodes pull the driver images from it, and changing "
            "it replaces the DeviceConfig (docs/operations.md, Air-gapped install)",
        )
