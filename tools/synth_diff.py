"""Compare two offline synth plans (`plan.json` of `rocm-stack synth`): which resources a change adds, removes or
changes (by type and name, the identity Pulumi keeps across runs) and, for a changed one, which input paths differ;
in Markdown. `rocm-stack diff` (tools/diff.py) adds what `pulumi up` will do to each (tools/impact.py)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from components.docker.provider_schema import as_diffed, canonical

# A job summary is capped (1 MiB per step); long lists are cut with a note, the artifact has everything.
DEFAULT_MAX_ROWS = 200


class PlannedAlias(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    urn: str  # an old URN the engine finds the resource's state by
    parent: str | None = None  # that URN's parent


class PlannedResource(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    type: str
    name: str
    urn: str = ""
    parent: str | None = None
    provider: str | None = None  # the provider's URN
    custom: bool = True  # False: a component, which the engine never creates, updates or deletes by itself
    inputs: dict[str, Any] = Field(default_factory=dict)
    protect: bool = False
    retain_on_delete: bool = False  # a delete only forgets it: the object stays
    delete_before_replace: bool = False
    replace_on_changes: list[str] = Field(default_factory=list)
    ignore_changes: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    aliases: list[PlannedAlias] = Field(default_factory=list)


class SynthPlan(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    stack: str
    resources: list[PlannedResource]


class UnreadablePlan(Exception):
    pass


Key = tuple[str, str]  # (type, name)


@dataclass(frozen=True)
class Changed:
    key: Key
    paths: tuple[str, ...]  # input paths, plus "parent"/"protect"/"retain_on_delete"/"depends_on" when those changed


@dataclass(frozen=True)
class PlanDiff:
    added: tuple[Key, ...]
    removed: tuple[Key, ...]
    changed: tuple[Changed, ...]
    unchanged: int

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.changed)


def load(path: Path) -> SynthPlan:
    """A synth plan: `path` itself, or the plan.json of the folder synth wrote."""
    if path.is_dir():
        path = path / "plan.json"
    try:
        return SynthPlan.model_validate(json.loads(path.read_text()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValidationError) as error:
        raise UnreadablePlan(f"{path}: {error}") from None


def _repeated(plan: SynthPlan) -> set[Key]:
    counts = Counter((r.type, r.name) for r in plan.resources)
    return {key for key, count in counts.items() if count > 1}


def _by_key(plan: SynthPlan, ambiguous: set[Key]) -> dict[Key, PlannedResource]:
    """Resources by type and name; a type and name repeated in either plan is told apart by the parent in
    both plans, so matching never depends on which of the two comes first."""
    resources: dict[Key, PlannedResource] = {}
    for resource in plan.resources:
        key = (resource.type, resource.name)
        if key in ambiguous:
            key = (resource.type, f"{resource.name} (in {resource.parent})")
        resources[key] = resource
    return resources


def changed_paths(old: Any, new: Any, path: str = "") -> Iterator[str]:
    """Leaf paths (`spec.containers[0].image`) whose values differ between two JSON values; a set (a tuple,
    components.docker.provider_schema.SetValue) differs as a whole."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in sorted(old.keys() | new.keys()):
            child = f"{path}.{key}" if path else str(key)
            if key not in old or key not in new:
                yield child
            else:
                yield from changed_paths(old[key], new[key], child)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new)):
            yield from changed_paths(a, b, f"{path}[{index}]")
    elif old != new:
        yield path or "(value)"


def matched(base: SynthPlan, head: SynthPlan) -> tuple[dict[Key, PlannedResource], dict[Key, PlannedResource]]:
    """The resources of both plans by the key they are matched on."""
    ambiguous = _repeated(base) | _repeated(head)
    return _by_key(base, ambiguous), _by_key(head, ambiguous)


def diff(base: SynthPlan, head: SynthPlan) -> PlanDiff:
    before, after = matched(base, head)
    changed = []
    for key in sorted(before.keys() & after.keys()):
        old, new = before[key], after[key]
        # Each input as its provider compares it (a Docker set without order, a default left out, a Computed input
        # left out), so what its diff does not see is no change.
        inputs = as_diffed(new.type, old.inputs, new.inputs)
        paths = list(changed_paths(canonical(old.type, inputs[0]), canonical(new.type, inputs[1])))
        if old.parent != new.parent:  # a new parent is a new URN: Pulumi replaces it unless aliased (tools/impact.py)
            paths.append("parent")
        if old.protect != new.protect:
            paths.append("protect")
        if old.retain_on_delete != new.retain_on_delete:
            paths.append("retain_on_delete")
        if sorted(old.depends_on) != sorted(new.depends_on):
            paths.append("depends_on")
        if paths:
            changed.append(Changed(key, tuple(paths)))
    return PlanDiff(
        added=tuple(sorted(after.keys() - before.keys())),
        removed=tuple(sorted(before.keys() - after.keys())),
        changed=tuple(changed),
        unchanged=len(before.keys() & after.keys()) - len(changed),
    )


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def to_markdown(result: PlanDiff, title: str, max_rows: int = DEFAULT_MAX_ROWS) -> str:
    lines = [f"### {title}", ""]
    if result.empty:
        lines.append(f"No resource changes ({result.unchanged} unchanged).")
        return "\n".join(lines) + "\n"
    lines += [
        f"**{len(result.added)} added, {len(result.removed)} removed, {len(result.changed)} changed**, "
        f"{result.unchanged} unchanged.",
        "",
        "| Change | Type | Name | Input paths |",
        "| --- | --- | --- | --- |",
    ]
    rows = [("added", key, "") for key in result.added]
    rows += [("removed", key, "") for key in result.removed]
    rows += [("changed", c.key, ", ".join(f"`{cell(p)}`" for p in c.paths)) for c in result.changed]
    for change, (type_token, name), paths in rows[:max_rows]:
        lines.append(f"| {change} | `{type_token}` | `{cell(name)}` | {paths} |")
    if len(rows) > max_rows:
        lines += ["", f"... and {len(rows) - max_rows} more rows: see the synth artifact."]
    return "\n".join(lines) + "\n"
