"""Read `stacks/Pulumi.<stack>.yaml` the way the Pulumi CLI does, and hand its config over as the CLI would.

The CLI parses stack files with gopkg.in/yaml.v3 v3.0.1 (pulumi/pulumi sdk/go/common/encoding/marshal.go L27;
sdk/go.mod). yaml.v3 is a Go port of libyaml, so the text is scanned and parsed by libyaml here too (PyYAML's
CSafeLoader); what differs is how plain scalars become values, which follows yaml.v3's resolve.go, not PyYAML's
YAML 1.1 rules. Every rule below names its upstream source (pulumi/pulumi at v3.259.0, go-yaml/yaml at v3.0.1).
Errors are `StackFileError`: one line, `FILE:LINE:COLUMN: what is wrong`.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rules import is_secure  # the pack reads stack files with it too

# What the Pulumi runtime hands the program in place of a `secure:` value that synth cannot decrypt.
SECRET_PLACEHOLDER = "[secret]"


def set_secret(key: str, value: str, path: bool = False) -> str:
    """How a message tells to store a secret: the Pulumi CLI's command, and for synth alone (no Pulumi backend to
    encrypt with) the `secure:` value synth takes in the stack file, which it never decrypts (docs/configuration.md,
    "Secrets with synth alone")."""
    if path:
        return (
            f"`pulumi config set --path --secret '{key}' {value}` (synth alone: write `{{secure: v1:REPLACE-ME}}` "
            "there in the stack file)"
        )
    return (
        f"`pulumi config set --secret {key} {value}` (synth alone: `rocm-stack:{key}: {{secure: v1:REPLACE-ME}}` in "
        "the stack file)"
    )


_PLAIN = "tag:rocm-stack:plain"  # an implicit (unquoted, untagged) scalar, resolved by _resolve_plain
_MERGE = "tag:yaml.org,2002:merge"
# yaml.v3 resolve.go L52-58: the only words that are not strings (YAML 1.2 core; `yes`, `no`, `on`, `off` are text).
_WORDS: dict[str, Any] = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}
_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")  # resolve.go L124 yamlStyleFloat
# yaml.v3 resolve.go L296-335 allowedTimestampFormats, tried with Go's time.Parse: "2006-1-2T15:4:5.999999999Z07:00"
# (or a lowercase t), "2006-1-2 15:4:5.999999999" (no zone: UTC) and "2006-1-2".
_TIMESTAMP = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{1,2}-[0-9]{1,2})"
    r"(?:(?:[Tt](?P<time>[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2})(?P<fraction>\.[0-9]{1,9})?(?P<zone>Z|[+-][0-9]{2}:[0-9]{2}))"
    r"|(?: (?P<naive>[0-9]{1,2}:[0-9]{1,2}:[0-9]{1,2})(?P<naive_fraction>\.[0-9]{1,9})?))?"
)
_STR = "tag:yaml.org,2002:str"
_TAGS = {f"tag:yaml.org,2002:{name}": f"!!{name}" for name in ("str", "int", "float", "bool", "null", "timestamp")}
# Tags yaml.v3 reads (resolve.go L116-122 resolvableTag, decode.go L573 !!binary, the merge key) or that say what a
# collection is anyway.
_KNOWN_TAGS = {*_TAGS, "tag:yaml.org,2002:binary", _MERGE, "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


class StackFileError(Exception):
    """A stack file the CLI would refuse (or read differently); its text is `FILE:LINE:COLUMN: message`."""

    def __init__(self, path: Path | str, message: str, line: int | None = None, column: int | None = None):
        where = ":".join(str(p) for p in (path, line, column) if p is not None)
        super().__init__(f"{where}: {message}")


def _go_int(text: str) -> int | None:
    """strconv.ParseInt(text, 0, 64) / ParseUint, as resolve.go L191-203 calls them (after removing '_')."""
    sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    base = 10
    if body[:2] in ("0x", "0X"):
        base, body = 16, body[2:]
    elif body[:2] in ("0o", "0O"):
        base, body = 8, body[2:]
    elif body[:2] in ("0b", "0B"):
        base, body = 2, body[2:]
    elif body[:1] == "0" and len(body) > 1:
        base, body = 8, body[1:]  # `017` is 15: yaml.v3 keeps YAML 1.1 octals (resolve.go L233-236)
    if not body or not body.isalnum():
        return None
    try:
        value = sign * int(body, base)
    except ValueError:
        return None
    return value if -(1 << 63) <= value < (1 << 64) else None


def _resolve_plain(text: str) -> Any:
    """The value yaml.v3 decodes an unquoted scalar to when the target is `any` (resolve.go L126-265)."""
    if text in _WORDS:
        return _WORDS[text]
    if not text or text[0] not in "+-.0123456789":
        return text
    plain = text.replace("_", "")
    if (number := _go_int(plain)) is not None:
        return number
    if _FLOAT.fullmatch(plain):
        return float(plain)
    stamp = _timestamp(text)
    return text if stamp is None else stamp


def _timestamp(text: str) -> str | None:
    """What the CLI hands the program for a YAML timestamp, or None when `text` is none: yaml.v3 decodes it to a Go
    time.Time, which config object.go L490 turns into its String() ("2001-12-14 00:00:00 +0000 UTC")."""
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        return None
    try:
        date = datetime.date(*map(int, match["date"].split("-")))
        clock = match["time"] or match["naive"] or "0:0:0"
        hour, minute, second = map(int, clock.split(":"))
        moment = datetime.datetime.combine(date, datetime.time(hour, minute, second))
    except ValueError:
        return None  # time.Parse refuses 2001-02-30 or 25:00:00: the text stays a string
    if match["zone"] not in (None, "Z"):
        # Parse keeps an offset as the machine's local zone when it matches, else a nameless one: the text the
        # program would get depends on where `pulumi up` runs.
        raise ValueError(
            f"{text} is a timestamp with a UTC offset, which the Pulumi CLI turns into a time whose text depends on "
            "the machine's time zone; quote it to keep it as written"
        )
    fraction = (match["fraction"] or match["naive_fraction"] or "").rstrip("0").rstrip(".")
    return f"{moment:%Y-%m-%d %H:%M:%S}{fraction} +0000 UTC"


def _tagged(tag: str, text: str) -> Any:
    """The value of a scalar with an explicit tag, as yaml.v3 decodes it (decode.go L565-580, resolve.go L126-150:
    the value resolved as if plain must be of the tag's kind, an int also fits !!float)."""
    if tag == "tag:yaml.org,2002:binary":
        try:
            # base64.StdEncoding.DecodeString, which skips line breaks (decode.go L573-577).
            data = base64.b64decode(re.sub(r"[\r\n]", "", text), validate=True)
        except ValueError:
            raise ValueError("!!binary value contains invalid base64 data; the Pulumi CLI refuses it too") from None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(
                "this !!binary value is no UTF-8 text, and every config value reaches the program as text"
            ) from None
    if tag == "tag:yaml.org,2002:timestamp":
        stamp = _timestamp(text)
        if stamp is None:
            raise ValueError(f"cannot decode !!str `{text}` as a !!timestamp (the Pulumi CLI's yaml.v3 says so too)")
        return stamp
    value = _resolve_plain(text) if _timestamp(text) is None else text
    kind = {bool: "!!bool", int: "!!int", float: "!!float", type(None): "!!null"}.get(type(value), "!!str")
    if kind == _TAGS[tag]:
        return value
    if kind == "!!int" and tag == "tag:yaml.org,2002:float":
        return float(value)
    raise ValueError(f"cannot decode {kind} `{text}` as a {_TAGS[tag]} (the Pulumi CLI's yaml.v3 says so too)")


def _ignored_tag(node: Node) -> str:
    """Why a tag the CLI ignores is refused: yaml.v3 decodes `!secret abc` to the plain string "abc" (resolve.go
    L127-130: a tag that is not resolvable returns the text as is; decode.go L612 hands it to `any`), so the file
    would say something the CLI does not do."""
    tag = node.tag.replace("tag:yaml.org,2002:", "!!")
    what = f"the plain text {node.value!r}" if isinstance(node, ScalarNode) else "the value without it"
    secret = (
        "; a secret is set with `pulumi config set --secret` (a `secure:` value in the file)"
        if "secret" in tag.lower()
        else ""
    )
    return f"the tag {tag} means nothing to the Pulumi CLI: it reads {what}; remove the tag{secret}"


class _Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """libyaml's scanner and parser (what yaml.v3 ports); implicit scalars are left for _resolve_plain."""

    def resolve(self, kind: Any, value: str, implicit: tuple[bool, bool]) -> str:
        if kind is ScalarNode and implicit[0]:
            return _MERGE if value == "<<" else _PLAIN
        return str(super().resolve(kind, value, implicit))


# yaml.v3 v3.0.1 decode.go L455-491: every node decoded counts, and every one decoded inside an alias's expansion
# counts as aliased; past 1,000 decodes and 100 aliased ones, a document whose aliased share exceeds the allowed
# ratio (99% up to 400,000 decodes, falling linearly to 10% at 4,000,000) is refused ("document contains excessive
# aliasing"). A small file of nested aliases would otherwise expand to billions of values.
_ALIAS_RATIO_LOW, _ALIAS_RATIO_HIGH = 400_000, 4_000_000


def _allowed_alias_ratio(decodes: int) -> float:
    """decode.go L468-482 allowedAliasRatio."""
    if decodes <= _ALIAS_RATIO_LOW:
        return 0.99
    if decodes >= _ALIAS_RATIO_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_RATIO_LOW) / (_ALIAS_RATIO_HIGH - _ALIAS_RATIO_LOW)


