"""The mirror seam (issue 33 item 9): with `rocm-stack:mirror` set, every reference a plan makes to an image, a chart or
a file is inside the mirror. An allow-list: a reference is found by where it stands (a value whose key names an image,
repository or registry, a release's chart and repository, a ConfigFile's file, a RemoteImage's name, the image a
Docker host script pulls) or by its shape (any URL), never by whose registry it names; each must start with one of the
mirror's prefixes. The only other references allowed are addresses inside the cluster or the host (a `.svc` name,
loopback, an nginx variable) and the image ids Docker containers are created from (`sha256:`, the RemoteImage's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import yaml

from schema.mirror import MirrorConfig
from tools.synth import Plan, rendered_files

# Keys whose value names an image, a repository or a registry (chart values, pod specs, the DeviceConfig).
_REFERENCE_KEY = re.compile(r"(?i).*(image|repository|registry).*")
# ... except those that name how or with what credentials to pull.
_NOT_A_REFERENCE_KEY = re.compile(r"(?i).*(pullpolicy|pullsecret|secret|tls|insecure).*")
_URL = re.compile(r"^(https?|oci)://\S+$")
_PULL = re.compile(r"\bdocker pull (\S+)")


def _strings(value: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _strings(item, (*path, str(key)))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, path)
    elif isinstance(value, str) and value and "\n" not in value:
        yield path, value


def _is_reference(resource_type: str, path: tuple[str, ...], value: str) -> bool:
    key = path[-1] if path else ""
    if _URL.match(value):
        return True
    if resource_type == "docker:index/remoteImage:RemoteImage" and path == ("name",):
        return True
    if resource_type == "kubernetes:helm.sh/v3:Release" and path in (("chart",), ("repositoryOpts", "repo")):
        return True
    if resource_type == "kubernetes:yaml/v2:ConfigFile" and path == ("file",):
        return True
    return bool(_REFERENCE_KEY.fullmatch(key)) and not _NOT_A_REFERENCE_KEY.fullmatch(key)


def _inside(value: str, mirror: MirrorConfig) -> bool:
    if value.startswith((f"{mirror.registry}/", f"{mirror.charts}/", f"{mirror.files}/", "sha256:")):
        return True
    if _URL.match(value):
        host = urlsplit(value).hostname or ""
        return host in ("localhost", "127.0.0.1") or host.endswith((".svc", ".svc.cluster.local")) or "$" in value
    return False


def references(plan: Plan) -> Iterator[tuple[str, str]]:
    """(where, reference) of every reference in plan.json, the manifests, the Helm values and the host scripts."""
    for resource in plan.resources:
        for path, value in _strings(resource.get("inputs") or {}):
            if _is_reference(resource["type"], path, value):
                yield f"plan.json {resource['name']} {'.'.join(path)}", value
    for name, text in rendered_files(plan).items():
        if name.startswith(("manifests/", "helm/")):
            kind = "kubernetes:helm.sh/v3:Release" if name.startswith("helm/") else ""
            document = yaml.safe_load(text)
            if kind:  # the release file spells the chart's repository `repo`
                document = {**document, "repositoryOpts": {"repo": document.pop("repo", None)}}
            for path, value in _strings(document):
                if _is_reference(kind, path, value):
                    yield f"{name} {'.'.join(path)}", value
        elif name.startswith("docker/"):
            for image in _PULL.findall(text):
                yield f"{name} docker pull", image
        elif name == "plan.json":
            json.loads(text)  # the same resources as above


def outside_mirror(plan: Plan, mirror: MirrorConfig) -> list[str]:
    """One line per reference the plan makes outside the mirror."""
    return sorted({f"{where}: {value}" for where, value in references(plan) if not _inside(value, mirror)})
