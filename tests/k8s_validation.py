"""Validate declared Kubernetes objects the way an API server would, offline and strictly.

- Built-in kinds: `kubernetes_validate` (strict: unknown fields fail) for a Kubernetes version.
- Custom resources: the CRD's structural `openAPIV3Schema`, turned into a strict JSON schema. The API server
  prunes (silently drops) unknown fields of a CRD object, so a misspelled field would deploy "fine" and do
  nothing; here it fails.

Reusable by every concern's tests:

    from k8s_validation import CrdSchemas, validate_object
    crds = CrdSchemas.from_files(DATA / "deviceconfig-crd.yaml")
    validate_object(manifest, crds)          # raises ManifestInvalid listing every error
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from pydantic import ValidationError

from schema.types import label_key_problem, label_value_problem
from schema.workloads import Toleration

KUBERNETES_VERSION = "1.30.0"


class ManifestInvalid(AssertionError):
    """An object the API server would reject (or, for a CRD object, silently prune)."""


def strict_structural_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON schema that rejects what a structural CRD schema would prune or reject.

    - `properties` without `additionalProperties` / `x-kubernetes-preserve-unknown-fields`: closed object;
    - `x-kubernetes-int-or-string`: integer or string;
    - `nullable: true`: also null;
    - `x-kubernetes-embedded-resource`: apiVersion/kind/metadata allowed beside the declared properties.
    """
    node = {
        k: copy.deepcopy(v)
        for k, v in schema.items()
        if k not in ("properties", "items", "additionalProperties", "anyOf", "allOf", "oneOf", "not")
    }
    if "properties" in schema:
        node["properties"] = {k: strict_structural_schema(v) for k, v in schema["properties"].items()}
    if "items" in schema:
        node["items"] = strict_structural_schema(schema["items"])
    for keyword in ("anyOf", "allOf", "oneOf"):
        if keyword in schema:
            node[keyword] = [strict_structural_schema(s) for s in schema[keyword]]
    if "not" in schema:
        node["not"] = strict_structural_schema(schema["not"])
    additional = schema.get("additionalProperties")
    if isinstance(additional, Mapping):
        node["additionalProperties"] = strict_structural_schema(additional)
    elif additional is not None:
        node["additionalProperties"] = additional
    elif "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        node["additionalProperties"] = False
    if schema.get("x-kubernetes-embedded-resource") and "properties" in node:
        for name in ("apiVersion", "kind"):
            node["properties"].setdefault(name, {"type": "string"})
        node["properties"].setdefault("metadata", {"type": "object"})
    if schema.get("x-kubernetes-int-or-string") and "anyOf" not in schema:
        node.pop("type", None)
        node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and isinstance(node.get("type"), str):
        node["type"] = [node["type"], "null"]
    return node


