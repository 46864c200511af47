"""Host groups (`rocm-stack:hostGroups`): a fleet described once, a template and its members.

The loader expands every group into plain host entries before the hosts are validated (`expand`), so each host
rule applies to every member, and a problem of an expanded host is reported where its value was written
(`located`): `hostGroups[0].template.gpus`, `hostGroups[0].overrides.gpu-node-007.gpus`,
`hostGroups[0].members[3]`. Groups are plain data (no YAML anchors, which `pulumi config set` rewrites away), so
`pulumi config set --path 'hostGroups[0].count' 129` grows a fleet.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, ValidationError, field_validator, model_validator

from .base import ConfigModel
from .bounds import MAX_HOST_INDEX, MAX_HOSTS, MAX_ITEMS
from .types import Name

# `{index}` or `{index:03d}` (zero-padded to 3 digits): the only placeholder of a name pattern.
_INDEX = re.compile(r"\{index(?::0(\d)d)?\}")
# Keys of the template whose text may say `{name}`: what differs per host is its address and its saved files.
NAME_FIELDS = (("docker", "host"), ("topology",), ("renderNodes",))
_NAME = "{name}"


def _name_pattern(value: str) -> str:
    placeholders = _INDEX.findall(value)
    rest = _INDEX.sub("", value)
    if len(placeholders) != 1 or "{" in rest or "}" in rest:
        raise ValueError(
            f"expected a name with one `{{index}}` or zero-padded `{{index:03d}}` placeholder, such "
            f"as gpu-node-{{index:03d}} (got {value!r})"
        )
    return value


class HostGroup(ConfigModel):
    """Hosts described once: a template and its members, each member one host of `hosts` named by `members` or
    by `namePattern` and `count`. Expanded before the hosts are checked, a group gives the same hosts, resources
    and plan as writing its members out under `hosts`. Growing a group (a higher `count`, a name added at the end
    or anywhere in `members`) adds hosts and renames none."""

    template: Annotated[dict[str, Any], Field(max_length=MAX_ITEMS)] = {}
    """Any key of a host (`hosts[]`: docker, gpus, gpuModel, topology, renderNodes, numaCpus, gpuAccess,
    containers, ...) except `name`, shared by every member. `{name}` in `docker.host`, `topology` and
    `renderNodes` becomes the member's name (`ssh://deploy@{name}.example.internal`, `hosts/{name}.showtopo.txt`)."""
    members: Annotated[list[Name], Field(max_length=MAX_HOSTS)] = []
    """The members' host names, in order. Or `namePattern` and `count`."""
    name_pattern: str | None = None
    """The members' names: `{index}` is the member's number, `{index:03d}` zero-padded to 3 digits
    (`gpu-node-{index:03d}` with start 1 and count 128: gpu-node-001 ... gpu-node-128). Used with `count`."""
    count: Annotated[int, Field(ge=1, le=MAX_HOSTS)] | None = None
    """How many members `namePattern` names."""
    start: Annotated[int, Field(ge=0, le=MAX_HOST_INDEX)] = 0
    """The number of the first member of `namePattern`."""
    overrides: Annotated[
        dict[Name, Annotated[dict[str, Any], Field(max_length=MAX_ITEMS)]], Field(max_length=MAX_HOSTS)
    ] = {}
    """Keys of a host that one member has differently, by member name (`gpu-node-007: {gpus: 4}`). A mapping
    (`docker`, `numaCpus`) is merged key by key with the template's; any other value, a list of containers
    included, replaces the template's; null gives the key its default (unset in the template)."""

    @field_validator("name_pattern")
    @classmethod
    def _pattern(cls, value: str | None) -> str | None:
        return None if value is None else _name_pattern(value)

    @field_validator("template")
    @classmethod
    def _template(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "name" in value:
            raise ValueError("a template has no `name`: each member's name comes from `members` or `namePattern`")
        return value

    @field_validator("overrides")
    @classmethod
    def _overrides(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for member, keys in value.items():
            if "name" in keys:
                raise ValueError(f"the override of '{member}' sets `name`; a member's name is its key here")
        return value

    @model_validator(mode="after")
    def _one_way_of_naming(self) -> HostGroup:
        patterned = self.name_pattern is not None or self.count is not None
        if self.members and patterned:
            raise ValueError("name the members with `members` or with `namePattern` and `count`, not both")
        if patterned and (self.name_pattern is None or self.count is None):
            raise ValueError("`namePattern` and `count` go together (gpu-node-{index:03d} and 128)")
        if not self.members and not patterned:
            raise ValueError("a group needs members: `members` (a list of names) or `namePattern` and `count`")
        unknown = sorted(set(self.overrides) - set(self.names()))
        if unknown:
            raise ValueError(f"overrides name {unknown[0]!r}, which is not a member of this group")
        return self

    @property
    def size(self) -> int:
        """How many members the group has (without naming them)."""
        return len(self.members) if self.count is None else self.count

    def names(self) -> list[str]:
        if self.name_pattern is None or self.count is None:
            return list(self.members)
        pattern = self.name_pattern

        def name(index: int) -> str:
            return _INDEX.sub(lambda m: f"{index:0{m.group(1) or 0}d}", pattern)

        return [name(i) for i in range(self.start, self.start + self.count)]


@dataclass(frozen=True)
class Member:
    """Where an expanded host came from: group `group`'s member number `position` (0-based)."""

    group: int
    position: int
    name: str
    override: Mapping[Any, Any]
    patterned: bool

    @property
    def at(self) -> str:
        """The key that names this member."""
        return (
            f"hostGroups[{self.group}].namePattern"
            if self.patterned
            else f"hostGroups[{self.group}].members[{self.position}]"
        )


def _merged(template: Mapping[Any, Any], override: Mapping[Any, Any]) -> dict[Any, Any]:
    merged = dict(template)
    for key, value in override.items():
        base = merged.get(key)
        if value is None:
            merged.pop(key, None)  # null: the key's default, as if the template did not set it
        else:
            merged[key] = _merged(base, value) if isinstance(base, Mapping) and isinstance(value, Mapping) else value
    return merged


def _named(host: dict[str, Any], name: str) -> dict[str, Any]:
    """`{name}` in the per-host keys (NAME_FIELDS) replaced by the member's name."""
    for path in NAME_FIELDS:
        parent = host
        for key in path[:-1]:
            parent = parent.get(key) if isinstance(parent.get(key), dict) else None  # type: ignore[assignment]
            if parent is None:
                break
        else:
            value = parent.get(path[-1])
            if isinstance(value, str) and _NAME in value:
                if parent is host:
                    host[path[-1]] = value.replace(_NAME, name)
                else:
                    host[path[0]] = {**host[path[0]], path[-1]: value.replace(_NAME, name)}
    return host


def expand(hosts: Any, groups: Any) -> tuple[Any, list[Member | None], list[tuple[str, str]]]:
    """`hosts` (the raw `hosts` value) followed by every member of the raw `groups` as a host entry, the origin
    of each entry (None: written under `hosts`) and the problems of the members' names (a name used twice).

    A group that is not valid itself is left out: validating `hostGroups` reports it."""
    if not isinstance(groups, list) or not groups:
        return hosts, [], []
    written = hosts if isinstance(hosts, list) else []
    if not isinstance(hosts, list) and hosts is not None:
        return hosts, [], []  # `hosts` is refused itself; members are checked once it is a list
    expanded: list[Any] = list(written)
    origins: list[Member | None] = [None] * len(written)
    declared = {
        h["name"]: f"hosts[{i}]"
        for i, h in enumerate(written)
        if isinstance(h, dict) and isinstance(h.get("name"), str)
    }
    problems: list[tuple[str, str]] = []
    valid: list[tuple[int, HostGroup]] = []
    for g_index, raw in enumerate(groups):
        try:
            valid.append((g_index, HostGroup.model_validate(raw)))
        except ValidationError:
            continue
    # Counted before anything is expanded: each group is within MAX_HOSTS, but many could still add up to millions.
    total = len(written) + sum(group.size for _, group in valid)
    if total > MAX_HOSTS:
        sizes = ", ".join(f"hostGroups[{i}]: {group.size}" for i, group in valid)
        problems.append(
            (
                "hostGroups",
                f"{total} hosts in all ({len(written)} under hosts; {sizes}), more than the {MAX_HOSTS} one stack "
                "takes; split the fleet into several stacks",
            )
        )
        return hosts, [], problems
    for g_index, group in valid:
        for position, name in enumerate(group.names()):
            member = Member(g_index, position, name, group.overrides.get(name, {}), group.name_pattern is not None)
            if name in declared:
                problems.append(
                    (
                        member.at,
                        (
                            f"member {position} of the group is named {name!r}, which {declared[name]} already is; a host "
                            "is declared once: remove it from one of them"
                        ),
                    )
                )
                continue
            declared[name] = f"hostGroups[{g_index}]'s member {position}"
            host = _named(_merged(group.template, member.override), name)
            expanded.append({"name": name, **host})
            origins.append(member)
    return expanded, origins, problems


_HOST_PATH = re.compile(r"hosts\[(\d+)\](.*)")
_PART = re.compile(r"\.([^.[]+)|\[([^]]+)\]")


def _in(override: Mapping[Any, Any], rest: str) -> bool:
    """Whether the key path `rest` (`.docker.host`, `.numaCpus[0]`) was written in the member's override."""
    value: Any = override
    parts = [name or index for name, index in _PART.findall(rest)]
    if not parts:
        return False
    for part in parts:
        if not isinstance(value, Mapping):
            return True  # inside a value the override replaced as a whole (its list of containers)
        key = next((k for k in (part, int(part) if part.lstrip("-").isdigit() else None) if k in value), None)
        if key is None:
            return False
        value = value[key]
    return True


def located(problems: Iterable[tuple[str, str]], origins: list[Member | None]) -> list[tuple[str, str]]:
    """Problems with the key paths of expanded hosts (`hosts[130].gpus`) replaced by where the value was written:
    the member's override, else the group's template, once for all the members it fails alike."""
    found: dict[tuple[str, str], list[str]] = {}  # (key path, message with `{name}`) -> the members it is about
    for path, message in problems:
        match = _HOST_PATH.fullmatch(path)
        member = origins[int(match.group(1))] if match and int(match.group(1)) < len(origins) else None
        if match is None or member is None:
            found.setdefault((path, message), [])
            continue
        rest = match.group(2)
        if rest in ("", ".name"):
            at = member.at
        elif _in(member.override, rest):
            found.setdefault((f"hostGroups[{member.group}].overrides.{member.name}{rest}", message), [])
            continue
        else:
            at = f"hostGroups[{member.group}].template{rest}"
        found.setdefault((at, message.replace(member.name, _NAME)), []).append(member.name)
    return [
        (
            path,
            f"member {names[0]!r}: {message.replace(_NAME, names[0])}"
            + (f" (and {len(names) - 1} other member(s) alike)" if len(names) > 1 else "")
            + _for_these_members(path, names, origins)
            if names
            else message,
        )
        for (path, message), names in found.items()
    ]


_TEMPLATE_PATH = re.compile(r"hostGroups\[(\d+)\]\.template\.([^.[]+)")


def _for_these_members(path: str, names: list[str], origins: list[Member | None]) -> str:
    """A template value that fails for some of the members that take it, not for others: changing the template
    changes them all, so say how to change it for those alone (an override; a list such as `containers` is replaced
    whole)."""
    match = _TEMPLATE_PATH.match(path)
    if match is None:
        return ""
    group, key = int(match.group(1)), match.group(2)
    fine = [
        m
        for m in origins
        if m is not None and m.group == group and m.name not in names and key not in (m.override or {})
    ]
    if not fine:
        return ""
    where = ", ".join(f"`overrides.{name}.{key}`" for name in names)
    return (
        f"; the template is every member's: to change it for {', '.join(names)} alone, write {where} (a list there "
        "replaces the template's whole list)"
    )