def _children(node: Node) -> list[Node]:
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, SequenceNode) else []


def _alias_slots(root: Node) -> set[tuple[int, int]]:
    """(id of a collection node, index in its content, a mapping's keys and values alternating) of every child that
    was an alias (`*name`) in the text.

    libyaml's composer hands an alias over as the anchored node itself; the node's first place in document order is
    its definition, every later one an alias (what yaml.v3 keeps as an AliasNode). Each node is walked once."""
    seen = {id(root)}
    aliases: set[tuple[int, int]] = set()
    stack = [(root, iter(enumerate(_children(root))))]
    while stack:
        node, children = stack[-1]
        step = next(children, None)
        if step is None:
            stack.pop()
        elif id(step[1]) in seen:
            aliases.add((id(node), step[0]))
        else:
            seen.add(id(step[1]))
            stack.append((step[1], iter(enumerate(_children(step[1])))))
    return aliases


# yaml.v3 v3.0.1 reads up to 10,000 levels (scannerc.go L955-1009, max_flow_level and max_indents: "exceeded max depth
# of 10000"), libyaml, which parses here, 1,000 (its default max nest level: "exceeded maximum nesting depth"). The
# program reads every structured value through Python's JSON decoder (the runtime hands it over as JSON text), which
# stops near 1,000 levels (RecursionError), so no deeper value can reach it however the CLI reads the file. No key of
# any section nests more than 10 levels (docs/config-reference.md), so values nested deeper than this are refused
# with their reason, in synth and in `pulumi up` alike, never a traceback.
MAX_NESTING = 100
NESTING_PROBLEM = (
    f"is nested more than {MAX_NESTING} levels deep, which no key of the stack config is (and the program's JSON "
    "reader cannot take past about 1,000); write the value the key's reference shows"
)


