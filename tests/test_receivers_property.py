"""Property (issue 36): every quantity, size, duration, port and URL key of the stack config takes only what the system
receiving it takes, and means by it what that system means.

Each key of StackConfig is found by its type; for each, generated values (the receiver's grammar and near misses) go
through the key's own type, and what the schema accepts must be read alike by an oracle made of the receiver's own
rule: a transcription of the upstream function, cited, written apart from the schema's implementation. The schema may
refuse more (bounds, a minimum); it may never accept what the receiver refuses, nor read a value differently.
`make test` runs a fixed sample (derandomized); ROCM_STACK_PROPERTY_EXAMPLES=2000 runs a longer one.
"""

from __future__ import annotations

import math
import os
import re
import types
import typing
from decimal import ROUND_CEILING, Decimal, InvalidOperation
from typing import Annotated, Any, Union
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity
from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from schema import StackConfig
from schema.mirror import ChartPrefix, FilePrefix, RegistryPrefix
from schema.types import (
    ChartRepository,
    Duration,
    HostPort,
    KubeQuantity,
    LogFileSize,
    MemoryLimit,
    PodMemory,
    Port,
    RetentionSize,
    ShmSize,
    UnitDuration,
    Url,
    WorkloadShmSize,
    duration_seconds,
    quantity_value,
)

EXAMPLES = int(os.environ.get("ROCM_STACK_PROPERTY_EXAMPLES", "300"))
BOUNDED: dict[str, Any] = {
    "derandomize": True,
    "deadline": None,
    "database": None,
    "max_examples": EXAMPLES,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much],
}


# --- the receivers' rules, transcribed from upstream ------------------------------------------------------------------
def go_units_ram_in_bytes(text: str) -> int | None:
    """docker/go-units v0.5.0 size.go L91-150 parseSize with binaryMap (RAMInBytes), step by step."""
    sep = max(text.rfind(c) for c in "01234567890. ")
    if sep == -1:
        return None
    number, suffix = (text[: sep + 1], text[sep + 1 :]) if text[sep] != " " else (text[:sep], text[sep + 1 :])
    # strconv.ParseFloat(num, 64): decimal digits, one point, an exponent (Go's hex floats and inf left out: they
    # would only make the receiver accept more, never less).
    if not re.fullmatch(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?", number):
        return None
    size = float(number)
    if size < 0:
        return None
    if not suffix:
        return int(size)
    if len(suffix) > 3:
        return None
    suffix = suffix.lower()
    if suffix[0] == "b":
        return int(size) if len(suffix) == 1 else None
    multiplier = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}.get(suffix[0])
    if multiplier is None:
        return None
    if (len(suffix) == 2 and suffix[1] != "b") or (len(suffix) == 3 and suffix[1:] != "ib"):
        return None
    return int(size * multiplier)


