"""The catalogue's rule prod-declared-by-the-program: in prod, what the program itself declares for prod, and nothing
else (issue 34 item 3).

A list of forbidden things is always one field short: a tampered program found 14 ways past the other rules
(`mounts` instead of `volumes`, `deviceCgroupRules`, `apparmor=unconfined`, a host PID namespace, a Service's
`externalIPs`, a ClusterRoleBinding...). So the pack also judges prod the other way round: every resource type,
every field and every value the plan declares must be one the program declares for the committed prod stacks,
whatever its name. The list is derived from the program's own synth of those stacks (`rocm-stack allowlist
--write`, `tools/allowlist.py`), committed as the pack's data (policy/rocm_policy/allowlist.prod.json) and checked
current by the tests, so a
plan under judgement never decides what it is judged by; a change of the program or of a prod stack file (both
the platform owners', .github/CODEOWNERS) is a change of the list, reviewed as such.

What the list holds, per resource type and role (ROLE_OF: a Docker container's image repository and the stack's
labels, a Kubernetes object's `app.kubernetes.io/name`):
- `fields`: each leaf path (list items as `[]`) with the values declared there (JSON texts); a value another
  resource's output makes (an image ID, a container ID: COMPUTED) matches any text in its place, and a Pulumi
  secret (synth shows "[secret]", the pack sees it decrypted) any value under its path;
- `required`: the leaf paths every declaration of the role has: a plan that drops one (`ingress: [{}]`, a
  securityContext emptied) loosens what the program declares.

Entry points: `derive` (the generator's), `load` and `problems` (the pack's binding of the entry, which hands it the
engine's inputs as plain data with UNKNOWN where the engine does not know a value during preview).
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import CHECK_LABEL, HEALTH_LABEL, MONITORING_LABEL, PARTITION_LABEL
from .rule import PROD, Declared, Example, Rule

CONTAINER = "docker:index/container:Container"
REMOTE_IMAGE = "docker:index/remoteImage:RemoteImage"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
CRD = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
PROVIDERS = "pulumi:providers:"
# Where synth shows a secret (tools/synth.py); the engine hands the pack the decrypted value instead.
SECRET = "[secret]"
# Stands, in a derived value, for the text another resource's output gives it.
COMPUTED = "<computed>"
LIST_ITEM = "[]"
# Labels the program gives its Docker containers (components/docker, components/monitoring) and its Kubernetes
# objects (components/workloads/pods.py labels_of); they name a role, whose allow-list applies.
ROLE_LABELS = (PARTITION_LABEL, CHECK_LABEL, MONITORING_LABEL, HEALTH_LABEL)
# Labels whose value names a host's partition: the role is being one (a partition, a vLLM server's health check).
NAMED_ROLES = (PARTITION_LABEL, HEALTH_LABEL)
APP_LABEL = "app.kubernetes.io/name"

# The schema defaults of terraform-provider-docker v4.5.0 (what pulumi-docker 5.2.0 bridges), by input path, for the
# inputs the program may leave unset: the engine sends the pack a resource's inputs as the provider's Check returns them
# (pulumi/pulumi pkg/resource/deploy/step_generator.go: `new.Inputs = resp.Properties` before the analyzers'
# AnalyzerResource{Properties: inputs}), and the bridge's Check fills in schema defaults, nested blocks' too. Unset and
# default are one value. Go source lines: internal/provider/resource_docker_container.go (rm L60, read_only L67, start
# L75, wait L82, wait_timeout L89, attach L96, logs L103, must_run L125, restart L233, remove_volumes L259, ports ip
# L512 and protocol L528, devices permissions L687, device_requests driver L786 and count L793, memory_reservation
# L853, network_mode L906, upload executable L1018, healthcheck interval L1062, timeout L1069, start_period L1076,
# start_interval L1083, retries L1090, container_read_refresh_timeout_milliseconds L1102 with
# resource_docker_container_funcs.go L34, tty L1135, stdin_open L1142), resource_docker_image.go (platform L94) and
# resource_docker_network.go (ipam_driver L88).
PROVIDER_DEFAULTS: dict[str, dict[str, Any]] = {
    CONTAINER: {
        ".rm": False,
        ".readOnly": False,
        ".start": True,
        ".wait": False,
        ".waitTimeout": 60,
        ".attach": False,
        ".logs": False,
        ".mustRun": True,
        ".restart": "no",
        ".removeVolumes": True,
        ".ports[].ip": "0.0.0.0",
        ".ports[].protocol": "tcp",
        ".devices[].permissions": "rwm",
        ".deviceRequests[].driver": "cdi",
        ".deviceRequests[].count": 0,
        ".memoryReservation": 0,
        ".networkMode": "bridge",
        ".uploads[].executable": False,
        ".healthcheck.interval": "0s",
        ".healthcheck.timeout": "0s",
        ".healthcheck.startPeriod": "0s",
        ".healthcheck.startInterval": "0s",
        ".healthcheck.retries": 0,
        ".containerReadRefreshTimeoutMilliseconds": 15000,
        ".tty": False,
        ".stdinOpen": False,
    },
    REMOTE_IMAGE: {".platform": ""},
    "docker:index/network:Network": {".ipamDriver": "default"},
}
# The bridge's record of which inputs it defaulted (pulumi-terraform-bridge), not an input of the program's.
BRIDGE_KEYS = frozenset({"__defaults"})


def _role_labels(props: Mapping[str, Any]) -> dict[str, str]:
    labels = props.get("labels")
    if isinstance(labels, Sequence) and not isinstance(labels, str):  # Docker: [{label, value}]
        pairs = {str(x.get("label")): str(x.get("value")) for x in labels if isinstance(x, Mapping)}
    else:
        metadata = props.get("metadata")
        meta_labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
        pairs = {str(k): str(v) for k, v in meta_labels.items()} if isinstance(meta_labels, Mapping) else {}
    return pairs


def repository(reference: str) -> str:
    """An image reference without its digest and tag: `gcr.io/cadvisor/cadvisor`."""
    name = reference.split("@", 1)[0]
    last = name.rsplit("/", 1)
    return name if ":" not in last[-1] else name[: name.rindex(":")]


def role_of(resource_type: str, props: Mapping[str, Any], images: Iterable[str] = ()) -> str:
    """The role a declaration plays: a Docker container by the repositories of the images it runs (the RemoteImages
    its `image` depends on) and the stack's labels, so the cAdvisor label on another image is a role the program
    never declares; a Kubernetes object by its app.kubernetes.io/name; anything else by its type alone."""
    labels = _role_labels(props)
    parts = [f"image={r}" for r in sorted({repository(i) for i in images})]
    if resource_type == CONTAINER:
        parts += [f"{k}" if k in NAMED_ROLES else f"{k}={labels[k]}" for k in ROLE_LABELS if k in labels]
    elif APP_LABEL in labels:
        parts.append(f"{APP_LABEL}={labels[APP_LABEL]}")
    return ";".join(parts)


def _step(key: str) -> str:
    return f".{key}" if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", key) else f"[{json.dumps(key)}]"


def _normal(value: Any) -> Any:
    """A leaf as JSON has it: the engine's numbers are floats (protobuf Struct), the plan's integers."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value


