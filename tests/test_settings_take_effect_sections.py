"""No setting that silently does nothing (issue 36 item 6), for every documented section but `monitoring` and `checks`
(tests/test_settings_take_effect.py): each leaf key of docs/config-reference.md, set to another valid value in each
committed stack (dev, prod), changes the plan, or the program refuses it naming the key's section, or the preview
warns naming the key (`pulumi.log.warn`, where a person may keep the setting on purpose).

A key's other value is derived from its type where it can be (a switch turned, another choice, a number one step
within its bounds, text and lists the type accepts) and written in FLIPS otherwise. A key under an object or list
item the stack does not write is flipped inside the PARENTS value given for it, against that value as its baseline.
"""

from __future__ import annotations

import copy
import enum
import json
import logging
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

import annotated_types
import pytest
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

import schema
from conftest import stack_file
from schema import decode
from schema.stackfile import as_program_config
from tools.synth import ProgramRefused, synthesize

P = "rocm-stack:"
SECURE = {"secure": "v1:REPLACE-ME"}
# Covered by tests/test_settings_take_effect.py.
ELSEWHERE = ("monitoring", "checks")


@dataclass(frozen=True)
class ByStack:
    dev: Any
    prod: Any


@dataclass(frozen=True)
class Leaf:
    """A documented key: its dotted path (`hosts[].containers[].name`), the fields to it and its field."""

    path: str
    steps: tuple[tuple[str, str, bool], ...]  # (key as written, field name, a list whose first item is meant)
    field: FieldInfo


def _unwrap(annotation: Any) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _unwrap(args[0])
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return _unwrap(inner[0]) if len(inner) == 1 else annotation
    return annotation


