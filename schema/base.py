"""Shared base for every section of the stack configuration schema: the model class, pattern checks that say what
they expect in words, and the strict-scalar walker. The value types live in schema/types.py."""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, PlainValidator, WrapValidator
from pydantic.alias_generators import to_camel

from .bounds import MAX_TEXT


@dataclasses.dataclass(frozen=True)
class Check(AfterValidator):
    """An AfterValidator that says what it checks, for tools.config_reference (`expected`, or the bounds `ge`, `le`)."""

    expected: str | None = None
    pattern: str | None = None
    ge: int | None = None
    le: int | None = None


def by_environment(dev: Any, prod: Any) -> dict[str, Any]:
    """Field metadata (`json_schema_extra`) of a key whose default depends on the environment: the loader applies it
    (environment_default) and the generated reference shows it, from this one definition."""
    return {"by_environment": {"dev": dev, "prod": prod}}


def environment_default(model: type[BaseModel], field: str, environment: str) -> Any:
    extra = model.model_fields[field].json_schema_extra
    assert isinstance(extra, dict) and "by_environment" in extra, f"{model.__name__}.{field} has no by_environment"
    defaults: Any = extra["by_environment"]
    return defaults[environment]


def shown_default(text: str) -> dict[str, Any]:
    """Field metadata of a key whose default another key or the stack decides: what the reference shows as the
    default (markdown), where the model's own default is only a placeholder."""
    return {"shown_default": text}


def matching(pattern: str, expected: str) -> Check:
    """A pattern check whose message says what is expected in words (pydantic's would quote the regex)."""
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.fullmatch(value):
            raise ValueError(f"expected {expected} (got {value!r})")
        return value

    return Check(check, expected=expected, pattern=pattern)


def _scalar_kinds(annotation: Any) -> set[type]:
    """The scalar types (int, float, bool, str) an annotation accepts at its top level (through Optional/Annotated)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _scalar_kinds(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_scalar_kinds(a) for a in typing.get_args(annotation)))
    if origin is typing.Literal:
        return {type(a) for a in typing.get_args(annotation)}
    if isinstance(annotation, type) and annotation in (int, float, bool, str):
        return {annotation}
    if isinstance(annotation, type) and issubclass(annotation, str):  # str enums
        return {str}
    return set()


def _unwrap(annotation: Any) -> list[Any]:
    """The alternatives of an annotation, through Annotated and Optional/Union."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _unwrap(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [alt for a in typing.get_args(annotation) for alt in _unwrap(a)]
    return [annotation]


def _strict_problem(value: Any, kinds: set[type]) -> str | None:
    """Why `value` does not fit a field of these scalar kinds without a silent conversion, or None.

    pydantic's lax mode reads `true` as 1, `"8"` as 8 and `"yes"` as true; the stack file would then mean
    something else than it says, so a number must be a number and a switch true or false."""
    if not kinds or type(value) in kinds or (type(value) is int and float in kinds):
        return None
    if isinstance(value, bool) and str in kinds:
        word = "true" if value else "false"
        return (
            f"expected text, got the boolean {word}; write it in quotes ('{word}') if you mean the word "
            "(YAML reads unquoted true/false as a boolean)"
        )
    if isinstance(value, bool) and kinds & {int, float}:
        return f"expected a number, got the boolean {'true' if value else 'false'}"
    if isinstance(value, str) and kinds & {int, float} and str not in kinds:
        return f"expected a number, got the text {value!r}; write it without quotes"
    if isinstance(value, str) and bool in kinds and str not in kinds:
        return f"expected true or false, got the text {value!r}"
    if isinstance(value, (int, float)) and bool in kinds and not kinds & {int, float, str}:
        return f"expected true or false, got {value!r}"
    return None


class ConfigModel(BaseModel):
    """Stack config keys are camelCase (Pulumi convention); Python fields are snake_case.

    Unknown keys are errors: a typo in a stack file must never be silently ignored.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        # The docstring under a field is its description: docs/config-reference.md is generated from it.
        use_attribute_docstrings=True,
        frozen=True,
        str_max_length=MAX_TEXT,
    )


def changed_fields(model: BaseModel) -> set[str]:
    """The fields set to another value than their default (writing a default down does nothing, on purpose)."""
    return {name for name in model.model_fields_set if getattr(model, name) != type(model).model_fields[name].default}


def strict_problems(
    model: type[BaseModel], data: Any, loc: tuple[int | str, ...] = ()
) -> Iterator[tuple[tuple[int | str, ...], str]]:
    """(location, problem) for every scalar in `data` that pydantic would convert silently (see _strict_problem).

    Walks the raw values beside the model's fields, so the location is the key path the user wrote."""
    if not isinstance(data, dict):
        return
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in data:
            key = name
            if key not in data:
                continue
        yield from _value_problems(field.annotation, data[key], (*loc, key))


def _converts_itself(annotation: Any) -> bool:
    """A type with its own before/plain validator (a GID given as a name, a size without unit) says itself
    what is wrong with a value; the strict check leaves it alone."""
    if typing.get_origin(annotation) is Annotated:
        base, *metadata = typing.get_args(annotation)
        return any(
            isinstance(m, (BeforeValidator, PlainValidator, WrapValidator)) for m in metadata
        ) or _converts_itself(base)
    return (
        any(_converts_itself(a) for a in typing.get_args(annotation))
        if typing.get_origin(annotation) in (Union, types.UnionType)
        else False
    )


def _value_problems(
    annotation: Any, value: Any, loc: tuple[int | str, ...]
) -> Iterator[tuple[tuple[int | str, ...], str]]:
    if _converts_itself(annotation):
        return
    problem = _strict_problem(value, _scalar_kinds(annotation))
    if problem is not None:
        yield loc, problem
        return
    alternatives = _unwrap(annotation)
    models = [a for a in alternatives if isinstance(a, type) and issubclass(a, BaseModel)]
    if models and isinstance(value, dict):
        # A tagged union (storage `type`) picks its model by the tag; one model is walked as is.
        tagged = [
            m
            for m in models
            if "type" in m.model_fields and value.get("type") in typing.get_args(m.model_fields["type"].annotation)
        ]
        for model in tagged or models[:1]:
            yield from strict_problems(model, value, loc)
        return
    for alternative in alternatives:
        origin, args = typing.get_origin(alternative), typing.get_args(alternative)
        if origin is list and isinstance(value, list):
            for index, item in enumerate(value):
                yield from _value_problems(args[0], item, (*loc, index))
            return
        if origin is dict and isinstance(value, dict):
            for key, item in value.items():
                yield from _value_problems(args[1], item, (*loc, key))
            return
