"""The value types several sections of the stack configuration share: one definition each (names, environment
variables, byte sizes, CPU lists, ports, durations, GPU counts)."""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from kubernetes.utils.quantity import parse_quantity
from pydantic import AfterValidator, BeforeValidator, ByteSize, Field

from domain.gpus import MAX_GPUS_PER_HOST
from rules import chart_version_problem
from rules.supply import PINNED_CHARTS

from .base import Check, matching
from .bounds import MAX_BYTES, MAX_CPUS, MAX_GPU_INDEX, MAX_ITEMS

# A DNS label: Docker container names, Pulumi resource names and Kubernetes names all accept it (RFC 1123).
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
Name = Annotated[
    str,
    matching(
        DNS_LABEL,
        "lowercase letters, digits and '-', at most 63 characters, starting and ending with a letter or digit",
    ),
]
# POSIX.1-2017 Base Definitions 8.1: "names shall not contain the character '='" and portable names "consist
# solely of uppercase letters, digits, and the <underscore> ... and do not begin with a digit"; lowercase is
# tolerated by every shell. Docker itself refuses an empty name (`docker run -e =x`: invalid environment variable).
EnvName = Annotated[
    str,
    matching(
        r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name: letters, digits and '_', not starting with a digit"
    ),
]
# YAML turns `NCCL_MIN_NCHANNELS: 112` into a number; an environment value is text either way.
EnvValue = Annotated[str, BeforeValidator(lambda v: str(v) if type(v) in (int, float) else v)]


# --- sizes and quantities, each read as the system that receives it reads it -----------------------------------
# Kubernetes: the serialization grammar of k8s.io/apimachinery pkg/api/resource/quantity.go L37-61 @ v0.36.3 with the
# suffixes of suffix.go L113-132 (binary Ki ... Ei; decimal n, u, m, k, M, G, T, P, E; or an exponent e/E and a
# signed integer). Requests, limits and quotas are never negative (the API server's ValidateNonnegativeQuantity,
# Kueue's validateResourceQuantity), so no sign.
QUANTITY_PATTERN = r"([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
_QUANTITY = re.compile(QUANTITY_PATTERN)
# quantity.go L66-69: "no quantity may represent a number greater than 2^63-1"; the stack refuses what it would cap.
_QUANTITY_MAX = Decimal(2**63 - 1)
QUANTITY_EXPECTED = "a Kubernetes quantity, e.g. 64Gi, 500m, 2k"
_QUANTITY_RULE = (
    "a number and a suffix Ki, Mi, Gi, Ti, Pi, Ei (powers of 1024), m, k, M, G, T, P, E (powers of 1000) or an "
    "exponent such as e3 (apimachinery resource.Quantity)"
)


def quantity_value(text: str) -> Decimal:
    """The number a Kubernetes quantity stands for, as the API server reads it: the official client's parser
    (kubernetes.utils.parse_quantity) on text of apimachinery's grammar (the parser alone also takes `K`, `1_000` or
    `Infinity`), rounded up to whole nanos as ParseQuantity does (quantity.go L366-371)."""
    if not _QUANTITY.fullmatch(text):
        raise ValueError(f"{text!r} is not a Kubernetes quantity: {_QUANTITY_RULE}, e.g. 64Gi, 500m, 2k")
    value: Decimal = parse_quantity(text)  # type: ignore[no-untyped-call]
    if value > _QUANTITY_MAX:
        raise ValueError(f"{text!r} is more than Kubernetes holds in a quantity (2^63-1, quantity.go)")
    return value.quantize(Decimal("1e-9"), rounding=ROUND_CEILING)


def _quantity_text(value: Any) -> Any:
    # YAML reads `quota: 16` as a number; the quantity is its text.
    return str(value) if type(value) is int else value


def _valid_quantity(text: str) -> str:
    quantity_value(text)
    return text


# A Kubernetes quantity the stack hands over as written (requests, quotas, volume sizes).
KubeQuantity = Annotated[
    str, BeforeValidator(_quantity_text), Check(_valid_quantity, expected=QUANTITY_EXPECTED, pattern=QUANTITY_PATTERN)
]