def nesting_depth(value: Any, limit: int = MAX_NESTING) -> int:
    """How many lists and mappings deep `value` is, counted without recursion and no further than `limit` + 1."""
    deepest, stack = 0, [(value, 0)]
    while stack and deepest <= limit:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth + 1)
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


class _Builder:
    def __init__(self, path: Path | str, root: Node | None = None):
        self.path = path
        self.depth = 0
        self.aliases = _alias_slots(root) if root is not None else set()
        self.decodes = 1  # the document node (decode.go L497)
        self.aliased = 0
        self.alias_depth = 0
        self.expanding: set[int] = set()

    def error(self, node: Node, message: str) -> StackFileError:
        return StackFileError(self.path, message, node.start_mark.line + 1, node.start_mark.column + 1)

    def _count(self, node: Node) -> None:
        """yaml.v3 decode.go L484-491 (decoder.unmarshal): the excessive-aliasing limit."""
        self.decodes += 1
        if self.alias_depth:
            self.aliased += 1
        if (
            self.aliased > 100
            and self.decodes > 1000
            and self.aliased / self.decodes > _allowed_alias_ratio(self.decodes)
        ):
            raise self.error(
                node,
                f"document contains excessive aliasing ({self.aliased:,} of the first {self.decodes:,} values come "
                "from aliases); the Pulumi CLI refuses it too (yaml.v3 decode.go): write the values out, or use fewer "
                "nested aliases",
            )

    def value(self, node: Node, alias: bool = False) -> Any:
        """The node's value; `alias`: it stands where the text has an alias (`*name`), which yaml.v3 decodes as
        one node more and then the anchored node again, inside the alias (decode.go L533-543)."""
        self._count(node)
        if not alias:
            return self._decoded(node)
        if id(node) in self.expanding:
            raise self.error(
                node,
                "an anchor's value contains an alias of itself (`&a [*a]`): it never ends; the Pulumi CLI refuses it "
                "too (yaml.v3 decode.go: anchor value contains itself)",
            )
        self.expanding.add(id(node))
        self.alias_depth += 1
        try:
            self._count(node)
            return self._decoded(node)
        finally:
            self.alias_depth -= 1
            self.expanding.discard(id(node))

    def _decoded(self, node: Node) -> Any:
        if node.tag not in _KNOWN_TAGS and node.tag != _PLAIN:
            raise self.error(node, _ignored_tag(node))
        if isinstance(node, ScalarNode):
            if node.tag in (_STR, _MERGE):
                # Quoted scalars are always strings (yaml.v3 decode.go L568-570); so is `<<` as a value, whose
                # !!merge tag resolve() leaves as text (resolve.go L127-130).
                return node.value
            try:
                value = _resolve_plain(node.value) if node.tag == _PLAIN else _tagged(node.tag, node.value)
            except ValueError as error:
                raise self.error(node, str(error)) from None
            if isinstance(value, float) and not math.isfinite(value):
                # The CLI fails on it: json.Marshal has no Inf/NaN (config object.go L405-407).
                raise self.error(
                    node,
                    f"{node.value} cannot be passed to the program (JSON has no "
                    "infinity or NaN); the Pulumi CLI refuses it too",
                )
            return value
        self.depth += 1
        try:
            if self.depth > MAX_NESTING + 2:  # the file's own `config:` and the key's namespace:name
                raise self.error(node, f"this value {NESTING_PROBLEM}")
            if isinstance(node, SequenceNode):
                return [self.value(item, (id(node), index) in self.aliases) for index, item in enumerate(node.value)]
            return self.mapping(node)
        finally:
            self.depth -= 1

    def key(self, node: Node, alias: bool = False) -> str:
        if not isinstance(node, ScalarNode):
            raise self.error(node, "a mapping key must be a plain value, not a list or a mapping")
        value = self.value(node, alias)
        # Inside a config value yaml.v3 keys become text with Go's %v (config object.go L505-510).
        return "<nil>" if value is None else json.dumps(value) if isinstance(value, bool) else str(value)

    def mapping(self, node: MappingNode) -> dict[str, Any]:
        out: dict[str, Any] = {}
        seen: dict[tuple[str, str], int] = {}
        merged: dict[str, Any] = {}
        for index, (key_node, value_node) in enumerate(node.value):
            if key_node.tag == _MERGE:  # `<<: *anchor` (yaml.v3 decode.go merge): explicit keys win
                if isinstance(value_node, SequenceNode):
                    sources = [
                        (source, (id(value_node), at) in self.aliases) for at, source in enumerate(value_node.value)
                    ]
                else:
                    sources = [(value_node, (id(node), 2 * index + 1) in self.aliases)]
                for source, alias in reversed(sources):
                    if not isinstance(source, MappingNode):
                        raise self.error(source, "a merge key `<<` takes a mapping or a list of mappings")
                    merged.update(self.value(source, alias))
                continue
            # Duplicates compare the node kind and its raw text, so `a`/"a" and 1/"1" are the same key
            # (yaml.v3 decode.go L767-783; its message is `mapping key "a" already defined at line 1`).
            ident = (type(key_node).__name__, key_node.value if isinstance(key_node, ScalarNode) else "")
            if ident in seen:
                raise self.error(
                    key_node,
                    f'mapping key "{key_node.value}" already defined at line {seen[ident]}; '
                    "the Pulumi CLI refuses a key repeated in one mapping",
                )
            seen[ident] = key_node.start_mark.line + 1
            out[self.key(key_node, (id(node), 2 * index) in self.aliases)] = self.value(
                value_node, (id(node), 2 * index + 1) in self.aliases
            )
        return {**merged, **out}