def _nested(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    annotation = _unwrap(annotation)
    if typing.get_origin(annotation) is list:
        item = _unwrap(typing.get_args(annotation)[0])
        return (item, True) if isinstance(item, type) and issubclass(item, BaseModel) else None
    return (annotation, False) if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def leaves(model: type[BaseModel], steps: tuple[tuple[str, str, bool], ...] = ()) -> Iterator[Leaf]:
    for name, field in model.model_fields.items():
        key = field.alias or name
        nested = _nested(field.annotation)
        if nested is not None:
            yield from leaves(nested[0], (*steps, (key, name, nested[1])))
        else:
            path = ".".join(k + ("[]" if many else "") for k, _, many in (*steps, (key, name, False)))
            yield Leaf(path, (*steps, (key, name, False)), field)


# Objects and list items the committed stacks do not write, given so that their keys can be flipped inside them:
# dotted path (`[]`: the first item) -> its value (and extra stack keys it needs, such as a secret).
TOLERATION = [
    {"key": "example.com/flip", "operator": "Equal", "value": "a", "effect": "NoExecute", "tolerationSeconds": 60}
]
NETWORK = {
    "rdma": {"resource": "rdma/hca_shared_devices_a", "count": 1},
    "interface": "net1",
    "networks": "rdma-net",
    "ibHca": "mlx5_0",
    "ibGidIndex": 3,
}
QUEUES: dict[str, Any] = {
    "flavors": {"mi300x": {"gpuModel": "MI300X"}},
    "clusterQueues": {
        "research": {"namespaces": ["default"], "cpu": 32, "memory": "512Gi", "gpus": {"mi300x": {"amd.com/gpu": 4}}}
    },
    "localQueues": [{"namespace": "default", "name": "research", "clusterQueue": "research"}],
}


def multi_node_inference(raw: dict[str, Any]) -> None:
    """The first inference as one replica of two pods on RDMA, Kubernetes only (a Docker partition is one host)."""
    inference = raw[P + "inference"][0]
    inference.pop("docker", None)
    inference["pipelineParallelSize"] = 2
    kubernetes = inference["kubernetes"]
    kubernetes.update(nodes=2, gpus=inference.get("tensorParallelSize", 1), network=copy.deepcopy(NETWORK))
    kubernetes.setdefault("modelCache", {"type": "pvc", "size": "100Gi"})


def multi_node_training(raw: dict[str, Any]) -> None:
    kubernetes = raw[P + "training"][0]["kubernetes"]
    kubernetes.update(nodes=2, network=copy.deepcopy(NETWORK))
    kubernetes.setdefault("checkpoints", {"type": "pvc", "size": "10Gi"})


def elastic_training(raw: dict[str, Any]) -> None:
    training = raw[P + "training"][0]
    training.pop("docker", None)
    training["elastic"] = {"minNodes": 1, "maxNodes": 2, "maxRestarts": 3}
    training["kubernetes"].pop("nodes", None)
    training["kubernetes"].setdefault("checkpoints", {"type": "pvc", "size": "10Gi"})


def host_group(raw: dict[str, Any]) -> None:
    """One group member like the stack's first host, its partitions by GPU index (nothing to lock)."""
    template = copy.deepcopy(raw[P + "hosts"][0])
    del template["name"]
    template["docker"] = {"host": "ssh://deploy@{name}.example.internal"}
    template["containers"] = [{"name": "shell"}]
    raw[P + "hostGroups"] = [{"template": template, "namePattern": "box-{index}", "count": 1, "start": 1}]


def managed_driver(raw: dict[str, Any]) -> None:
    device_config = raw[P + "kubernetes"].setdefault("gpuOperator", {}).setdefault("deviceConfig", {})
    # A drain that outlasts the training pods' 300 s grace (as prod's).
    device_config["driver"] = {
        "enable": True,
        "blacklist": True,
        "upgradePolicy": {"nodeDrainPolicy": {"timeoutSeconds": 3300}},
    }


def queued(raw: dict[str, Any]) -> None:
    """Dev's cluster under Kueue, its two workloads in its one queue."""
    raw[P + "kubernetes"]["queues"] = copy.deepcopy(QUEUES)
    for section in ("training", "inference"):
        raw[P + section][0]["kubernetes"]["queueName"] = "research"


def spare(**container: Any) -> Any:
    """A host like the stack's first, put first, with one partition of its own."""

    def add(raw: dict[str, Any]) -> None:
        host = copy.deepcopy(raw[P + "hosts"][0])
        host.update(name="spare", docker={"host": "ssh://deploy@spare.example.internal"})
        host["containers"] = [{"name": "spare", "gpus": [0], **container}]
        raw[P + "hosts"].insert(0, host)

    return add


PARENTS: dict[str, Any] = {
    "registry": {"server": "registry.example.internal", "username": "deploy"},
    "mirror": {
        "registry": "registry.example.internal",
        "charts": "oci://registry.example.internal/charts",
        "files": "https://files.example.internal",
    },
    "hostGroups": host_group,
    # On a spare host put first: the stacks' partitions all run workloads, which decide their ports and volumes.
    "hosts[].containers[].ports": spare(ports=[{"internal": 8888, "external": 8888}]),
    "hosts[].containers[].volumes": spare(volumes=[{"hostPath": "/data", "containerPath": "/data"}]),
    "training[].kubernetes.tolerations": TOLERATION,
    "inference[].kubernetes.tolerations": TOLERATION,
    "training[].kubernetes.network": multi_node_training,
    "inference[].kubernetes.network": multi_node_inference,
    "training[].elastic": elastic_training,
    "inference[].kubernetes.autoscaling": ByStack(dev={"minReplicas": 1, "maxReplicas": 2}, prod=None),
    "inference[].kubernetes.router": ByStack(dev={"replicas": 1}, prod=None),
    "kubernetes.gpuNodeTaints": ByStack(
        dev=[{"key": "amd.com/gpu", "value": "a", "effect": "PreferNoSchedule"}], prod=None
    ),
    "kubernetes.queues": ByStack(dev=queued, prod=None),
    "training[].kubernetes.queueName": ByStack(dev=queued, prod=None),
    "inference[].kubernetes.queueName": ByStack(dev=queued, prod=None),
    # Read only for a driver the operator manages (schema/effects.py), which dev's is not.
    "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy": ByStack(dev=managed_driver, prod=None),
}
EXTRA = {"registry": {P + "registryPassword": SECURE}}
# dotted key -> another valid value (ByStack where the stacks differ), for what the type alone cannot give.
FLIPS: dict[str, Any] = {
    # The type's next value is the stack's effective one (a default, or what another key decides).
    "hosts[].computePartition": "DPX",
    "hosts[].memoryPartition": "NPS4",
    "security.profile": ByStack(dev="hardened", prod="debug"),
    "images": {"pytorch": "rocm/pytorch:latest"},
    "kubernetes.gpuOperator.installDefaultNfdRule": False,
    "kubernetes.gpuOperator.kmmWatch": False,
    "kubernetes.gpuOperator.deviceConfig.driver.image": ByStack(
        dev="registry.example.internal/amd/amdgpu-driver", prod="registry.example.internal/amd/amdgpu-driver2"
    ),
    "kubernetes.keda.install": ByStack(dev=True, prod=False),
    "kubernetes.queues.kueue.replicas": 3,
    "inference[].kubernetes.router.replicas": 3,
    "inference[].gated": ByStack(dev=True, prod=False),
    "hostGroups[].members": ["box-a"],
    "hostGroups[].overrides": {"box-1": {"deviceGroups": [44]}},
    "hosts[].containers[].cpuset": "0-3",
    "hosts[].deviceGroups": [44],
    "hosts[].gpuModel": "MI325X",
    "hosts[].numaCpus": ByStack(dev={0: "0-3"}, prod={0: "0-95", 1: "96-191"}),
    "inference[].docker.partitions": ByStack(dev=["workstation/train"], prod=["gpu-node-1/serve-b"]),
    "training[].docker.partitions": ByStack(dev=["workstation/serve"], prod=["gpu-node-1/serve-b"]),
    "inference[].kubernetes.clients": [{"app": "web"}],
    "inference[].kubernetes.gpuResource": "amd.com/cpx_nps4",
    "training[].kubernetes.gpuResource": "amd.com/cpx_nps4",
    "inference[].kubernetes.modelCache": ByStack(
        dev={"type": "emptyDir"}, prod={"type": "pvc", "storageClass": "cephfs", "size": "300Gi"}
    ),
    "training[].kubernetes.checkpoints": ByStack(
        dev={"type": "pvc", "size": "10Gi"}, prod={"type": "pvc", "storageClass": "cephfs", "size": "3Ti"}
    ),
    "training[].entrypoint": "mypkg.train:main",
    "kubernetes.queues.clusterQueues": ByStack(
        dev={**QUEUES["clusterQueues"], "research": {**QUEUES["clusterQueues"]["research"], "cpu": 16}},
        prod={
            name: {**queue, "cpu": 41}
            for name, queue in stack_file("prod")[P + "kubernetes"]["queues"]["clusterQueues"].items()
        },
    ),
    "kubernetes.gpuOperator.deviceConfig.devicePlugin.nodeLabellerArguments": ["vram"],
    "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.maxUnavailableNodes": "25%",
    "kubernetes.gpuOperator.deviceConfig.metricsExporter.serviceMonitor.interval": "20s",
    "kubernetes.partitionProfiles": {
        "cpx": {"gpuModel": "MI300X", "computePartition": "CPX", "memoryPartition": "NPS4", "gpus": 8, "nodes": 1}
    },
    "kubernetes.queues.flavors": {"mi300x": {"gpuModel": "MI300X"}, "mi325x": {"gpuModel": "MI325X"}},
}
# Keys whose effect is shown elsewhere, with where.
COVERED: dict[str, str] = {
    "registry.server": "the Docker providers' registryAuth, one secret in the plan: tests/test_docker_hosts.py",
    "registry.username": "the Docker providers' registryAuth, one secret in the plan: tests/test_docker_hosts.py",
    "kubernetes.partitionProfiles": "the capacity and resource checks' input: tests/test_kubernetes_partitions.py",
    "gpuFleet.nodes": "a capacity check's input, refused when too small: tests/test_kubernetes.py",
    "gpuFleet.gpusPerNode": "a capacity check's input, refused when too small: tests/test_kubernetes.py",
}
# Values tried, in turn, for a key whose type gives no other value by itself (maps, lists, sizes, quantities).
CANDIDATES: list[Any] = [
    "32GiB",
    "128GiB",
    {"ROCM_STACK_FLIP": "1"},
    {"example.com/flip": "yes"},
    "http://prometheus.example.internal:9090",
]


def write_path(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `dotted` (`a.b[].c`: the first item of the list b) in a stack's config."""
    parts = dotted.split(".")
    node: Any = raw
    for index, part in enumerate(parts):
        name, many = part.removesuffix("[]"), part.endswith("[]")
        name = P + name if index == 0 else name
        if index == len(parts) - 1:
            node[name] = value
            return
        if node.get(name) is None:
            node[name] = {}
        node = node[name][0] if many else node[name]


def _bounds(field: FieldInfo) -> tuple[Any, Any]:
    low = high = None
    items = [*field.metadata, *(m for a in typing.get_args(field.annotation) for m in getattr(a, "__metadata__", ()))]
    for item in items:
        for bound in (item, *getattr(item, "metadata", ())):
            if isinstance(bound, annotated_types.Ge | annotated_types.Gt):
                low = bound.ge if isinstance(bound, annotated_types.Ge) else bound.gt
            if isinstance(bound, annotated_types.Le | annotated_types.Lt):
                high = bound.le if isinstance(bound, annotated_types.Le) else bound.lt
    return low, high


def _valid(field: FieldInfo, value: Any) -> bool:
    try:
        annotation: Any = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
        TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return False
    return True


def derived_flip(field: FieldInfo, current: Any) -> Any:
    """Another valid value of the field's type than `current`, or None where the type gives none."""
    annotation = _unwrap(field.annotation)
    current = current.value if isinstance(current, enum.Enum) else current
    if annotation is bool:
        return not current if current is not None else True
    choices: list[Any] = []
    if typing.get_origin(annotation) is Literal:
        choices = list(typing.get_args(annotation))
    elif isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        choices = [member.value for member in annotation]
    if choices:
        return next((c for c in choices if c != current), None)
    if annotation in (int, float):
        low, high = _bounds(field)
        base = current if current is not None else (low if low is not None else 1)
        for candidate in (base + 1, base - 1, base * 2):
            if candidate != current and _valid(field, candidate):
                return candidate
        return None
    if annotation is str and isinstance(current, str):
        for candidate in (current[:-1] + ("2" if current[-1:] != "2" else "3"), current + "x", current + "-x"):
            if _valid(field, candidate):
                return candidate
    return None


def _current(config: Any, leaf: Leaf) -> Any:
    value = config
    for _, name, many in leaf.steps:
        if value is None:
            return None
        value = getattr(value, name)
        if many:
            value = value[0] if value else None
    return value


def _parent_missing(config: Any, leaf: Leaf) -> bool:
    value = config
    for _, name, many in leaf.steps[:-1]:
        if value is None:
            return True
        value = getattr(value, name)
        if many:
            if not value:
                return True
            value = value[0]
    return value is None


def _by_stack(value: Any, stack: str) -> Any:
    return getattr(value, stack) if isinstance(value, ByStack) else value


def _loaded(stack: str, config: dict[str, Any]) -> Any:
    values, secret_keys = as_program_config(config)
    return schema.load(stack, {k: decode(v) for k, v in values.items()}, secret_keys, place_unlocked=True)


def effects(stack: str, config: dict[str, Any]) -> tuple[str, list[str]]:
    """The plan synth declares, and the preview's warnings."""
    warned: list[str] = []
    handler = logging.Handler(logging.WARNING)
    handler.emit = lambda record: warned.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger().addHandler(handler)
    try:
        return json.dumps(synthesize(stack, config).to_json(), sort_keys=True, default=str), warned
    finally:
        logging.getLogger().removeHandler(handler)


def _parent(leaf: Leaf, stack: str) -> str | None:
    return next(
        (
            p
            for p in PARENTS
            if (leaf.path == p or leaf.path.startswith((f"{p}.", f"{p}["))) and _by_stack(PARENTS[p], stack) is not None
        ),
        None,
    )


def _stack_with_parent(stack: str, leaf: Leaf) -> tuple[dict[str, Any], str | None]:
    raw = stack_file(stack)
    parent = _parent(leaf, stack)
    if parent is not None and callable(_by_stack(PARENTS[parent], stack)):
        _by_stack(PARENTS[parent], stack)(raw)
    elif parent is not None:
        write_path(raw, parent, copy.deepcopy(_by_stack(PARENTS[parent], stack)))
        raw.update(EXTRA.get(parent, {}))
    return raw, parent


def flip_of(stack: str, leaf: Leaf, raw: dict[str, Any]) -> Any:
    if leaf.path in FLIPS:
        return _by_stack(FLIPS[leaf.path], stack)
    config = _loaded(stack, raw)
    if _parent_missing(config, leaf):
        return None
    current = _current(config, leaf)
    derived = derived_flip(leaf.field, current)
    if derived is not None:
        return derived
    annotation = _unwrap(leaf.field.annotation)
    if typing.get_origin(annotation) is list and isinstance(current, list):
        item = _unwrap(typing.get_args(annotation)[0])
        options = list(typing.get_args(item)) if typing.get_origin(item) is Literal else []
        tried = [current + [o] for o in options if o not in current] + [current[:-1]] if current else []
        tried += [["--flip"], ["example.com/flip"]]
    else:
        tried = CANDIDATES
    return next((v for v in tried if v != current and _valid(leaf.field, v)), None)


LEAVES = [leaf for leaf in leaves(schema.StackConfig) if leaf.path.split(".")[0].split("[")[0] not in ELSEWHERE]


def test_every_documented_key_is_flipped_or_covered():
    """Every key has another value in each stack: derived, written in FLIPS, or covered elsewhere."""
    missing = []
    for stack in ("dev", "prod"):
        for leaf in LEAVES:
            if leaf.path in COVERED or leaf.path in FLIPS:
                continue
            raw, _ = _stack_with_parent(stack, leaf)
            if flip_of(stack, leaf, raw) is None:
                missing.append(f"{stack} {leaf.path}")
    assert missing == [], "\n".join(missing)


_BASELINES: dict[tuple[str, str | None], tuple[str, list[str]] | None] = {}


@pytest.mark.slow  # a sweep: a synth per documented key and stack, hundreds in all (tests/suite_split.py)
@pytest.mark.parametrize("stack", ["dev", "prod"])
@pytest.mark.parametrize("leaf", [leaf for leaf in LEAVES if leaf.path not in COVERED], ids=lambda leaf: leaf.path)
def test_a_key_changes_the_plan_or_a_message_says_why_not(stack, leaf):
    raw, parent = _stack_with_parent(stack, leaf)
    if (stack, parent) not in _BASELINES:
        try:
            _BASELINES[stack, parent] = effects(stack, raw)
        except ProgramRefused:
            _BASELINES[stack, parent] = None  # the parent itself does nothing here, and its refusal says so
    recorded = _BASELINES[stack, parent]
    if recorded is None:
        return
    baseline, _ = recorded
    value = flip_of(stack, leaf, raw)
    flipped = copy.deepcopy(raw)
    write_path(flipped, leaf.path.removesuffix("[]"), value)
    section = leaf.path.split(".")[0].split("[")[0]
    try:
        plan, warned = effects(stack, flipped)
    except ProgramRefused:
        return  # the message says why (the tests of each rule check their messages)
    key = leaf.path.replace("[]", "")
    if plan == baseline:
        assert any(key.split(".")[-1] in w and section in w for w in warned), (
            f"{leaf.path} = {value!r} changes nothing in {stack} and nothing says why"
        )
