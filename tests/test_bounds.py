"""Every count, size and length of the stack configuration has an upper bound (schema/bounds.py), checked before
anything is built from it: a host group of a billion members is refused in milliseconds, not synthesized for minutes
(issue 24 item 6). Each refusal names the key, the bound and, where it is not "a smaller value", the fix."""

from __future__ import annotations

import sys
import time
import types
import typing
from typing import Annotated, Any, Literal, Union

import pytest
from pydantic import BaseModel, ByteSize, PlainValidator, ValidationError
from pulumi.runtime.resource_cycle_breaker import _add_dep, declare_dependency

from conftest import refusal
from schema import ConfigError, StackConfig, load
from schema.base import ConfigModel
from schema.bounds import MAX_BYTES, MAX_CPUS, MAX_HOSTS, MAX_ITEMS, MAX_TEXT
from schema.docker import PlacementLock, read_lock
from schema.workloads import MAX_ROLL_STEPS, InferenceDocker

P = "rocm-stack:"


def _bounded(metadata: tuple[Any, ...]) -> tuple[bool, bool]:
    """(an upper bound of the value, a maximum length) among the constraints."""
    items = [inner for item in metadata for inner in (item, *getattr(item, "metadata", ()))]
    return (
        any(getattr(i, "le", None) is not None or getattr(i, "lt", None) is not None for i in items),
        any(getattr(i, "max_length", None) is not None for i in items),
    )


# Bounded by a cross-key rule with a better message than a fixed bound: a container's GPU index is checked against
# its host's GPUs ("GPU 64 is out of range: host 'h' has 64 logical GPUs (8 MI300X in CPX)"), tested below.
CROSS_CHECKED = {"rocm-stack.hosts[].containers[].gpus[]"}