def _parse(text: str, path: Path | str) -> tuple[Any, Node | None]:
    try:
        # yaml.v3 Unmarshal decodes the first document only (yaml.go L54); later ones are not even parsed.
        node = next(iter(yaml.compose_all(text, Loader=_Loader)), None)
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        problem = error.problem or error.context or "not valid YAML"
        lines = text.splitlines()
        if mark is not None and mark.line < len(lines) and "\t" in lines[mark.line][: mark.column + 1]:
            problem += " (a tab: YAML indents with spaces only)"
        if "nesting depth" in problem:  # libyaml's 1,000 levels, which the builder's own limit keeps far from
            problem += f" (1,000 levels): a value {NESTING_PROBLEM}"
        raise StackFileError(
            path, f"invalid YAML: {problem}", mark.line + 1 if mark else None, mark.column + 1 if mark else None
        ) from None
    except yaml.YAMLError as error:
        raise StackFileError(path, f"invalid YAML: {error}") from None
    return (None if node is None else _Builder(path, node).value(node)), node


def read_document(text: str, path: Path | str) -> Any:
    """A YAML file of the project (the placement lock) read as the stack file is: the first document, yaml.v3's
    values, its limits on aliases and nesting, a repeated key refused; StackFileError otherwise."""
    return _parse(text, path)[0]