class _Unknown:
    """A value the engine does not know during preview (pulumi_policy's proxies raise UnknownValueError for it)."""

    def __repr__(self) -> str:
        return "unknown"


UNKNOWN = _Unknown()


def leaves(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) of every leaf of a resource's inputs (plain data); an empty object or list is a leaf."""
    if isinstance(value, Mapping):
        if not value:
            yield path, {}
        for key in value:
            if not path and key in BRIDGE_KEYS:
                continue
            yield from leaves(value[key], path + _step(str(key)))
    elif isinstance(value, Sequence) and not isinstance(value, str):
        if not value:
            yield path, []
        for child in value:
            yield from leaves(child, path + LIST_ITEM)
    else:
        yield path, _normal(value)


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@dataclass
class Role:
    """The declarations of one role: leaf path -> value texts, and the leaf paths all of them have."""

    fields: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    required: set[str] | None = None
    secret: set[str] = field(default_factory=set)  # paths whose value is a secret: any value, any shape below


def derive(plans: Iterable[Sequence[Mapping[str, Any]]], computed: Iterable[str]) -> dict[str, Any]:
    """The allow-list of plans shaped like plan.json's `resources` (type, urn, inputs, depends_on); `computed`: the
    texts the synth's mock engine gave as other resources' outputs (image IDs, container IDs, autonames)."""
    outputs = sorted({c for c in computed if c}, key=len, reverse=True)
    roles: dict[str, dict[str, Role]] = defaultdict(lambda: defaultdict(Role))
    for resources in plans:
        images = {r["urn"]: str(r["inputs"].get("name")) for r in resources if r["type"] == REMOTE_IMAGE}
        for r in resources:
            used = [images[u] for u in r.get("depends_on", ()) if u in images]
            role = roles[r["type"]][role_of(r["type"], r["inputs"], used)]
            paths = set()
            for path, value in leaves(r["inputs"]):
                paths.add(path)
                if value == SECRET:
                    role.secret.add(path)
                    continue
                if isinstance(value, str):
                    for output in outputs:
                        value = value.replace(output, COMPUTED)
                role.fields[path].add(_text(value))
            role.required = paths if role.required is None else role.required & paths
    return {
        "types": {
            type_: {
                name: {
                    "fields": {p: [json.loads(t) for t in sorted(v)] for p, v in sorted(role.fields.items())},
                    "secret": sorted(role.secret),
                    "required": sorted(role.required or ()),
                }
                for name, role in sorted(by_role.items())
            }
            for type_, by_role in sorted(roles.items())
        }
    }