def yaml_documents(path: Path) -> list[Any]:
    """The documents of a YAML file, with libyaml's loader where PyYAML has it (the LeaderWorkerSet CRD alone is
    1.3 MB)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return list(yaml.load_all(Path(path).read_text(), Loader=loader))


@dataclass
class CrdSchemas:
    """Strict schemas keyed by (apiVersion, kind), read from CustomResourceDefinition files."""

    schemas: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_files(cls, *paths: Path) -> CrdSchemas:
        crds = cls()
        for path in paths:
            for document in yaml_documents(path):
                if document and document.get("kind") == "CustomResourceDefinition":
                    crds.add(document)
        return crds

    def add(self, crd: Mapping[str, Any]) -> None:
        spec = crd["spec"]
        for version in spec["versions"]:
            if version.get("served", True):
                schema = strict_structural_schema(version["schema"]["openAPIV3Schema"])
                # Every object needs these; the CRD schema leaves them to the API machinery.
                schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
                self.schemas[(f"{spec['group']}/{version['name']}", spec["names"]["kind"])] = schema

    def get(self, api_version: str, kind: str) -> dict[str, Any] | None:
        return self.schemas.get((api_version, kind))


def _json_path(error: jsonschema.ValidationError) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path) or "."


def custom_resource_errors(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    validator = jsonschema.Draft7Validator(schema)
    return sorted(f"{_json_path(e)}: {e.message}" for e in validator.iter_errors(obj))


def validate_object(
    obj: Mapping[str, Any], crds: CrdSchemas | None = None, kubernetes_version: str = KUBERNETES_VERSION
) -> None:
    """Raise ManifestInvalid unless the object is valid. A kind that is neither built in nor among `crds`
    fails too: nothing is skipped silently."""
    api_version, kind = obj.get("apiVersion", ""), obj.get("kind", "")
    name = f"{kind} {obj.get('metadata', {}).get('name', '?')}"
    schema = crds.get(api_version, kind) if crds is not None else None
    if schema is not None:
        errors = custom_resource_errors(obj, schema)
        if errors:
            raise ManifestInvalid(f"{name} ({api_version}) violates its CRD:\n  " + "\n  ".join(errors))
        # A JobSet embeds batch/v1 Job templates: checked against the built-in Job schema too (its CRD copy of
        # the pod spec carries no formats, e.g. for quantities).
        for index, replicated in enumerate(obj.get("spec", {}).get("replicatedJobs", []) if kind == "JobSet" else []):
            template = replicated.get("template", {})
            validate_object(
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {**template.get("metadata", {}), "name": f"replicatedJobs-{index}"},
                    "spec": template.get("spec", {}),
                },
                None,
                kubernetes_version,
            )
        # A LeaderWorkerSet embeds core/v1 pod templates: checked against the built-in PodTemplate schema too.
        templates = obj.get("spec", {}).get("leaderWorkerTemplate", {}) if kind == "LeaderWorkerSet" else {}
        for role in ("leaderTemplate", "workerTemplate"):
            if role in templates:
                validate_object(
                    {
                        "apiVersion": "v1",
                        "kind": "PodTemplate",
                        "metadata": {"name": role.lower()},
                        "template": templates[role],
                    },
                    None,
                    kubernetes_version,
                )
        # CRD schemas leave metadata to the API server's ObjectMeta: check it as that of a built-in object.
        obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata", {})}
    try:
        kubernetes_validate.validate(dict(obj), kubernetes_version, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        raise ManifestInvalid(f"{name}: no schema for {api_version} {kind}; pass its CRD") from None
    except kubernetes_validate.ValidationError as error:
        raise ManifestInvalid(
            f"{name} is invalid for Kubernetes {kubernetes_version}: {_json_path(error)}: {error.message}"
        ) from None


def validate_all(
    objects: Iterable[Mapping[str, Any]], crds: CrdSchemas | None = None, kubernetes_version: str = KUBERNETES_VERSION
) -> int:
    """Validate every object, report all failures at once; returns how many were validated."""
    failures, count = [], 0
    for obj in objects:
        count += 1
        try:
            validate_object(obj, crds, kubernetes_version)
        except ManifestInvalid as invalid:
            failures.append(str(invalid))
    if failures:
        raise ManifestInvalid("\n".join(failures))
    return count


# --- the custom resources this stack declares -------------------------------------------------------------

_DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
_RELABEL = {
    "type": "object",
    "properties": {
        "action": {
            "type": "string",
            "enum": [
                "replace",
                "Replace",
                "keep",
                "Keep",
                "drop",
                "Drop",
                "hashmod",
                "HashMod",
                "labelmap",
                "LabelMap",
                "labeldrop",
                "LabelDrop",
                "labelkeep",
                "LabelKeep",
                "lowercase",
                "Lowercase",
                "uppercase",
                "Uppercase",
                "keepequal",
                "KeepEqual",
                "dropequal",
                "DropEqual",
            ],
        },
        "modulus": {"type": "integer"},
        "regex": {"type": "string"},
        "replacement": {"type": "string"},
        "separator": {"type": "string"},
        "sourceLabels": {"type": "array", "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}},
        "targetLabel": {"type": "string"},
    },
}
# The ServiceMonitor fields this stack sets, transcribed from prometheus-operator's
# monitoring.coreos.com_servicemonitors.yaml (v0.84.1); closed objects, so a misspelled field fails.
SERVICE_MONITOR_SUBSET = strict_structural_schema(
    {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "apiVersion": {"type": "string", "enum": ["monitoring.coreos.com/v1"]},
            "kind": {"type": "string", "enum": ["ServiceMonitor"]},
            "metadata": {"type": "object"},
            "spec": {
                "type": "object",
                "required": ["endpoints", "selector"],
                "properties": {
                    "jobLabel": {"type": "string"},
                    # "attachMetadata: Attaches node metadata to discovered targets. Requires Prometheus v2.37.0 and
                    # above." (same CRD; the DeviceConfig CRD's serviceMonitor has the same field).
                    "attachMetadata": {"type": "object", "properties": {"node": {"type": "boolean"}}},
                    "namespaceSelector": {
                        "type": "object",
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "selector": {
                        "type": "object",
                        "properties": {
                            "matchExpressions": {"type": "array"},
                            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                        },
                    },
                    "endpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "scheme": {"type": "string", "enum": ["http", "https"]},
                                "interval": {"type": "string", "pattern": _DURATION},
                                "scrapeTimeout": {"type": "string", "pattern": _DURATION},
                                "honorLabels": {"type": "boolean"},
                                "honorTimestamps": {"type": "boolean"},
                                "relabelings": {"type": "array", "items": _RELABEL},
                                "metricRelabelings": {"type": "array", "items": _RELABEL},
                            },
                        },
                    },
                },
            },
        },
    }
)


@functools.cache
def stack_crds() -> CrdSchemas:
    """Schemas of every custom resource kind the program declares: the vendored CRDs of the GPU Operator,
    JobSet, Kueue (ResourceFlavor, ClusterQueue, LocalQueue), KEDA (ScaledObject), LeaderWorkerSet and the Prometheus
    Operator's PrometheusRule, and the ServiceMonitor subset above. Built once per test process and shared (read
    only): the files are 2 MB of YAML, ~2.5 s to build with the pure-Python loader."""
    data = Path(__file__).parent / "data"
    crds = CrdSchemas.from_files(
        data / "kubernetes" / "deviceconfig-crd.yaml",
        data / "kubernetes" / "jobset.x-k8s.io_jobsets.yaml",
        *(
            data / "kubernetes" / f"kueue.x-k8s.io_{kind}.yaml"
            for kind in ("resourceflavors", "clusterqueues", "localqueues")
        ),
        data / "kubernetes" / "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
        data / "monitoring" / "crds" / "monitoring.coreos.com_prometheusrules.yaml",
        data / "kubernetes" / "keda.sh_scaledobjects.yaml",
    )
    crds.schemas[("monitoring.coreos.com/v1", "ServiceMonitor")] = SERVICE_MONITOR_SUBSET
    return crds


# objectmeta.go ValidateAnnotations: TotalAnnotationSizeLimitB int = 256 * (1 << 10), keys and values together.
TOTAL_ANNOTATION_SIZE_LIMIT = 256 * (1 << 10)


def declared_metadata(value: Any, key: str = "", found: dict[str, list[Any]] | None = None) -> dict[str, list[Any]]:
    """The label sets (labels, matchLabels, nodeSelector, a selector of text values), annotations and tolerations
    anywhere in `value`: resources' inputs, chart values included."""
    found = {"labels": [], "annotations": [], "tolerations": []} if found is None else found
    if isinstance(value, Mapping):
        texts = all(isinstance(v, str) for v in value.values())
        if key in ("labels", "matchLabels", "nodeSelector") or (key == "selector" and texts):
            found["labels"].append(value)
        elif key == "annotations":
            found["annotations"].append(value)
        for inner_key, inner in value.items():
            declared_metadata(inner, inner_key, found)
    elif isinstance(value, list):
        if key == "tolerations":
            found["tolerations"].extend(value)
        for item in value:
            declared_metadata(item, key, found)
    return found


def metadata_problems(found: Mapping[str, list[Any]]) -> list[str]:
    """What the API server would refuse of `declared_metadata`, by the stack's one implementation of its rules
    (schema/types.py label_key_problem, label_value_problem; schema/workloads.py Toleration)."""
    problems = [
        f"label {k}={v}: {problem}"
        for labels in found["labels"]
        for k, v in labels.items()
        if (problem := label_key_problem(k) or label_value_problem(str(v)))
    ]
    for notes in found["annotations"]:
        problems += [f"annotation {k}: {p}" for k in notes if (p := label_key_problem(k.lower()))]
        if sum(len(k) + len(str(v)) for k, v in notes.items()) > TOTAL_ANNOTATION_SIZE_LIMIT:
            problems.append(f"annotations {sorted(notes)} exceed {TOTAL_ANNOTATION_SIZE_LIMIT} bytes")
    for toleration in found["tolerations"]:
        try:
            Toleration.model_validate(toleration)
        except ValidationError as error:
            problems.append(f"toleration {toleration}: {error.errors()[0]['msg']}")
    return problems
