"""Property: whatever stack file a user writes, synth exits 0 with a plan or 2 with one line per problem.

Stack documents are generated from the schema itself (every key of StackConfig, its types, bounds and patterns),
plus the committed stacks, and then one thing is broken: a value of the wrong type, a number out of range, an
unknown key, a list item repeated (duplicate names), a bare or misspelt key, or the YAML text itself (a repeated
line, a tab). For every document `python -m tools.synth` must exit 0 and write plan.json, or exit 2 with every
line starting `rocm-stack:` or naming the stack file; never a traceback (an exception here), never exit 1.

`make test` runs a fixed, bounded sample (derandomized); ROCM_STACK_PROPERTY_EXAMPLES=500 runs a longer one.
"""

from __future__ import annotations

import contextlib
import copy
import enum
import io
import json
import os
import string
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ByteSize

from schema import StackConfig
from schema.base import Check
from tools import synth
from tools.synth import ROOT

P = "rocm-stack:"
EXAMPLES = int(os.environ.get("ROCM_STACK_PROPERTY_EXAMPLES", "25"))
WRONG_VALUES = [True, False, None, "text", -1, 0, 10**9, 3.5, [], {}, ["x"], {"k": "v"}, "yes", "64"]


def _bounds(metadata: list[Any]) -> tuple[Any, Any, str | None]:
    low = high = pattern = None
    for item in metadata:
        for inner in [item, *getattr(item, "metadata", [])]:
            low = getattr(inner, "ge", None) if getattr(inner, "ge", None) is not None else low
            if getattr(inner, "gt", None) is not None:
                low = inner.gt + 1
            high = getattr(inner, "le", None) if getattr(inner, "le", None) is not None else high
            if isinstance(inner, Check) and inner.pattern:
                pattern = inner.pattern
    return low, high, pattern


def values_of(annotation: Any, depth: int = 0, metadata: tuple[Any, ...] = ()) -> st.SearchStrategy:
    """Values of the schema's type: mostly well-formed (cross-key rules may still refuse them)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return values_of(args[0], depth, (*args[1:], *metadata))
    if origin in (Union, types.UnionType):
        return st.one_of([values_of(a, depth, metadata) for a in args if a is not type(None)])
    if origin is Literal:
        return st.sampled_from(args)
    if origin is list:
        return st.lists(values_of(args[0], depth + 1), max_size=2 if depth < 3 else 0)
    if origin is dict:
        return st.dictionaries(values_of(args[0], depth + 1), values_of(args[1], depth + 1), max_size=2)
    low, high, pattern = _bounds(list(metadata))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return st.sampled_from([m.value for m in annotation])
    if annotation is bool:
        return st.booleans()
    if isinstance(annotation, type) and issubclass(annotation, ByteSize):
        return st.sampled_from(["1GiB", "16GiB", "512MiB", "64"])
    if annotation is int:
        return st.integers(low if low is not None else 0, high if high is not None else max(64, (low or 0) + 64))
    if annotation is float:
        return st.floats(low if low is not None else 0, high if high is not None else 100, allow_nan=False)
    if annotation is str:
        if pattern:
            return st.from_regex(pattern, fullmatch=True).filter(lambda s: len(s) < 80)
        return st.text(string.ascii_lowercase + "-/:.", min_size=1, max_size=10)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return model_values(annotation, depth + 1)
    return st.just("x")


def model_values(model: type[BaseModel], depth: int) -> st.SearchStrategy:
    required, optional = {}, {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        values = values_of(field.annotation, depth, tuple(field.metadata))
        (required if field.is_required() else optional)[key] = values
    return st.fixed_dictionaries(required, optional=optional if depth < 4 else {})


def committed(stack: str) -> dict[str, Any]:
    return synth.stack_config(stack)


def generated() -> st.SearchStrategy:
    keys = {(f.alias or n): values_of(f.annotation, 1, tuple(f.metadata)) for n, f in StackConfig.model_fields.items()}
    return st.fixed_dictionaries({}, optional={P + k: v for k, v in keys.items()})


def _leaves(value: Any, path: tuple = ()) -> list[tuple]:
    """Paths of every value inside a document (mappings and lists included)."""
    found = [path] if path else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _leaves(item, (*path, index))
    return found


def _parent(document: Any, path: tuple) -> Any:
    for part in path[:-1]:
        document = document[part]
    return document


@st.composite
def stack_texts(draw) -> str:
    document = copy.deepcopy(draw(st.one_of(st.just(committed("dev")), st.just(committed("prod")), generated())))
    mutation = draw(
        st.sampled_from(
            [
                "none",
                "wrong value",
                "unknown key",
                "repeat item",
                "bare key",
                "misspelt namespace",
                "repeat line",
                "tab",
            ]
        )
    )
    paths = _leaves(document)
    if mutation == "wrong value" and paths:
        path = draw(st.sampled_from(paths))
        _parent(document, path)[path[-1]] = draw(st.sampled_from(WRONG_VALUES))
    elif mutation == "unknown key":
        mappings = [()] + [p for p in paths if isinstance(_parent(document, (*p, None)), dict)]
        target = _parent(document, (*draw(st.sampled_from(mappings)), None))
        target[draw(st.sampled_from(["gpuz", "hostz", "rocm-stack:hostz", "namee"]))] = 1
    elif mutation == "repeat item":
        lists = [p for p in paths if isinstance(_parent(document, (*p, None)), list) and _parent(document, (*p, None))]
        if lists:
            items = _parent(document, (*draw(st.sampled_from(lists)), None))
            items.append(copy.deepcopy(items[0]))
    elif mutation in ("bare key", "misspelt namespace") and document:
        key = draw(st.sampled_from(sorted(document)))
        name = key.split(":", 1)[-1]
        document[name if mutation == "bare key" else f"rocm-stak:{name}"] = document.pop(key)
    text = yaml.safe_dump({"config": document}, sort_keys=False)
    lines = text.splitlines(keepends=True)
    if mutation == "repeat line" and len(lines) > 1:
        index = draw(st.integers(1, len(lines) - 1))
        lines.insert(index, lines[index])
    elif mutation == "tab" and len(lines) > 1:
        index = draw(st.integers(1, len(lines) - 1))
        lines[index] = "\t" + lines[index].lstrip(" ")
    return "".join(lines)


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("property") / "project"
    directory.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("stacks", ".git", ".venv"):
            (directory / entry.name).symlink_to(entry)
    (directory / "stacks").mkdir()
    return directory


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(text=stack_texts(), stack=st.sampled_from(["dev", "prod", "prod-eu", "product-demo"]))
def test_synth_exits_0_with_a_plan_or_2_with_one_line_per_problem(project, tmp_path_factory, text, stack):
    stack_file = project / "stacks" / f"Pulumi.{stack}.yaml"
    for old in (project / "stacks").iterdir():
        old.unlink()
    stack_file.write_text(text)
    out = tmp_path_factory.mktemp("out")
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = synth.main(["--stack", stack, "--out", str(out), "--project-dir", str(project)])
    errors = stderr.getvalue()
    if code == 0:
        # `hosts: []` and no Kubernetes is a stack that declares nothing: an empty plan.
        assert isinstance(json.loads((out / "plan.json").read_text())["resources"], list), text
        return
    assert code == 2, (code, errors, text)
    lines = errors.splitlines()
    assert lines, text
    for line in lines:
        assert line.startswith((P, f"{stack_file}:")), (line, text)
        for internal in ("Value error,", "String should match pattern", "synth-placeholder", "Traceback"):
            assert internal not in line, (line, text)