# Docker: docker/go-units v0.5.0 size.go L86-150 RAMInBytes, what `docker run --shm-size` and `--memory` (opts.MemBytes)
# and json-file's max-size read: a number (Go's ParseFloat), an optional space, and an optional suffix k, m, g, t or p
# in any case, with an optional `b` or `ib`, all powers of 1024 (16g = 16GB = 16GiB), or `b` alone; no `Gi`.
_DOCKER_SIZE = re.compile(r"(?P<n>([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?) ?(?P<unit>([kmgtp])(b|ib)?|b)?", re.I)
_DOCKER_UNITS = {"k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4, "p": 1024**5}
DOCKER_SIZE_EXPECTED = (
    "a size as Docker reads it: a number and k, m, g, t or p (with an optional b or ib; each a power of 1024), "
    "e.g. 16GiB or 16g"
)


def docker_bytes(text: str) -> int:
    """Bytes of a size as Docker reads it (go-units RAMInBytes: a float times the unit, truncated)."""
    match = _DOCKER_SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"{text!r} is not {DOCKER_SIZE_EXPECTED}")
    unit = (match["unit"] or "b")[0].lower()
    return int(float(match["n"]) * _DOCKER_UNITS.get(unit, 1))


# Prometheus: `--storage.tsdb.retention.size` is kingpin's BytesVar, alecthomas/units ParseBase2Bytes (prometheus
# v3.5.0 cmd/prometheus/main.go L449-450; units v0.0.0-20240927000941-0f3dac36c52b bytes.go L24-36, util.go L54-138,
# si.go L16-50): one or more terms of a number (digits, a fraction or both) and a unit, all of B, KiB ... EiB or all
# of B, KB ... EB, each a power of 1024 (200GB = 200GiB); no lowercase k, m, g (Docker's), no `Gi` (Kubernetes's).
_PROMETHEUS_TERM = re.compile(r"(?P<whole>[0-9]*)(\.(?P<fraction>[0-9]*))?(?P<unit>[^0-9.]*)")
_GO_LEADING_INT_MAX = (2**63 - 10) // 10  # util.go leadingInt: a longer run of digits overflows
_PROMETHEUS_UNITS = [
    {"B": 1, **{f"{p}iB": 1024 ** (i + 1) for i, p in enumerate("KMGTPE")}},
    {"B": 1, **{f"{p}B": 1024 ** (i + 1) for i, p in enumerate("KMGTPE")}},
]
PROMETHEUS_SIZE_EXPECTED = (
    "a size as Prometheus reads it: a number and B, KB, MB, GB, TB, PB, EB (or KiB ... EiB), each a power of 1024, "
    "e.g. 200GB or 200GiB"
)


def prometheus_bytes(text: str) -> int:
    """Bytes of a size as Prometheus reads it (ParseBase2Bytes: the terms' sum as a float, truncated)."""
    sign, body = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    if body == "0":
        return 0
    terms = [m for m in _PROMETHEUS_TERM.finditer(body) if m.group()]
    runs = [run for m in terms for run in (m["whole"], m["fraction"] or "")]
    if (
        body
        and "".join(m.group() for m in terms) == body
        and all(m["whole"] or m["fraction"] for m in terms)
        and all(int(run[:-1] or 0) < _GO_LEADING_INT_MAX for run in runs)
    ):
        for units in _PROMETHEUS_UNITS:
            if all(m["unit"] in units for m in terms):
                # util.go L93-131: each term's digits, then its fraction over 10^digits, times the unit, summed.
                total = sign * sum(
                    (int(m["whole"] or 0) + int(m["fraction"] or 0) / 10.0 ** len(m["fraction"] or ""))
                    * units[m["unit"]]
                    for m in terms
                )
                if -(2.0**63) <= total <= 2.0**63 - 1:
                    return int(total)
    try:
        docker_bytes(text)
        hint = " (Docker reads it, Prometheus does not: its units are capitals, e.g. 200GB)"
    except ValueError:
        hint = ""
    raise ValueError(f"{text!r} is not {PROMETHEUS_SIZE_EXPECTED}{hint}")


