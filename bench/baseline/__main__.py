"""Baseline for `python -m bench`: declare a list of custom resources straight with the provider SDK classes.

No components, no config model: each entry of the JSON file named by config `baseline:resources`
({key, type, name, inputs, provider, dependsOn, outputOf}) becomes one SDK resource with the same inputs.
`bench/__main__.py` writes that list from what the real program declared, so both declare the same resources.
"""

import importlib
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pulumi

# Top-level keys the SDK class sets itself.
_SET_BY_CLASS = {"apiVersion", "kind", "compat"}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _sdk_class(type_token: str) -> type | None:
    """`docker:index/container:Container` -> pulumi_docker.Container, `kubernetes:apps/v1:DaemonSet` ->
    pulumi_kubernetes.apps.v1.DaemonSet, `pulumi:providers:docker` -> pulumi_docker.Provider."""
    package, module, kind = type_token.split(":")
    if package == "pulumi" and module == "providers":
        return importlib.import_module(f"pulumi_{kind}").Provider
    group, _, version = module.partition("/")
    path = f"pulumi_{package}" if group == "index" else f"pulumi_{package}.{group.split('.')[0]}.{version}"
    try:
        return getattr(importlib.import_module(path), kind, None)
    except ImportError:
        return None


def _arguments(sdk_class: type, inputs: dict[str, Any], provider_resource: bool) -> dict[str, Any]:
    accepted = inspect.signature(sdk_class._internal_init).parameters
    arguments = {}
    for key, value in inputs.items():
        if key in _SET_BY_CLASS or _snake(key) not in accepted:
            continue
        if provider_resource and isinstance(value, str) and (value[:1] in "[{" or value in ("true", "false")):
            value = json.loads(value)  # the engine receives non-string provider inputs as JSON text
        arguments[_snake(key)] = value
    return arguments


declared: dict[str, pulumi.CustomResource] = {}
for entry in json.loads(Path(pulumi.Config("baseline").require("resources")).read_text()):
    inputs = dict(entry["inputs"])
    for key, source in entry.get("outputOf", {}).items():
        inputs[key] = getattr(declared[source["key"]], source["output"])
    opts = pulumi.ResourceOptions(
        provider=declared[entry["provider"]] if entry.get("provider") else None,
        depends_on=[declared[key] for key in entry.get("dependsOn", [])],
    )
    sdk_class = _sdk_class(entry["type"])
    if sdk_class is not None:
        resource = sdk_class(
            entry["name"], **_arguments(sdk_class, inputs, entry["type"].startswith("pulumi:")), opts=opts
        )
    elif entry["type"].startswith("kubernetes:"):
        from pulumi_kubernetes.apiextensions import CustomResource

        resource = CustomResource(
            entry["name"], api_version=inputs.pop("apiVersion"), kind=inputs.pop("kind"), **inputs, opts=opts
        )
    else:
        resource = pulumi.CustomResource(entry["type"], entry["name"], inputs, opts)
    declared[entry["key"]] = resource
