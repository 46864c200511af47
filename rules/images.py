"""The rules on what the stack pulls: image references and Helm chart versions pinned, Helm repositories over
https."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .plan import CONTAINER, DEVICE_CONFIG, HELM_RELEASE, REMOTE_IMAGE, _containers, _dig, _mapping, pod_specs


# --- images ---------------------------------------------------------------------------------------------


# Tags that name a branch or a channel rather than a build: a deny-list of the conventional names that registries
# re-push (rocm/pytorch's `latest-release`, rocm/pytorch-nightly's `nightly`, the JobSet chart's staging `main`,
# `stable`/`edge` channels). A tag that is none of these may still be re-pushed: only a digest pins for sure.
MOVING_TAGS = frozenset(
    {
        "nightly",
        "latest-release",
        "main",
        "master",
        "dev",
        "develop",
        "devel",
        "edge",
        "stable",
        "head",
        "canary",
        "next",
        "beta",
        "alpha",
        "testing",
        "unstable",
        "release",
        "current",
        "trunk",
    }
)


def unpinned_reason(reference: str) -> str | None:
    """Why an image reference does not pin one image ("has no tag, ..."), or None. A digest or an image ID pins;
    `latest` in any case or spelling (`nightly-latest`, `LATEST`) never does, nor a MOVING_TAGS name. The stack
    config's check (schema/docker.py image_pin_problem) uses this rule too, so config and pack never disagree."""
    if reference.startswith("sha256:") or "@" in reference:
        return None  # an image ID or a digest names exactly one image
    repository = reference.rsplit("/", 1)[-1]  # a registry host may carry a port: registry:5000/rocm/x
    tag = repository.partition(":")[2]
    if not tag:
        return "has no tag, so it pulls ':latest'"
    if re.fullmatch(r"(.*[-_.])?latest", tag, re.IGNORECASE) or tag.lower() in MOVING_TAGS:
        return f"uses the moving tag '{tag}'"
    return None


def image_pin_problem(reference: str) -> str | None:
    """Why an image reference is not pinned, or None."""
    if not reference:
        return "no image reference"
    reason = unpinned_reason(reference)
    return f"image '{reference}' {reason}; pin a version tag or a digest" if reason else None


# The DeviceConfig's images (amd.com_deviceconfigs.yaml, GPU Operator v1.5.1). Not spec.driver.image: a repository
# the operator tags itself (<distro>-<release>-<kernel>-<driver version>).
DEVICE_CONFIG_IMAGES = (
    ("devicePlugin", "devicePluginImage"),
    ("devicePlugin", "nodeLabellerImage"),
    ("metricsExporter", "image"),
    ("testRunner", "image"),
    ("configManager", "image"),
    ("commonConfig", "utilsContainer", "image"),
)


def unpinned_images(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """RemoteImage `name`, Container `image`, every container image of every pod spec and the DeviceConfig's images
    (unset ones are the operator's defaults, fixed per operator release)."""
    if resource_type == REMOTE_IMAGE:
        references = [("", props.get("name") or "")]
    elif resource_type == CONTAINER:
        references = [("", props.get("image") or "")]
    elif resource_type == DEVICE_CONFIG:
        spec = _mapping(props.get("spec"))
        references = [
            (f"spec.{'.'.join(path)}: ", image) for path in DEVICE_CONFIG_IMAGES if (image := _dig(spec, path))
        ]
    else:
        references = [
            (f"{where}container '{c.get('name')}': ", c.get("image") or "")
            for where, spec in pod_specs(resource_type, props)
            for c in _containers(spec)
        ]
    return [where + problem for where, ref in references if (problem := image_pin_problem(ref))]


# --- Helm charts ------------------------------------------------------------------------------------------

# An exact SemVer 2 version, `v` allowed (charts tag either way). Helm's --version is a constraint: "a specific tag
# (e.g. 1.1.1) or ... a valid range (e.g. ^2.0.0). If this is not specified, the latest version is used" (`helm
# install --help`, helm/helm pkg/cmd/flags.go addChartPathOptionsFlags).
_EXACT_VERSION = re.compile(r"v?(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?")


def chart_version_problem(version: Any) -> str | None:
    """Why a Helm chart version does not pin one chart (None: an exact version)."""
    if not version:
        return "has no chart version, so Helm installs the newest; pin an exact version (e.g. 1.5.1)"
    if not _EXACT_VERSION.fullmatch(str(version)):
        return f"chart version '{version}' is a range or not a version; pin an exact version (e.g. 1.5.1)"
    return None


def helm_repository_problem(url: Any) -> str | None:
    """Why prod refuses a Helm repository (None: allowed): plain http lets anyone on the path swap the chart (Helm
    verifies no signature unless asked: `helm install --verify`)."""
    if str(url or "").lower().startswith("http://"):
        return f"Helm repository '{url}' is plain http: anyone on the path could swap the chart; use https (or oci://)"
    return None


def helm_release_problems(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """A Helm Release's chart version (every stack): `chart` may itself be a full OCI reference; the version is
    separate either way."""
    if resource_type != HELM_RELEASE:
        return []
    problem = chart_version_problem(props.get("version"))
    return [f"Helm release of chart '{props.get('chart')}' {problem}"] if problem else []