def kubernetes_bytes(text: str) -> int:
    """Bytes of a memory quantity (rounded up to a whole byte). `64GiB`, which Kubernetes does not read, is taken for
    its `64Gi` (the stack writes the request itself): no reader takes it for anything else."""
    if re.fullmatch(r"[0-9.]+[KMGTPE]iB", text):
        text = text[:-1]
    return math.ceil(quantity_value(text))


def _both_bytes(text: str) -> int:
    """A size the stack hands to Docker (`--shm-size`) and to Kubernetes (an emptyDir's sizeLimit) alike: what either
    reads, unless both read it and differ (`16G`: 16 GiB to Docker, 16 * 10^9 bytes to Kubernetes)."""
    readings: dict[str, int] = {}
    for receiver, read in (("Docker", docker_bytes), ("Kubernetes", kubernetes_bytes)):
        try:
            readings[receiver] = read(text)
        except ValueError:
            pass
    if not readings:
        raise ValueError(
            f"{text!r} is a size neither Docker nor Kubernetes reads; write a number and GiB, MiB (or Gi, Mi), e.g. 16GiB"
        )
    if len(set(readings.values())) > 1:
        number = _DOCKER_SIZE.fullmatch(text)
        example = f"{number['n'] if number else '16'}GiB"
        raise ValueError(
            f"{text!r} means {readings['Docker']:,} bytes to Docker (go-units RAMInBytes: every unit a power of 1024) "
            f"but {readings['Kubernetes']:,} to Kubernetes (a quantity: k, M, G are powers of 1000, m is 1/1000): "
            f"write a unit both read alike, e.g. {example}"
        )
    return next(iter(readings.values()))


def _human_bytes(size: int) -> str:
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return f"{size} bytes"


SizeReader = Literal["docker", "kubernetes", "both", "prometheus"]
_READERS = {"docker": docker_bytes, "kubernetes": kubernetes_bytes, "both": _both_bytes, "prometheus": prometheus_bytes}
# How the reference (tools.config_reference) names each reading.
_READ_AS = {
    "docker": "as Docker reads it: k, m, g, t, p, each a power of 1024 (16g = 16GB = 16GiB)",
    "kubernetes": "a Kubernetes quantity: Ki, Mi, Gi (or KiB, MiB, GiB) powers of 1024, k, M, G powers of 1000",
    "both": "read alike by Docker and Kubernetes: 16GiB or 16Gi",
    "prometheus": "as Prometheus reads it: B, KB, MB, GB, TB, PB, EB (or KiB ... EiB), each a power of 1024 (200GB = "
    "200GiB)",
}


def byte_size_at_least(minimum: int, reader: SizeReader, whole_mib: bool = False) -> Any:
    """A byte size with a unit (`16GiB`), read as `reader` reads it (Docker, Kubernetes, or both for a key handed to
    each); a bare number under the minimum is taken for a missing unit. `whole_mib`: a whole number of MiB (what the
    provider's MiB inputs and `100m`-style options take)."""
    read = _READERS[reader]

    def bytes_of(value: Any) -> Any:
        if type(value) is int and 0 <= value < minimum:
            raise ValueError(
                f"{value} without a unit is {value} bytes, less than {_human_bytes(minimum)}; "
                f"write the unit, e.g. {value}GiB"
            )
        return read(value) if isinstance(value, str) else value

    def within(value: ByteSize) -> ByteSize:
        if value > MAX_BYTES:
            raise ValueError(f"must be at most {_human_bytes(MAX_BYTES)}, more than any server holds (got {value})")
        if value < minimum:
            raise ValueError(f"must be at least {_human_bytes(minimum)} (got {_human_bytes(int(value))})")
        if whole_mib and value % 1024**2:
            raise ValueError(
                f"must be a whole number of MiB (got {_human_bytes(int(value))}), e.g. {-(-value // 1024**2)}MiB"
            )
        return value

    return Annotated[
        ByteSize, BeforeValidator(bytes_of), Check(within, expected=_READ_AS[reader], ge=minimum, le=MAX_BYTES)
    ]