@functools.cache
def load(path: Path) -> dict[str, Any]:
    """The committed list (read once per pack process: the engine starts one per operation)."""
    return json.loads(path.read_text())


def _shown(path: str) -> str:
    return path.removeprefix(".")


def _computed(candidate: Any) -> bool:
    return isinstance(candidate, str) and COMPUTED in candidate


@dataclass(frozen=True)
class _Values:
    texts: frozenset[str]
    patterns: tuple[re.Pattern[str], ...]


_VALUES: dict[int, tuple[Sequence[Any], _Values]] = {}


def _values(allowed: Sequence[Any]) -> _Values:
    """The allowed values of a path as texts and patterns, once per list of the loaded allow-list."""
    cached = _VALUES.get(id(allowed))
    if cached is None or cached[0] is not allowed:
        patterns = tuple(
            re.compile(".+".join(re.escape(part) for part in c.split(COMPUTED)), re.DOTALL)
            for c in allowed
            if _computed(c)
        )
        cached = _VALUES[id(allowed)] = (allowed, _Values(frozenset(map(_text, allowed)), patterns))
    return cached[1]


def _matches(value: Any, allowed: Sequence[Any]) -> bool:
    """`value` is one of `allowed` (JSON values; COMPUTED in a text stands for any text)."""
    values = _values(allowed)
    if _text(value) in values.texts:
        return True
    return isinstance(value, str) and any(p.fullmatch(value) for p in values.patterns)


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == r or path.startswith((r + ".", r + "[")) for r in roots)


def _is_crd_of_a_config_file(resource_type: str, urn: str) -> bool:
    """A CustomResourceDefinition that a CRD file (a `yaml/v2:ConfigFile` whose pinned URL the list holds) registers
    as its child: its parent's type precedes its own in its URN's type chain."""
    chain = urn.split("::")[2].split("$") if urn.count("::") >= 3 else []
    return resource_type == CRD and len(chain) >= 2 and chain[-2] == CONFIG_FILE


@dataclass(frozen=True)
class Judged:
    """A resource under judgement: its inputs and the image references its `image` depends on."""

    type: str
    props: Mapping[str, Any]
    urn: str = ""
    images: tuple[str, ...] = ()