def _node_of(node: Node | None, key: str) -> Node | None:
    if isinstance(node, MappingNode):
        return next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == key), None)
    return None


def _kind(value: Any) -> str:
    return "a list" if isinstance(value, list) else "text" if isinstance(value, str) else f"the value {value!r}"


def read_config(path: Path, project: str) -> dict[str, Any]:
    """The `config:` of a stack file as the CLI reads it: full `namespace:name` keys, `{secure: ...}` kept as is.

    Raises StackFileError (one line naming file, line and column) for anything the CLI would refuse.
    """
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise StackFileError(path, f"cannot read the stack file ({error.strerror})") from None
    try:
        text = raw.decode("utf-8").removeprefix("\ufeff")  # the CLI strips a BOM (workspace/loaders.go L31-49)
    except UnicodeDecodeError as error:
        raise StackFileError(path, f"not UTF-8 text (byte {error.start})") from None
    document, root = _parse(text, path)
    if document is None:
        return {}  # an empty file is an empty config (loaders.go L186-192)
    if not isinstance(document, dict):
        # loaders.go L194 SimplifyMarshalledProject: "expected project to be an object".
        raise StackFileError(path, f"expected a mapping with a `config:` key, found {_kind(document)}", 1, 1)
    config = document.get("config")
    config_node = _node_of(root, "config")
    if config is None:
        return {}
    if not isinstance(config, dict):
        # map.go L313: "could not unmarshal map ... cannot unmarshal !!seq into map[string]config.Value".
        where = (config_node.start_mark.line + 1, config_node.start_mark.column + 1) if config_node else (None, None)
        raise StackFileError(
            path, f"`config:` must be a mapping of `namespace:key: value`, found {_kind(config)}", *where
        )
    values: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for key_node, _ in config_node.value:  # type: ignore[union-attr]
        name = _Builder(path).key(key_node)
        line, column = key_node.start_mark.line + 1, key_node.start_mark.column + 1
        full = _full_key(name, project)
        if full is None:
            # config/key.go L45-70 ParseKey.
            raise StackFileError(
                path,
                f"could not parse {name} as a configuration key (configuration keys "
                "should be of the form `<namespace>:<name>`)",
                line,
                column,
            )
        if full in lines:
            # `hosts:` and `rocm-stack:hosts:` both land on one key; the CLI keeps one of them at random
            # (loaders.go L72-81 ranges over a Go map), so neither is safe to pick.
            raise StackFileError(
                path,
                f"'{name}' is the key '{full}' again (first at line {lines[full]}); keep one of them",
                line,
                column,
            )
        lines[full] = line
        value = config[name]
        # A null top-level value reaches the program as "" (loaders.go L402-408, with a CLI warning).
        values[full] = "" if value is None else value
    return values