# RCCL and PyTorch DataLoader workers exchange tensors through /dev/shm. The Docker provider takes whole MiB
# (v4.5.0 resource_docker_container.go L863-865 "Size of `/dev/shm` in MBs"): a part of one would be cut off; less than
# one would silently become Docker's 64 MiB default.
ShmSize = byte_size_at_least(1024**2, "docker", whole_mib=True)
# A workload's /dev/shm: `--shm-size` on Docker, an emptyDir's sizeLimit (written in Mi) on Kubernetes.
WorkloadShmSize = byte_size_at_least(1024**2, "both", whole_mib=True)
# A Kubernetes pod's memory (its request and limit).
PodMemory = byte_size_at_least(1024**2, "kubernetes")


# The provider's `memory` is whole MiB (terraform-provider-docker v4.5.0 resource_docker_container.go "memory": "in
# MBs"), and the daemon refuses less than 6 MiB (moby v20.10.24 daemon/daemon_unix.go L431-432 linuxMinMemory).
MemoryLimit = byte_size_at_least(6 * 1024**2, "docker", whole_mib=True)
# json-file's max-size takes a size with a unit; written as whole MiB (`100m`), which the daemon keeps as given.
LogFileSize = byte_size_at_least(1024**2, "docker", whole_mib=True)


def _cpu_numbers(value: str) -> str:
    """CPU numbers a machine can have, so that expanding the list (cpus_of) stays small."""
    for part in value.split(","):
        first, _, last = part.partition("-")
        if int(last or first) >= MAX_CPUS:
            raise ValueError(
                f"CPU {int(last or first)} is past the last CPU Linux can have ({MAX_CPUS - 1}) in {value!r}"
            )
        if int(first) > int(last or first):
            raise ValueError(f"the range {part} runs backwards; write it low-high, e.g. {last}-{first}")
    return value


# Prometheus's `--storage.tsdb.retention.size`, read as Prometheus reads it (prometheus_bytes) and written in whole
# MB, which it reads as MiB; less than 64 MiB would hold no block.
RetentionSize = byte_size_at_least(64 * 1024**2, "prometheus", whole_mib=True)
# A Linux CPU list as cpusets and `docker run --cpuset-cpus` take it: "0-47,96-143".
CpuList = Annotated[
    str,
    matching(r"\d{1,6}(-\d{1,6})?(,\d{1,6}(-\d{1,6})?){0,1023}", "a CPU list such as 0-47,96-143"),
    AfterValidator(_cpu_numbers),
]


def cpus_of(cpu_list: str) -> set[int]:
    """The CPU numbers of a CpuList ("0-2,8" -> {0, 1, 2, 8})."""
    cpus: set[int] = set()
    for part in cpu_list.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


AbsolutePath = Annotated[str, matching(r"/\S*", "an absolute path without spaces (starting with /)")]


def valid_tcp_port(value: str) -> str:
    # A TCP port is 16 bits (RFC 9293 section 3.1): Alertmanager and KEDA take any digits (Go url.Parse,
    # net.SplitHostPort) and every request then fails to dial.
    try:
        port = urlsplit(value if "://" in value else f"//{value}").port
    except ValueError:
        port = 0
    if port == 0:
        raise ValueError(f"the port of {value!r} must be a number from 1 to 65535 (a TCP port)")
    return value


# An http(s) URL a server of the stack calls (Alertmanager webhooks, KEDA's Prometheus).
Url = Annotated[
    str, matching(r"https?://[^\s/?#]+[^\s]*", "an http:// or https:// URL"), AfterValidator(valid_tcp_port)
]
HostPort = Annotated[
    str, matching(r"[^\s:]+:[0-9]{1,5}", "host:port, e.g. smtp.example.com:587"), AfterValidator(valid_tcp_port)
]
# A Helm chart repository: an http(s) index URL or an OCI registry path (`helm install --repo URL`, `oci://...`).
ChartRepository = Annotated[
    str,
    matching(r"(https?|oci)://[^\s/?#]+[^\s]*", "an https:// chart repository or an oci:// registry path"),
    AfterValidator(valid_tcp_port),
]
# A TCP/UDP port number (host side of a published port, a container port, a Service port).
Port = Annotated[int, Field(ge=1, le=65535)]
# GPUs of one host, partition, node or server: at most what one host can show, 64 (an 8-GPU node in CPX mode).
GpuCount = Annotated[int, Field(ge=1, le=MAX_GPUS_PER_HOST)]
# The index of one of them.
GpuIndex = Annotated[int, Field(ge=0, le=MAX_GPU_INDEX)]
# The provider deletes a container (stop with its destroyGraceSeconds, remove, wait) inside its 20-minute delete
# timeout (kreuzwerker/terraform-provider-docker v4.5.0 internal/provider/resource_docker_container.go L14
# dockerContainerDeleteDefaultTimeout, L33); a grace leaves the remove and wait a minute of it.
MAX_STOP_GRACE_SECONDS = 20 * 60 - 60
# Seconds from the stop signal (SIGTERM) to SIGKILL when a container stops: `docker stop`, a daemon shutdown,
# Pulumi's delete before a replace.
StopGraceSeconds = Annotated[int, Field(ge=1, le=MAX_STOP_GRACE_SECONDS)]
# How long `pulumi up` waits for one step (a pull, a server's start): the deadline of its resource's create
# (components/docker/deadlines.py). A step that takes longer than a day is hung, not slow.
WaitSeconds = Annotated[int, Field(ge=60, le=86400)]