def alecthomas_base2_bytes(text: str) -> int | None:
    """alecthomas/units @ 0f3dac36c52b ParseBase2Bytes (bytes.go L28-36): util.go L54-138 ParseUnit, step by step, with
    the units of si.go L16-50 MakeUnitMap("iB", "B", 1024), then MakeUnitMap("B", "B", 1024)."""
    for suffix in ("iB", "B"):
        units = {"B": 1.0, **{p + suffix: float(1024 ** (i + 1)) for i, p in enumerate("KMGTPE")}}
        s, total, failed = text, 0.0, False
        neg = s[:1] == "-"
        s = s[1:] if s[:1] in "+-" and s else s
        if s == "0":
            return 0
        if s == "":
            return None
        while s and not failed:
            if not (s[0] == "." or s[0].isdigit() and s[0].isascii()):
                failed = True
                break
            digits = re.match(r"[0-9]*", s)[0]  # type: ignore[index]
            if any(int(digits[:i]) >= ((1 << 63) - 10) // 10 for i in range(1, len(digits))):
                return None
            term, s = float(int(digits or 0)), s[len(digits) :]
            fraction = ""
            if s[:1] == ".":
                fraction = re.match(r"[0-9]*", s[1:])[0]  # type: ignore[index]
                if any(int(fraction[:i]) >= ((1 << 63) - 10) // 10 for i in range(1, len(fraction))):
                    return None
                term += int(fraction or 0) / 10.0 ** len(fraction)
                s = s[1 + len(fraction) :]
                if not digits and not fraction:
                    return None
            elif not digits:
                return None
            unit = re.match(r"[^0-9.]*", s)[0]  # type: ignore[index]
            s = s[len(unit) :]
            if unit not in units:
                failed = True
                break
            total += term * units[unit]
        if not failed:
            total = -total if neg else total
            return int(total) if float(-(1 << 63)) <= total <= float((1 << 63) - 1) else None
    return None


# k8s.io/apimachinery pkg/api/resource @ v0.36.3: quantity.go L149 splitREString, suffix.go L113-132 and L180-200.
_SPLIT = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_SUFFIXES = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "n", "u", "m", "k", "M", "G", "T", "P", "E"}


def apimachinery_quantity(text: str) -> Decimal | None:
    """A quantity's value as ParseQuantity gives it (None: refused): the split, the suffix table (or `e`/`E` and an
    integer), the number by the Kubernetes client, nanos rounded up (quantity.go L366-371)."""
    match = _SPLIT.fullmatch(text)
    if match is None or match[1].count(".") > 1 or match[1].lstrip("+-") in ("", "."):
        return None
    suffix = match[2]
    if suffix not in _SUFFIXES and not re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
        return None
    try:
        value: Decimal = parse_quantity(text)  # type: ignore[no-untyped-call]
    except (ValueError, InvalidOperation):
        return None
    return value if value >= 2**63 else value.quantize(Decimal("1e-9"), rounding=ROUND_CEILING)


_UNITS = {"ms": (7, 10**6), "s": (6, 10**9), "m": (5, 60 * 10**9), "h": (4, 3600 * 10**9)}
_UNITS |= {"d": (3, 86400 * 10**9), "w": (2, 7 * 86400 * 10**9), "y": (1, 365 * 86400 * 10**9)}


def prometheus_duration_nanos(text: str) -> int | None:
    """prometheus/common v0.65.0 model/time.go L205-259 ParseDuration, loop for loop."""
    if text == "0":
        return 0
    if text == "":
        return None
    total, last, rest = 0, 0, text
    while rest:
        if rest[0] not in "0123456789":
            return None
        digits = len(rest) - len(rest.lstrip("0123456789"))
        value, rest = int(rest[:digits]), rest[digits:]
        if value >= 2**64:  # strconv.ParseUint(s, 10, 0)
            return None
        unit_length = next((i for i, c in enumerate(rest) if c in "0123456789"), len(rest))
        if unit_length == 0 or rest[:unit_length] not in _UNITS:
            return None
        position, nanos = _UNITS[rest[:unit_length]]
        rest = rest[unit_length:]
        if position <= last:
            return None
        last = position
        if value > 2**63 // nanos:
            return None
        total += value * nanos
        if total > 2**63 - 1:
            return None
    return total


def tcp_port(value: Any) -> int | None:
    """A TCP port is 16 bits (RFC 9293 section 3.1); 0 asks the kernel for any port, which no peer can dial."""
    return value if type(value) is int and 0 < value < 2**16 else None


def alertmanager_url(text: str) -> str | None:
    """Alertmanager's URL (config/config.go parseURL: url.Parse, scheme http or https, a host) dialled over TCP."""
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0 or re.search(r"\s", text):
        return None
    return text


def repository_address(text: str, schemes: tuple[str, ...]) -> str | None:
    """Where Helm or Docker connects for a chart or image: one of `schemes` (none: a registry host and path, as Docker
    reads an image's prefix), a host, and a TCP port if any."""
    try:
        parts = urlsplit(text if schemes else f"//{text}")
        port = parts.port
    except ValueError:
        return None
    if (schemes and parts.scheme not in schemes) or not parts.hostname or port == 0 or re.search(r"\s", text):
        return None
    return text


def smtp_host_port(text: str) -> str | None:
    """Alertmanager's HostPort (net.SplitHostPort, a port required), dialled over TCP."""
    host, _, port = text.rpartition(":")
    if not host or ":" in host or re.search(r"\s", text) or not port.isascii() or not port.isdigit():
        return None
    return text if tcp_port(int(port)) else None


# --- which keys are which -------------------------------------------------------------------------------------------
KINDS: dict[Any, str] = {
    KubeQuantity: "quantity",
    ShmSize: "docker size",
    MemoryLimit: "docker size",
    LogFileSize: "docker size",
    RetentionSize: "prometheus size",
    WorkloadShmSize: "docker and kubernetes size",
    PodMemory: "kubernetes size",
    Duration: "duration",
    UnitDuration: "duration",
    Port: "port",
    Url: "url",
    HostPort: "host:port",
    ChartRepository: "chart repository",
    RegistryPrefix: "registry",
    ChartPrefix: "oci charts",
    FilePrefix: "https files",
}
# The schemes Helm and Docker connect by, per kind of address.
SCHEMES = {
    "chart repository": ("http", "https", "oci"),
    "registry": (),
    "oci charts": ("oci",),
    "https files": ("https",),
}


def _signature(annotation: Any) -> tuple[Any, list[Any]]:
    """A type as pydantic keeps it on a field (Annotated unpacked into annotation and metadata)."""
    info = FieldInfo.from_annotation(annotation)
    return info.annotation, list(info.metadata)


_SIGNATURES = [(_signature(annotation), annotation) for annotation in KINDS]


def _kind_type(annotation: Any) -> Any:
    signature = _signature(annotation)
    return next((kind for known, kind in _SIGNATURES if known == signature), None)


def _alternatives(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        return [a for arg in typing.get_args(annotation) for a in _alternatives(arg)]
    return [annotation]


def typed_keys(model: type[BaseModel] = StackConfig, path: str = "") -> list[tuple[str, Any]]:
    """(key path, type) of every key whose type is one of KINDS, through nested models, lists and maps."""
    found = []
    for name, field in model.model_fields.items():
        key = f"{path}.{field.alias or name}".lstrip(".")
        stack = [Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation]
        while stack:
            annotation = stack.pop()
            if (kind := _kind_type(annotation)) is not None:
                found.append((key, kind))
                continue
            for alternative in _alternatives(annotation):
                if (kind := _kind_type(alternative)) is not None:
                    found.append((key, kind))
                    continue
                origin, args = typing.get_origin(alternative), typing.get_args(alternative)
                if origin is Annotated:
                    stack.append(args[0])
                elif origin is list:
                    stack.append(args[0])
                elif origin is dict:
                    stack.append(args[1])
                elif isinstance(alternative, type) and issubclass(alternative, BaseModel):
                    found += typed_keys(alternative, key)
    return found


KEYS = typed_keys()


def test_every_kind_of_value_has_its_keys():
    kinds = {KINDS[annotation] for _, annotation in KEYS}
    assert kinds == set(KINDS.values())
    keys = dict(KEYS)
    assert KINDS[keys["hosts.containers.shmSize"]] == "docker size"
    assert KINDS[keys["training.kubernetes.memory"]] == "kubernetes size"
    assert KINDS[keys["kubernetes.queues.clusterQueues.gpus.nominal"]] == "quantity"
    assert KINDS[keys["monitoring.receivers.email.smarthost"]] == "host:port"
    assert KINDS[keys["monitoring.exporterPort"]] == "port"


def test_no_size_port_or_duration_key_escapes_the_kinds():
    """A key named like a size, port, duration or URL is of one of the kinds (a new key must pick its receiver)."""
    named = re.compile(
        r"(size|Size|memory|port|Port|url|Url|For|Window|interval|Interval|time|repository|registry|charts|files)$"
    )
    kinds = {key for key, _ in KEYS}
    missing = []
    for key, field in _all_leaf_keys(StackConfig):
        if named.search(key.rsplit(".", 1)[-1]) and key not in kinds and field not in (bool, int):
            missing.append(key)
    assert missing == []


def _all_leaf_keys(model: type[BaseModel], path: str = "") -> list[tuple[str, Any]]:
    found = []
    for name, field in model.model_fields.items():
        key = f"{path}.{field.alias or name}".lstrip(".")
        models = [a for a in _flatten(field.annotation) if isinstance(a, type) and issubclass(a, BaseModel)]
        if models:
            for nested in models:
                found += _all_leaf_keys(nested, key)
        else:
            plain = [a for a in _flatten(field.annotation) if a is not type(None)]
            found.append((key, plain[0] if len(plain) == 1 else None))
    return found


def _flatten(annotation: Any) -> list[Any]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _flatten(args[0])
    if origin in (Union, types.UnionType, list):
        return [a for arg in args for a in _flatten(arg)]
    if origin is dict:
        return _flatten(args[1])
    return [annotation]


# --- generated values ----------------------------------------------------------------------------------------------
def _near(grammar: str, alphabet: str) -> st.SearchStrategy[str]:
    return st.one_of(
        st.from_regex(grammar, fullmatch=True).filter(lambda s: len(s) < 24),
        st.text(alphabet, max_size=10),
    )


VALUES = {
    "quantity": _near(r"[0-9]{0,4}(\.[0-9]{0,3})?([numkMGTPEK]i?|[eE][+-]?[0-9]{1,2})?", "0123456789.eEikKMGTPnum+- _"),
    "size": _near(
        r"([0-9]{1,4}(\.[0-9]{0,2})?( ?([kKmMgGtTpPE]([iI]?[bB])?|[bB]|[KMGTPE]i))?){1,2}", "0123456789. kKmMgGiIbBE"
    ),
    "duration": _near(
        r"([0-9]{1,12}y)?([0-9]{1,3}w)?([0-9]{1,3}d)?([0-9]{1,3}h)?([0-9]{1,3}m)?([0-9]{1,3}s)?", "0123456789ywdhms."
    ),
    "port": st.integers(-2, 70000),
    "url": _near(r"(https?|ftp)://[a-z]{1,5}(:[0-9]{1,6})?(/[a-z]{0,3})?", "htps:/.a0123456789 "),
    "host:port": _near(r"[a-z.]{0,6}:[0-9]{1,6}", "smtp.:0123456789 "),
    "address": _near(
        r"((https?|oci|ftp)://)?[a-z]{1,5}(\.[a-z]{1,3})?(:[0-9]{1,6})?(/[a-z]{0,3})?", "htpsoci:/.a0123456789 "
    ),
}


def _schema_reading(annotation: Any, value: Any) -> Any:
    """What the key's type makes of the value, or None when it refuses it."""
    try:
        validated = TypeAdapter(annotation).validate_python(value)
    except ValidationError:
        return None
    return validated


def _check(kind: str, annotation: Any, value: Any) -> None:
    accepted = _schema_reading(annotation, value)
    if kind == "quantity":
        receiver = apimachinery_quantity(value)
        if accepted is not None:
            assert receiver is not None and quantity_value(accepted) == receiver, value
    elif kind.endswith("size"):
        docker = go_units_ram_in_bytes(value)
        quantity = apimachinery_quantity(value[:-1] if re.fullmatch(r"[0-9.]+[KMGTPE]iB", value) else value)
        kubernetes = math.ceil(quantity) if quantity is not None else None
        prometheus = alecthomas_base2_bytes(value)
        receivers = {"docker size": (docker,), "kubernetes size": (kubernetes,), "prometheus size": (prometheus,)}
        readers = [r for r in receivers.get(kind, (docker, kubernetes)) if r is not None]
        if accepted is not None:
            # Read by a receiver of the key, as each that reads it reads it (so both alike where both do).
            assert readers and all(int(accepted) == r for r in readers), (value, readers)
    elif kind == "duration":
        nanos = prometheus_duration_nanos(value)
        if accepted is not None:
            assert nanos is not None and nanos > 0 and duration_seconds(accepted) * 10**9 == pytest.approx(nanos)
    elif kind == "port":
        if accepted is not None:
            assert tcp_port(value) == accepted
    elif kind == "url":
        if accepted is not None:
            assert alertmanager_url(value) == accepted, value
    elif kind == "host:port":
        if accepted is not None:
            assert smtp_host_port(value) == accepted, value
    elif kind in SCHEMES:
        if accepted is not None:
            assert repository_address(value, SCHEMES[kind]) == accepted, value


@pytest.mark.parametrize(("key", "annotation"), KEYS, ids=[key for key, _ in KEYS])
def test_each_key_takes_what_its_receiver_takes_and_reads_it_alike(key, annotation):
    kind = KINDS[annotation]
    values = VALUES["size" if kind.endswith("size") else "address" if kind in SCHEMES else kind]

    @settings(**{**BOUNDED, "max_examples": max(EXAMPLES // 3, 30)})
    @given(values)
    def check(value: Any) -> None:
        _check(kind, annotation, value)

    check()