def unbounded(annotation: Any, at: str, metadata: tuple[Any, ...] = (), seen: set | None = None) -> list[str]:
    """Key paths of the numbers, sizes and collections under `annotation` that have no upper bound."""
    seen = set() if seen is None else seen
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return unbounded(args[0], at, (*metadata, *args[1:]), seen)
    if any(isinstance(m, PlainValidator) for m in metadata):
        return []  # a type that validates itself (NodeCount): its bound is tested by value below
    if origin in (Union, types.UnionType):
        return [p for a in args if a is not type(None) for p in unbounded(a, at, metadata, seen)]
    value_bound, length_bound = _bounded(metadata)
    if origin in (list, dict):
        finite_keys = origin is dict and typing.get_origin(args[0]) is Literal
        found = [] if length_bound or finite_keys else [at]
        return found + [p for a in args for p in unbounded(a, f"{at}[]", (), seen)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        if annotation in seen:
            return []
        seen.add(annotation)
        return [
            p
            for name, field in annotation.model_fields.items()
            for p in unbounded(field.annotation, f"{at}.{field.alias or name}", tuple(field.metadata), seen)
        ]
    if annotation in (int, float) or (isinstance(annotation, type) and issubclass(annotation, ByteSize)):
        return [] if value_bound or at in CROSS_CHECKED else [at]
    return []


def test_every_count_size_and_length_of_the_schema_has_a_bound():
    assert unbounded(StackConfig, "rocm-stack") == []
    assert unbounded(PlacementLock, "placement lock") == []
    # Text: one bound for every string of every section (ConfigModel's str_max_length).
    assert ConfigModel.model_config["str_max_length"] == MAX_TEXT


def _timed_refusal(config: dict[str, Any], stack: str = "dev") -> tuple[float, str]:
    start = time.perf_counter()
    with pytest.raises(ConfigError) as error:
        load(stack, {P + "environment": "dev", **config}, lock=PlacementLock())
    return time.perf_counter() - start, str(error.value)


def test_a_host_group_of_a_billion_members_is_refused_in_milliseconds():
    """The count is checked before a member is named: on main this expanded a billion names (minutes, then memory)."""
    group = {"namePattern": "gpu-{index:09d}", "count": 10**9, "template": {"gpus": 8}}
    seconds, message = _timed_refusal({P + "hostGroups": [group]})
    assert seconds < 0.5, seconds
    assert f"{P}hostGroups[0].count: must be at most {MAX_HOSTS} (got 1000000000)" in message


def test_groups_that_add_up_past_the_bound_are_refused_before_expansion():
    """Each group is within the bound, together they are not: counted (not expanded) and refused as a whole."""
    groups = [{"namePattern": f"g{i}-{{index}}", "count": 1000, "template": {"gpus": 8}} for i in range(3)]
    hosts = [{"name": "workstation"}]
    seconds, message = _timed_refusal({P + "hosts": hosts, P + "hostGroups": groups})
    assert seconds < 0.5, seconds
    assert message == (
        f"{P}hostGroups: 3001 hosts in all (1 under hosts; hostGroups[0]: 1000, hostGroups[1]: 1000, "
        f"hostGroups[2]: 1000), more than the {MAX_HOSTS} one stack takes; split the fleet into several stacks"
    )


@pytest.mark.parametrize(
    "config, expected",
    [
        # A list of members as long as the bound allows is fine; one more is not.
        (
            {"hostGroups": [{"members": [f"n{i}" for i in range(MAX_HOSTS + 1)]}]},
            f"hostGroups[0].members: must have at most {MAX_HOSTS} item(s)",
        ),
        (
            {"hostGroups": [{"namePattern": "n{index}", "count": 2, "start": 10**12}]},
            "hostGroups[0].start: must be at most",
        ),
        ({"hosts": [{"name": f"h{i}"} for i in range(MAX_HOSTS + 1)]}, f"hosts: must have at most {MAX_HOSTS} item(s)"),
        # A CPU list is expanded into its CPUs (cpus_of): `0-99999999` was 10^8 integers; Linux has at most 8192 CPUs.
        (
            {"hosts": [{"name": "box", "numaCpus": {0: "0-99999999"}}]},
            "hosts[0].numaCpus[0]: expected a CPU list such as 0-47,96-143",
        ),
        (
            {"hosts": [{"name": "box", "numaCpus": {0: "0-9000"}}]},
            f"hosts[0].numaCpus[0]: CPU 9000 is past the last CPU Linux can have ({MAX_CPUS - 1})",
        ),
        ({"hosts": [{"name": "box", "numaCpus": {5000: "0-3"}}]}, "hosts[0].numaCpus[5000]: must be less than 1024"),
        (
            {"hosts": [{"name": "box", "containers": [{"name": "c", "shmSize": "1PiB"}]}]},
            "hosts[0].containers[0].shmSize: must be at most 64TiB, more than any server holds",
        ),
        (
            {"hosts": [{"name": "box", "containers": [{"name": "c", "gpus": [0, 10**6]}]}]},
            "hosts[0].containers[0].gpus[1]: GPU 1000000 is out of range: host 'box' has 1 GPU",
        ),
        (
            {"hosts": [{"name": "box", "containers": [{"name": "c", "command": ["x"] * (MAX_ITEMS + 1)}]}]},
            f"hosts[0].containers[0].command: must have at most {MAX_ITEMS} item(s)",
        ),
        (
            {"hosts": [{"name": "box", "containers": [{"name": "c", "command": ["x" * (MAX_TEXT + 1)]}]}]},
            f"hosts[0].containers[0].command[0]: must be at most {MAX_TEXT} characters",
        ),
        (
            {"hosts": [{"name": "box", "logs": {"maxFile": 10**9}}]},
            f"hosts[0].logs.maxFile: must be at most {MAX_ITEMS}",
        ),
        (
            {"hosts": [], "training": [{"name": "t", "steps": 10**15, "kubernetes": {"nodes": 1}}], "kubernetes": {}},
            "training[0].steps: must be at most 1000000000",
        ),
        (
            {
                "hosts": [],
                "inference": [{"name": "s", "model": "m/m", "kubernetes": {"replicas": 10**7}}],
                "kubernetes": {},
            },
            "inference[0].kubernetes.replicas: must be at most 150000",
        ),
        (
            {"hosts": [], "kubernetes": {"gpuOperator": {"timeoutSeconds": 10**9}}},
            "kubernetes.gpuOperator.timeoutSeconds: must be at most 86400",
        ),
        (
            {
                "hosts": [],
                "kubernetes": {
                    "gpuOperator": {"deviceConfig": {"driver": {"upgradePolicy": {"maxUnavailableNodes": 10**6}}}}
                },
            },
            "kubernetes.gpuOperator.deviceConfig.driver.upgradePolicy.maxUnavailableNodes: expected a node count from 0 "
            "to 5000",
        ),
        ({"hosts": [], "gpuFleet": {"nodes": 10**6, "gpusPerNode": 8}}, "gpuFleet.nodes: must be at most 5000"),
    ],
)
def test_counts_sizes_and_lengths_past_their_bound_are_refused_naming_key_and_bound(config, expected):
    seconds, message = _timed_refusal({P + key: value for key, value in config.items()})
    assert seconds < 1, seconds
    assert f"{P}{expected}" in message, message


def test_a_size_at_the_bound_still_passes_and_a_typo_of_the_unit_is_named():
    """64TiB is accepted (no server is refused for its size); `1PiB` is refused above, `64TB` (decimal) too."""
    assert int(ByteSize._validate("64TiB", None)) == MAX_BYTES  # type: ignore[attr-defined]
    message = refusal("dev", {P + "hosts": [{"name": "box", "containers": [{"name": "c", "shmSize": "71TB"}]}]})
    assert "hosts[0].containers[0].shmSize: must be at most 64TiB" in message


@pytest.mark.parametrize(
    "text, problem",
    [
        ("hosts:\n  box:\n    gpus: 1000000000\n", "hosts.box.gpus"),
        ("hosts:\n  box:\n    gpus: 8\n    partitions:\n      a: [0, 100000]\n", "hosts.box.partitions.a.1"),
    ],
)
def test_a_placement_lock_past_its_bounds_is_refused_with_the_fix(tmp_path, text, problem):
    (tmp_path / "stacks").mkdir()
    (tmp_path / "stacks" / "placement.prod.yaml").write_text(text)
    lock, problems = read_lock("prod", tmp_path)
    assert lock == PlacementLock()
    [(key, message)] = problems
    assert key == "hosts" and problem in message and "less than or equal to" in message
    assert "restore it from version control or delete it and run `make lock STACK=prod`" in message


def test_a_docker_roll_of_more_steps_than_the_sdk_walks_in_time_is_refused_with_the_fix() -> None:
    """Each server of a Docker inference waits for one `maxUnavailable` places before it, so the servers form a chain
    of partitions / maxUnavailable steps; schema.workloads.MAX_ROLL_STEPS says what the SDK made of longer ones."""
    partitions = [f"gpu-{index}/serve" for index in range(MAX_ROLL_STEPS + 1)]
    assert InferenceDocker.model_validate({"partitions": partitions[:-1]}).max_unavailable == 1
    assert InferenceDocker.model_validate({"partitions": partitions, "maxUnavailable": 2})
    with pytest.raises(ValidationError) as refused:
        InferenceDocker.model_validate({"partitions": partitions})
    assert f"roll in {MAX_ROLL_STEPS + 1} steps" in str(refused.value)
    assert str(refused.value).count("set maxUnavailable to at least 2") == 1
    assert f"At most {MAX_ROLL_STEPS} steps" in str(InferenceDocker.model_fields["max_unavailable"].description)


def test_the_sdks_cycle_check_walks_a_chain_of_dependencies_by_recursion() -> None:
    """Why MAX_ROLL_STEPS: pulumi 3.272.0 runtime/resource_cycle_breaker.py declare_dependency walks everything the
    new dependency reaches (_with_transitive_deps, one nested generator per link), at each registration that names
    one (runtime/rpc.py L309). A chain as long as the interpreter's recursion limit ends in a RecursionError; one of
    MAX_ROLL_STEPS links passes."""

    class Resource:  # the walk reads one attribute it sets itself, so any object with a __dict__ is a resource to it
        pass

    def chain(length: int) -> list[Resource]:
        links = [Resource() for _ in range(length)]
        for before, after in zip(links, links[1:], strict=False):
            assert declare_dependency(after, before)
        return links

    assert declare_dependency(Resource(), chain(MAX_ROLL_STEPS)[-1])
    # As long as the recursion limit as it stands (1,000 in the program; celpy, which other tests import, raises it
    # to 2,500), linked as the SDK links them but without a walk per link (that part grows with the square).
    deep = [Resource() for _ in range(sys.getrecursionlimit())]
    for before, after in zip(deep, deep[1:], strict=False):
        _add_dep(after, before)
    with pytest.raises(RecursionError):
        declare_dependency(Resource(), deep[-1])