# Prometheus duration syntax (units in descending order, as promtool and the Prometheus Operator CRDs accept), read as
# prometheus/common v0.65.0 (what Prometheus v3.5.0 builds with, its go.mod) model/time.go L205-259 ParseDuration does:
# ASCII digits, and "duration out of range" past 2^63-1 nanoseconds (about 292 years), which ends Prometheus at start.
_DURATION = re.compile(
    r"(?:([0-9]+)y)?(?:([0-9]+)w)?(?:([0-9]+)d)?(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?(?:([0-9]+)ms)?"
)
_UNIT_NANOS = (365 * 86400 * 10**9, 7 * 86400 * 10**9, 86400 * 10**9, 3600 * 10**9, 60 * 10**9, 10**9, 10**6)
_MAX_NANOS = 2**63 - 1


def duration_seconds(value: str) -> float:
    """Seconds in a Prometheus duration such as `1h30m`."""
    match = _DURATION.fullmatch(value)
    if not value or match is None:
        raise ValueError(f"'{value}' is not a Prometheus duration; expected e.g. 30s, 5m, 1h30m")
    nanos = 0
    for number, unit in zip(match.groups(), _UNIT_NANOS):
        if number is None:
            continue
        # time.go L248-255: each term, then the sum, within 2^63-1 nanoseconds.
        if int(number) > 2**63 // unit or nanos + int(number) * unit > _MAX_NANOS:
            raise ValueError(
                f"'{value}' is beyond the longest duration Prometheus reads (2^63-1 ns, about 292 years: "
                "prometheus/common ParseDuration, 'duration out of range'); write at most 292y"
            )
        nanos += int(number) * unit
    return nanos / 10**9


def _positive_duration(value: str) -> str:
    if duration_seconds(value) <= 0:
        raise ValueError(f"'{value}' must be longer than zero")
    return value


# Any positive Prometheus duration (alert windows, `for:`).
Duration = Annotated[str, AfterValidator(_positive_duration)]
# One unit only: the DeviceConfig's serviceMonitor.interval takes no `1m30s` (amd.com_deviceconfigs.yaml
# `pattern: ^([0-9]+)(ms|s|m|h)$`); the Docker-side scrape interval uses the same type so one value fits both.
UnitDuration = Annotated[
    str,
    matching(r"[0-9]+(ms|s|m|h)", "a number and one unit (ms, s, m or h), e.g. 30s"),
    AfterValidator(_positive_duration),
]


# --- Kubernetes' rules for the labels, selectors, taints and tolerations the stack writes -------------------------
# One implementation of the API server's checks: k8s.io/apimachinery pkg/api/validate/content/kube.go IsLabelKey
# (what util/validation IsQualifiedName and meta/v1/validation ValidateLabelName call) and IsLabelValue, with
# content/dns.go IsDNS1123Subdomain for a key's prefix. Labels and node selectors are ValidateLabels (key and value
# of each entry), taints validateNodeTaints and tolerations ValidateTolerations (pkg/apis/core/validation/
# validation.go): their keys are label keys, their values label values.
_K8S_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")  # kube.go labelKeyFmt
_K8S_NAME_MAX = 63  # kube.go labelKeyMaxLength, LabelValueMaxLength
_DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")  # dns.go
_DNS1123_SUBDOMAIN_MAX = 253
_NAME_RULE = "letters, digits, '-', '_' and '.', starting and ending with a letter or digit"