def problems(resource: Judged, allowlist: Mapping[str, Any]) -> list[str]:
    """Why a declaration is not one the program makes for prod (empty: it is)."""
    by_type = allowlist["types"]
    if resource.type.startswith(PROVIDERS) and resource.type in by_type:
        # A provider's inputs reach the engine JSON-encoded and with what the SDK and engine add (its plugin
        # version); where it connects is judged by `prod-host-access` (rules.docker_provider_problems).
        return []
    if resource.type not in by_type:
        if resource.type.startswith("pulumi:pulumi:Stack") or _is_crd_of_a_config_file(resource.type, resource.urn):
            return []
        return [f"resource type {resource.type} is not one the program declares for prod"]
    role_name = role_of(resource.type, resource.props, resource.images)
    role = by_type[resource.type].get(role_name)
    if role is None:
        known = ", ".join(f"'{n}'" for n in by_type[resource.type]) or "none"
        return [
            f"a {resource.type.rsplit(':', 1)[-1]} of role '{role_name}' (its image and the stack's labels) is not one "
            f"the program declares for prod (its roles: {known})"
        ]
    fields, secret, defaults = role["fields"], role["secret"], PROVIDER_DEFAULTS.get(resource.type, {})
    found: list[str] = []
    seen: set[str] = set()
    for path, value in leaves(resource.props):
        if _under(path, secret):
            seen.update(s for s in secret if _under(path, [s]))
            continue
        seen.add(path)
        if path not in fields:
            if path in defaults and _text(defaults[path]) == _text(value):
                continue  # what the provider's Check fills in for an input left unset
            found.append(f"field {_shown(path)} is not one the program declares for prod")
        elif value is UNKNOWN:
            if not any(map(_computed, fields[path])):
                found.append(f"{_shown(path)} is unknown during preview, where the program declares a constant")
        elif not _matches(value, fields[path]):
            allowed = ", ".join(map(_text, fields[path][:8])) + (", ..." if len(fields[path]) > 8 else "")
            found.append(f"{_shown(path)} = {_text(value)} is not a value the program declares for prod ({allowed})")
    found += [
        f"field {_shown(path)} is missing: every such declaration of the program has it"
        for path in role["required"]
        if path not in seen
    ]
    return found


VOLUME = "docker:index/volume:Volume"
CLUSTER_ROLE_BINDING = "kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding"

PROD_DECLARED_BY_THE_PROGRAM = Rule(
    id="prod-declared-by-the-program",
    statement="In prod every resource type, field and value is one the program declares for the committed prod stacks "
    "(policy/rocm_policy/allowlist.prod.json, derived from their synth: `rocm-stack allowlist`), whatever its name: a "
    "Docker container's role by its image and the stack's labels, a field it always has not dropped.",
    reason="A list of forbidden things is always one field short: a tampered program went past the other rules 14 ways "
    "(`mounts` instead of `volumes`, `deviceCgroupRules`, `apparmor=unconfined`, a host PID namespace, a Service's "
    "`externalIPs`, a ClusterRoleBinding: tests/attacks/plans). The engine hands the pack each resource's inputs as "
    "the provider's Check returns them (pulumi/pulumi v3.259.0 pkg/resource/deploy/step_generator.go: `new.Inputs = "
    "resp.Properties`), so the provider's schema defaults (terraform-provider-docker v4.5.0 "
    "internal/provider/resource_docker_container.go) count as unset. Only the pack can apply it, by nature: the list "
    "is what the program declares for the configs the loader accepted, so no config can ask for anything outside it; "
    "the rule guards against an edit of the program or a resource added by hand.",
    environments=PROD,
    config_keys=(),
    plan_fields=("every resource's type, input fields and values (a Docker container's role: its image, its labels)",),
    check=problems,
    scope="stack",
    passing=(
        Example(
            "Grafana's data volume, as the program declares it",
            {},
            (Declared(VOLUME, "grafana-data", {"name": "rocm-stack-grafana-data"}),),
        ),
    ),
    failing=(
        Example(
            "a ClusterRoleBinding, which the program never declares",
            None,
            (
                Declared(
                    CLUSTER_ROLE_BINDING,
                    "admin",
                    {
                        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
                        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "ml"}],
                    },
                ),
            ),
        ),
    ),
)

RULES = (PROD_DECLARED_BY_THE_PROGRAM,)