def _full_key(name: str, project: str) -> str | None:
    """config/key.go ParseKey, after loaders.go L51-89 gave a bare key the project's namespace."""
    parts = name.split(":")
    if len(parts) == 1:
        return f"{project}:{name}"
    if len(parts) == 2:
        return name
    if len(parts) == 3 and parts[1] == "config":  # the pre-1.0 form `<namespace>:config:<name>`
        return f"{parts[0]}:{parts[2]}"
    return None


def _go_json_value(value: Any) -> Any:
    """Nested secrets as their placeholder; whole floats as Go's encoding/json writes them (8.0 -> 8)."""
    if is_secure(value):
        return SECRET_PLACEHOLDER
    if isinstance(value, dict):
        return {k: _go_json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_go_json_value(v) for v in value]
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    return value


def _contains_secure(value: Any) -> bool:
    if is_secure(value):
        return True
    if isinstance(value, dict):
        return any(map(_contains_secure, value.values()))
    if isinstance(value, list):
        return any(map(_contains_secure, value))
    return False


def as_program_config(
    config: Mapping[str, Any], secrets: Mapping[str, str] | None = None
) -> tuple[dict[str, str], list[str]]:
    """(values, secret keys) as the CLI hands them to the program (PULUMI_CONFIG, PULUMI_CONFIG_SECRET_KEYS).

    Top-level scalars become text (`8` -> "8", true -> "true"); lists and mappings JSON. A `secure:` value,
    also one nested anywhere inside a value, arrives decrypted inline, and its top-level key is listed as
    secret (pulumi/pulumi pkg/resource/deploy/source_eval.go L217-223, config/map.go L104-113 SecureKeys).
    Synth cannot decrypt, so it hands over SECRET_PLACEHOLDER. `secrets` adds plain values the program sees
    as secrets (tests).
    """
    values: dict[str, str] = {}
    secret_keys: list[str] = []
    for key, value in config.items():
        if _contains_secure(value):
            secret_keys.append(key)
        value = _go_json_value(value)
        values[key] = value if isinstance(value, str) else json.dumps(value)
    for key, value in (secrets or {}).items():
        values[key] = value
        secret_keys.append(key)
    return values, secret_keys