def label_key_problem(key: str) -> str | None:
    """Why Kubernetes refuses `key` as a label key (IsLabelKey), or None."""
    parts = key.split("/")
    if len(parts) > 2:
        return "has more than one '/': a label key is an optional DNS subdomain prefix, '/' and a name (amd.com/gpu)"
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            return "has an empty prefix before '/'"
        if len(prefix) > _DNS1123_SUBDOMAIN_MAX:
            return f"has a prefix longer than {_DNS1123_SUBDOMAIN_MAX} characters"
        if not _DNS1123_SUBDOMAIN.fullmatch(prefix):
            return (
                f"has the prefix {prefix!r}, which is no lowercase DNS subdomain (lowercase letters, digits, '-' and "
                "'.', starting and ending with a letter or digit)"
            )
    name = parts[-1]
    if not name:
        return "has an empty name"
    if len(name) > _K8S_NAME_MAX:
        return f"has a name longer than {_K8S_NAME_MAX} characters"
    if not _K8S_NAME.fullmatch(name):
        return f"has the name {name!r}, which is not {_NAME_RULE}"
    return None


def label_value_problem(value: str) -> str | None:
    """Why Kubernetes refuses `value` as a label value (IsLabelValue), or None."""
    if len(value) > _K8S_NAME_MAX:
        return f"is longer than {_K8S_NAME_MAX} characters"
    if value and not _K8S_NAME.fullmatch(value):
        return f"must be empty or {_NAME_RULE}"
    return None


def _label_key(key: str) -> str:
    if (problem := label_key_problem(key)) is not None:
        raise ValueError(f"{key!r} is no Kubernetes label key: it {problem} (apimachinery IsLabelKey)")
    return key


def _label_value(value: str) -> str:
    if (problem := label_value_problem(value)) is not None:
        raise ValueError(f"{value!r} is no Kubernetes label value: it {problem} (apimachinery IsLabelValue)")
    return value


def _dns_subdomain(value: str) -> str:
    if len(value) > _DNS1123_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(value):
        raise ValueError(
            f"{value!r} is no DNS subdomain (lowercase letters, digits, '-' and '.', starting and ending with a letter "
            f"or digit, at most {_DNS1123_SUBDOMAIN_MAX} characters: apimachinery IsDNS1123Subdomain)"
        )
    return value


# An object name Kubernetes validates as a DNS subdomain (a StorageClass's: ValidateClassName, NameIsDNSSubdomain).
DnsSubdomain = Annotated[str, Check(_dns_subdomain, expected="a DNS subdomain, e.g. fast-ssd")]


LabelKey = Annotated[
    str,
    Check(
        _label_key,
        expected="a label key: an optional DNS subdomain prefix and '/', then at most 63 letters, digits, '-', '_' or "
        "'.', e.g. amd.com/gpu",
    ),
]
LabelValue = Annotated[
    str,
    Check(_label_value, expected="a label value: at most 63 letters, digits, '-', '_' or '.' (or empty)"),
]
# Labels, node selectors and pod selectors (ValidateLabels: each key a label key, each value a label value).
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=MAX_ITEMS)]
TaintEffect = Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]  # validation.go validateTaintEffect


def pinned_chart_version(example: str) -> Check:
    """A Helm chart's version as its chart repository spells it (`v` first or not, as `example`), exact: the
    catalogue's pinned-charts (rules.chart_version_problem, one definition for config and pack), refused with its
    id. (A module global here, so that a test can bypass it as a tampered program would: tests/conftest.py.)"""
    prefixed = example.startswith("v")

    def check(value: str) -> str:
        if problem := chart_version_problem(value):
            raise ValueError(PINNED_CHARTS.refusal(problem))
        if value.startswith("v") != prefixed:
            raise ValueError(
                f"expected a chart version such as {example}, as its chart repository spells it (got {value!r})"
            )
        return value

    return Check(check, expected=f"an exact chart version such as {example}")
