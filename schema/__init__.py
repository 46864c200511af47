"""The stack configuration: one typed schema, validated once before any resource is declared.

Every key lives in the `rocm-stack:` namespace of `stacks/Pulumi.<stack>.yaml`. `load()` turns the raw
key/value map into a `StackConfig` or raises `ConfigError` listing every problem with its key path.

Why one file: `StackConfig` is the root model, and its validators are the checks that read several sections at once
(hosts with workloads, monitoring with hosts, credentials with every section); `load()` runs them in one pass so
that one run lists every problem. The section models and their own checks live in the modules beside it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

import rules
from rules.credentials import (
    NO_CREDENTIALS_ON_COMMAND_LINES,
    NO_PLAINTEXT_SECRETS_IN_CONFIG,
    REMOTE_CODE_OPT_IN,
)
from rules.stack_config import PROD_BY_STACK_NAME, PROD_SECRET_STRENGTH, VLLM_TLS_PEM

from . import checks, docker, effects, groups, kubernetes, mirror, monitoring, workload_checks
from .base import ConfigModel, environment_default, shown_default, strict_problems
from .bounds import MAX_HOSTS, MAX_ITEMS
from .checks import ChecksConfig
from .docker import DEFAULT_IMAGES, HostConfig, ImageRef, SecurityConfig, SecurityProfile
from .groups import HostGroup
from .kubernetes import KubernetesConfig
from .workloads import GpuFleet, InferenceConfig, TrainingConfig
from .monitoring import MonitoringConfig
from .mirror import MirrorConfig, RegistryPrefix
from .stackfile import MAX_NESTING, NESTING_PROBLEM, SECRET_PLACEHOLDER, nesting_depth, set_secret

PROJECT = "rocm-stack"

# Keys that hold credentials: accepted only as Pulumi secrets, never in the schema as plain values.
SECRET_KEYS = {
    "registryPassword": "the password or token of `rocm-stack:registry`",
    "huggingfaceToken": "the Hugging Face token vLLM uses to download gated models",
    "vllmApiKey": "the API key vLLM requires on /v1 (Kubernetes and Docker inference; required in prod)",
    "grafanaAdminPassword": "the password of Grafana's `admin` on the monitoring host (required in prod when it is on)",
    "vllmTlsCertificate": "the PEM certificate (chain) the Docker vLLM proxies serve HTTPS with, with `vllmTlsKey`: "
    "its names must cover every host's Docker endpoint name (Prometheus verifies them)",
    "vllmTlsKey": "the PEM private key of `vllmTlsCertificate`",
}


class RegistryConfig(ConfigModel):
    """A private registry the hosts pull from; its password is the secret `rocm-stack:registryPassword`."""

    server: RegistryPrefix
    """The registry's host name (and port), as `docker login` takes it."""
    username: str


class StackConfig(ConfigModel):
    environment: Literal["dev", "prod"] = Field(
        json_schema_extra=shown_default("`prod` for a stack whose name has the word `prod` or `production`, else `dev`")
    )
    """Selects the safe defaults and the stricter checks of prod. A stack whose name has `prod` or `production` as a
    word, in any case (`prod`, `PROD`, `prod-eu`, `prod_eu`, `eu.prod`, `euProd`, `production`), is prod whatever
    this says (`dev` there is refused); `prod` makes any other stack prod. Unset: `dev` for a stack of another name
    (`product-demo` and `preprod` are dev)."""
    hosts: Annotated[list[HostConfig], Field(max_length=MAX_HOSTS)] = Field(
        [HostConfig(name="local")],
        json_schema_extra=shown_default("one host `local`, unless `hostGroups` or `kubernetes` is set"),
    )
    """The GPU hosts running Docker. Unset: one host `local` on the local Docker socket with one container
    (none when `hostGroups` or `kubernetes` is set)."""
    host_groups: Annotated[list[HostGroup], Field(max_length=MAX_HOSTS)] = []
    """Fleets described once: each group's members become hosts after those of `hosts`, exactly as if written
    there (docs/configuration.md, "Host groups")."""
    images: Annotated[dict[str, ImageRef], Field(max_length=MAX_ITEMS)] = DEFAULT_IMAGES  # type: ignore[assignment]
    """Image references by key (containers and workloads name a key); setting one keeps the other defaults. A key
    is one reference for every GPU family, or one per family (`vllm: {gfx942: REF, gfx950: REF}`): a Docker host
    takes its `gpuModel`'s family's. In prod each must be pinned: an explicit version tag other than `latest`, or an
    `@sha256:` digest (dev takes a moving tag such as `latest`)."""
    security: SecurityConfig = SecurityConfig()
    """Privileges of the GPU containers: see docs/security.md."""
    registry: RegistryConfig | None = None
    """A private registry the hosts pull from; its password is the secret `registryPassword`."""
    kubernetes: KubernetesConfig | None = None
    """The Kubernetes GPU layer (docs/kubernetes.md). Unset: no Kubernetes resources (a Docker-only stack)."""
    gpu_fleet: GpuFleet | None = None
    """The Kubernetes cluster's GPU nodes advertising amd.com/gpu (the cluster cannot be asked offline); nodes of a
    partition profile are counted by its `nodes`. Kubernetes workloads are checked against them. Required in prod
    when a workload runs on Kubernetes, unless partition profiles declare the nodes."""
    training: Annotated[list[TrainingConfig], Field(max_length=MAX_ITEMS)] = []
    """Training jobs (docs/workloads.md), each on Kubernetes, on Docker partitions of `hosts`, or both."""
    inference: Annotated[list[InferenceConfig], Field(max_length=MAX_ITEMS)] = []
    """vLLM servers (docs/workloads.md), each on Kubernetes, on Docker partitions of `hosts`, or both."""
    monitoring: MonitoringConfig = MonitoringConfig()
    """GPU metrics exporter, alert rules and dashboard (docs/monitoring.md)."""
    checks: ChecksConfig = ChecksConfig()
    """The host preflight and the GPU check per partition that gate Docker partitions, and the GPU check that starts
    every Kubernetes GPU pod (docs/operations.md)."""
    mirror: MirrorConfig | None = None
    """Air-gapped install (docs/operations.md): every image, chart and CRD file of both layers comes from this mirror
    (`rocm-stack images --stack S` lists the images to copy there). Unset: the public registries and repositories."""

    @model_validator(mode="before")
    @classmethod
    def _default_gpu_access(cls, data: Any) -> Any:
        return docker.with_default_gpu_access(data)

    @field_validator("images")
    @classmethod
    def _keep_default_images(cls, images: dict[str, ImageRef]) -> dict[str, ImageRef]:
        # Setting one image must not drop the pinned defaults of the others.
        return {**DEFAULT_IMAGES, **images}

    @property
    def monitoring_host(self) -> str | None:
        """The Docker host running Prometheus, Alertmanager and Grafana (`monitoring.host`, or its default)."""
        return self.monitoring.monitoring_host(
            self.environment, self.kubernetes is not None, [host.name for host in self.hosts]
        )

    @property
    def security_profile(self) -> SecurityProfile:
        if self.security.profile is not None:
            return self.security.profile
        return environment_default(SecurityConfig, "profile", self.environment)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ConfigProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{PROJECT}:{self.path}: {self.message}" if self.path else f"{PROJECT}: {self.message}"


class ConfigError(Exception):
    """Every problem of a stack's configuration; its text is one line per problem, each naming the key."""

    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        super().__init__("\n".join(map(str, problems)))


@dataclass(frozen=True)
class StackSecrets:
    """Secret config values, as Pulumi secret outputs (or None when unset)."""

    registry_password: Any = None
    huggingface_token: Any = None
    vllm_api_key: Any = None
    grafana_admin_password: Any = None
    vllm_tls_certificate: Any = None
    vllm_tls_key: Any = None
    # Other stack keys Pulumi holds as secrets (`hosts`, `training`, ...), without the namespace: a key with a
    # `secure:` value nested anywhere inside (`pulumi config set --path --secret`) arrives as one secret, since the
    # CLI marks only top-level keys (pulumi/pulumi sdk/go/common/resource/config/map.go SecureKeys), so every
    # environment variable declared under it is kept secret.
    secret_sections: frozenset[str] = frozenset()

    def env_is_secret(self, *sections: str) -> bool:
        return any(section in self.secret_sections for section in sections)


def _decrypted(values: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The project's config values whose text the loader sees: without the namespace, and without the secrets synth
    hands as a placeholder (a stack file read as is holds `{secure: ...}`)."""
    return {
        k[len(prefix) :]: v
        for k, v in values.items()
        if k.startswith(prefix) and not isinstance(v, dict) and v != SECRET_PLACEHOLDER
    }


def _weak_secrets(values: Mapping[str, Any], prefix: str) -> list[ConfigProblem]:
    """Prod's strength floor (rules.weak_secrets, the catalogue's prod-secret-strength) on the secrets whose values
    the loader sees."""
    found = rules.weak_secrets(_decrypted(values, prefix), lambda key: set_secret(key, "<value>"))
    return [ConfigProblem(key, PROD_SECRET_STRENGTH.refusal(problem)) for key, problem in found]


def _tls_problems(values: Mapping[str, Any], prefix: str) -> list[ConfigProblem]:
    """The proxies' TLS: the certificate and its key together, only with the proxies (`vllmApiKey`), each PEM of
    its kind where synth sees the value (rules.pem_problem; nginx itself checks that they match, at start)."""
    given = {key: values.get(f"{prefix}{key}") for key in ("vllmTlsCertificate", "vllmTlsKey")}
    if not any(v is not None for v in given.values()):
        return []
    problems = [
        ConfigProblem(key, f"is missing while `{other}` is set: set both, {set_secret(key, '<PEM>')}")
        for key, other in (("vllmTlsCertificate", "vllmTlsKey"), ("vllmTlsKey", "vllmTlsCertificate"))
        if given[key] is None
    ]
    problems += [
        ConfigProblem(key, VLLM_TLS_PEM.refusal(problem))
        for key, problem in rules.pem_problems(_decrypted(values, prefix))
    ]
    if f"{prefix}vllmApiKey" not in values:
        problems.append(
            ConfigProblem(
                "vllmTlsCertificate",
                f"is served by the vLLM proxies, which run only with an API key: {set_secret('vllmApiKey', '<key>')}",
            )
        )
    return problems


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _shown(value: Any) -> str:
    """A value as the user wrote it in YAML (true, not True)."""
    return json.dumps(value) if isinstance(value, bool) or value is None else repr(value)


# pydantic's message for each error type, said as a sentence about the key (the bounds come from `ctx`).
_MESSAGES = {
    "missing": "is required",
    "int_type": "expected a whole number",
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "float_type": "expected a number",
    "float_parsing": "expected a number",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
    "string_type": "expected text",
    "list_type": "expected a list",
    "dict_type": "expected a mapping of keys to values",
    "model_type": "expected a mapping of keys to values",
    "model_attributes_type": "expected a mapping of keys to values",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "too_short": "must have at least {min_length} item(s)",
    "too_long": "must have at most {max_length} item(s)",
    "string_too_long": "must be at most {max_length} characters",
    "string_too_short": "must be at least {min_length} characters",
    # A pattern of a type outside schema.base.matching: say that, not the regular expression.
    "string_pattern_mismatch": "does not have the form this key takes (see docs/config-reference.md)",
    "byte_size": "expected a size with a unit, e.g. 512MiB or 16GiB",
    "byte_size_unit": "expected a size with a unit, e.g. 512MiB or 16GiB",
    "union_tag_invalid": "expected `type` to be one of {expected_tags}",
    "union_tag_not_found": "needs a `type` key",
}


def _message(item: Mapping[str, Any]) -> str:
    kind = item["type"]
    if kind in ("value_error", "assertion_error"):
        return str(item["ctx"]["error"])  # our own validators' messages, without pydantic's "Value error, " prefix
    if kind == "literal_error" or kind == "enum":
        return f"expected {item['ctx']['expected']}"
    template = _MESSAGES.get(kind)
    if template is None:
        return str(item["msg"])
    return template.format(**{k: _shown(v) if isinstance(v, bool) else v for k, v in item.get("ctx", {}).items()})


def _user_loc(loc: tuple[int | str, ...], data: Any) -> tuple[int | str, ...]:
    """`loc` without the parts pydantic adds that are no key of the data (the tag of a tagged union: `pvc`)."""
    kept: list[int | str] = []
    value = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(value, dict) and part not in value and not last and isinstance(part, str):
            continue
        kept.append(part)
        value = (
            value.get(part)
            if isinstance(value, dict)
            else (value[part] if isinstance(value, list) and isinstance(part, int) and part < len(value) else None)
        )
    return tuple(kept)


def _value_at(data: Any, loc: tuple[int | str, ...]) -> Any:
    for part in loc:
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        else:
            return None
    return data


def _other_branch_fits(item: Mapping[str, Any], items: list[Any], data: Any) -> bool:
    """A union branch the value is not even of the type of (`str` for a mapping: loc `images.vllm.str`), while
    another branch of the same union took the value and found a problem inside: that one is what the author meant."""
    loc = item["loc"]
    if not item["type"].endswith("_type") or len(loc) < 2 or not isinstance(loc[-1], str):
        return False
    parent = _value_at(data, loc[:-1])
    if not isinstance(parent, (dict, list)) or (isinstance(parent, dict) and loc[-1] in parent):
        return False  # the last part is a key of the data, not a union branch's tag
    return any(
        other["loc"][: len(loc) - 1] == loc[:-1]
        and len(other["loc"]) > len(loc)
        and other["loc"][len(loc) - 1] != loc[-1]
        for other in items
    )


def _pydantic_problems(error: ValidationError, data: Mapping[str, Any]) -> Iterable[ConfigProblem]:
    items = error.errors(include_url=False)
    for item in items:
        if _other_branch_fits(item, items, data):
            continue
        # Tagged/union sub-locations ('function-after[...]', 'pvc') are noise for a config author.
        loc = _user_loc(tuple(p for p in item["loc"] if isinstance(p, int) or "[" not in str(p)), data)
        if item["type"] == "extra_forbidden":
            message = "unknown key" + _allowed_keys_hint(loc[:-1], data)
        else:
            message = _message(item)
            if (
                "input" in item
                and not isinstance(item["input"], (dict, list))
                and item["type"] != "missing"
                and "(got" not in message
                and repr(item["input"]) not in message
            ):
                message += f" (got {_shown(item['input'])})"
        yield ConfigProblem(_key_path(loc), message)


def _allowed_keys_hint(parent_loc: tuple[int | str, ...], data: Mapping[str, Any]) -> str:
    """Name the keys that are allowed where an unknown one was found (typos are the usual cause)."""
    model: Any = StackConfig
    for part in parent_loc:
        if isinstance(part, int):
            continue
        field = next((f for n, f in model.model_fields.items() if part in (n, f.alias)), None)
        annotation = getattr(field, "annotation", None)
        inner = [a for a in getattr(annotation, "__args__", (annotation,)) if isinstance(a, type)]
        model = next((a for a in inner if issubclass(a, ConfigModel)), None)
        if model is None:
            return ""
    if not parent_loc:
        keys = sorted({f.alias or n for n, f in StackConfig.model_fields.items()} | set(SECRET_KEYS))
    else:
        keys = sorted(f.alias or n for n, f in model.model_fields.items())
    return f"; expected one of: {', '.join(keys)}"


def _cross_checks(cfg: StackConfig) -> Iterable[tuple[str, str]]:
    yield from docker.problems(cfg.hosts, cfg.images, cfg.environment, cfg.security)
    yield from kubernetes.problems(cfg)
    yield from workload_checks.problems(cfg)
    yield from monitoring.problems(cfg.monitoring, [(h.name, h.gpu_model) for h in cfg.hosts])
    hosts = [host.name for host in cfg.hosts]
    yield from monitoring.effect_problems(cfg.monitoring, cfg.environment, cfg.kubernetes is not None, hosts)
    yield from checks.problems(cfg.checks, cfg.images, cfg.environment)
    yield from effects.problems(cfg, "gpu_fleet" in cfg.model_fields_set, cfg.registry is not None)
    yield from mirror.problems(cfg.mirror, cfg.kubernetes, cfg.registry.server if cfg.registry else None)


# Namespaces of the providers and of Pulumi itself: never taken for a misspelt `rocm-stack`.
PROVIDER_NAMESPACES = frozenset({"pulumi", "docker", "kubernetes", "aws", "azure", "gcp", "command", "random", "tls"})


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def misspelt_namespace(namespace: str) -> bool:
    """A namespace that is meant to be `rocm-stack` (rocm-stak, rocm_stack, ROCm-Stack), not a provider's."""
    if namespace == PROJECT or namespace in PROVIDER_NAMESPACES:
        return False
    folded = namespace.lower().replace("_", "-")
    return _edit_distance(folded, PROJECT) <= 2 or folded.replace("-", "") == PROJECT.replace("-", "")


def _namespace_problems(keys: Iterable[str]) -> Iterable[ConfigProblem]:
    for key in sorted(keys):
        namespace, _, name = key.partition(":")
        if misspelt_namespace(namespace):
            yield ConfigProblem(
                "",
                (
                    f"'{key}' is in the namespace '{namespace}', which this program never reads; "
                    f"did you mean '{PROJECT}:{name}'?"
                ),
            )


def load(
    stack: str,
    values: Mapping[str, Any],
    secret_keys: Iterable[str] = (),
    lock: docker.PlacementLock | None = None,
    place_unlocked: bool = False,
) -> StackConfig:
    """Validate the config of a stack (every namespace, values already JSON-decoded) into a StackConfig.

    One loader for both ways config arrives: `pulumi up` (the Pulumi runtime's config, see from_pulumi) and
    tools.synth (which hands the stack file to the same runtime). `secret_keys` are the full keys Pulumi holds
    as secrets; the credential keys must be among them.
    `lock` is the placement lock (default: `stacks/placement.<stack>.yaml` if present); prod refuses a `gpuCount`
    partition it does not hold unless `place_unlocked` (what `make lock` uses to place new ones).
    Raises ConfigError with every problem found.
    """
    secret_keys = set(secret_keys)
    prefix = f"{PROJECT}:"
    data: dict[str, Any] = {}
    problems: list[ConfigProblem] = list(_namespace_problems(values))
    for key, value in values.items():
        if not key.startswith(prefix):
            continue  # other namespaces (docker:, kubernetes:, aws:) belong to their providers
        name = key[len(prefix) :]
        if isinstance(value, _TooDeep) or nesting_depth(value) > MAX_NESTING:
            problems.append(ConfigProblem(name, f"the value {NESTING_PROBLEM}"))
            continue
        if name in SECRET_KEYS:
            if key not in secret_keys:
                problems.append(
                    ConfigProblem(
                        name,
                        (
                            f"{SECRET_KEYS[name]} must be a Pulumi secret; run "
                            f"{set_secret(name, 'VALUE')} instead of storing it in plain text"
                        ),
                    )
                )
            continue
        data[name] = value
    # The stack's name makes it prod; its config may make another stack stricter, never a prod stack laxer.
    configured = data.get("environment")
    if (laxer := rules.laxer_environment_problem(stack, configured)) is not None:
        problems.append(ConfigProblem("environment", PROD_BY_STACK_NAME.refusal(laxer)))
    if configured in (None, "dev", "prod"):
        data["environment"] = rules.environment_of(stack, configured)
    if "hosts" not in data and "kubernetes" in data:
        data["hosts"] = []  # the default local Docker host is for a stack that declares neither layer
    if "hosts" not in data and "hostGroups" not in data and isinstance(data.get("monitoring", {}), dict):
        # That implicit host is no fleet: the monitoring host's default (prod) leaves it out; `host` set wins.
        data["monitoring"] = {"host": False, **data.get("monitoring", {})}
    # Groups become plain host entries before anything is checked: every host rule applies to their members,
    # and `refusal` says where a member's value was written.
    hosts, origins, member_problems = groups.expand(data.get("hosts"), data.get("hostGroups"))
    if origins:
        data["hosts"] = hosts
    problems += [ConfigProblem(path, message) for path, message in member_problems]

    def refusal(found: list[ConfigProblem]) -> ConfigError:
        return ConfigError(
            [
                ConfigProblem(path, message)
                for path, message in groups.located(((p.path, p.message) for p in found), origins)
            ]
        )

    project_values = {k: v for k, v in values.items() if k.startswith(prefix)}
    # What the docs state for every environment (`extraArgs`: no `--api-key`, no `--trust-remote-code`): a credential
    # flag and the remote-code flag in any argument list, read as vLLM reads them (abbreviated too). The policy pack's
    # rules (one definition each); the pack judges prod.
    for key, why in rules.credential_flags(project_values):
        problems.append(ConfigProblem(key[len(prefix) :], NO_CREDENTIALS_ON_COMMAND_LINES.refusal(why)))
    for key in rules.remote_code_flags(project_values):  # the pack's remote-code-opt-in rule: one definition
        problems.append(ConfigProblem(key[len(prefix) :], REMOTE_CODE_OPT_IN.refusal(rules.REMOTE_CODE_FLAG_PROBLEM)))
    if data["environment"] == "prod":
        for key, why in rules.text_problems(project_values):
            problems.append(ConfigProblem(key[len(prefix) :], NO_CREDENTIALS_ON_COMMAND_LINES.refusal(why)))
        # Synth hands the program a placeholder for each `secure:` value; `pulumi up` the decrypted text, where only
        # the stack file (the policy pack reads it) still says which it was.
        for key in rules.secrets_in_arguments(project_values, lambda v: v == SECRET_PLACEHOLDER):
            problems.append(
                ConfigProblem(key[len(prefix) :], NO_PLAINTEXT_SECRETS_IN_CONFIG.refusal(rules.SECRET_IN_ARGUMENTS))
            )
        # The policy pack's rule (one definition): a credential, by its key's name or its value's shape, is a
        # Pulumi secret. A key that holds a nested `secure:` value is secret as a whole in the runtime's config, so
        # it passes here; the pack, which reads the stack file, still checks its other leaves.
        plain = {
            k: v for k, v in project_values.items() if k not in secret_keys and k[len(prefix) :] not in SECRET_KEYS
        }
        for key, why in rules.plaintext_secrets(plain):
            problems.append(
                ConfigProblem(
                    key[len(prefix) :],
                    NO_PLAINTEXT_SECRETS_IN_CONFIG.refusal(
                        f"holds a credential in plain text ({why}), which prod refuses; run "
                        f"{set_secret(key, 'VALUE', path=True)} to store it encrypted, or give a file's path"
                    ),
                )
            )
    strict = [ConfigProblem(_key_path(loc), message) for loc, message in strict_problems(StackConfig, data)]
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as error:
        seen = {p.path for p in strict}
        raise refusal(problems + strict + [p for p in _pydantic_problems(error, data) if p.path not in seen]) from None
    if strict:
        raise refusal(problems + strict)
    problems += [ConfigProblem(path, message) for path, message in _cross_checks(cfg)]
    if not problems:
        # Partition sizes become GPU indices (and NUMA-local cpusets) once the layout itself is sound.
        if lock is None:
            lock, lock_problems = docker.read_lock(stack)
            problems += [ConfigProblem(path, message) for path, message in lock_problems]
        require_lock = cfg.environment == "prod" and not place_unlocked
        hosts = []
        for index, host in enumerate(cfg.hosts):
            host, placement_problems = docker.place_partitions(
                host,
                f"hosts[{index}]",
                lock.hosts.get(host.name),
                stack=stack,
                require_lock=require_lock,
                max_gap=docker.PROD_PLACEMENT_GAP if cfg.environment == "prod" else None,
            )
            host = docker.with_ipc_decided(host)
            hosts.append(host)
            problems += [ConfigProblem(path, message) for path, message in placement_problems]
            if not placement_problems:
                problems += [
                    ConfigProblem(path, message)
                    for path, message in docker.isolation_problems(host, f"hosts[{index}]", cfg.environment)
                ]
        cfg = cfg.model_copy(update={"hosts": hosts})
    secret_names = {key[len(prefix) :] for key in secret_keys if key.startswith(prefix)}
    problems += [ConfigProblem(path, message) for path, message in workload_checks.secret_problems(cfg, secret_names)]
    # The proxy in front of vLLM compares this key (components/workloads/proxy.py): never empty, a Bearer token.
    # Synth, which cannot decrypt, hands a placeholder; a stack file read as is holds `{secure: ...}`.
    api_key = values.get(f"{prefix}vllmApiKey")
    known = api_key is not None and not isinstance(api_key, dict) and api_key != SECRET_PLACEHOLDER
    if known and (problem := rules.api_key_problem(str(api_key))):
        problems.append(ConfigProblem("vllmApiKey", problem))
    if cfg.environment == "prod":
        problems += _weak_secrets(values, prefix)
    problems += _tls_problems(values, prefix)
    if (
        cfg.environment == "prod"
        and cfg.monitoring_host is not None
        and f"{prefix}grafanaAdminPassword" not in secret_keys
    ):
        problems.append(
            ConfigProblem(
                "grafanaAdminPassword",
                (
                    f"the monitoring host '{cfg.monitoring_host}' runs Grafana, whose admin password prod requires; "
                    f"run {set_secret('grafanaAdminPassword', '<password>')} (or set monitoring.host: false)"
                ),
            )
        )
    if cfg.registry is not None and f"{prefix}registryPassword" not in secret_keys:
        problems.append(
            ConfigProblem(
                "registryPassword",
                (
                    "`rocm-stack:registry` is set but its password is missing; run "
                    + set_secret("registryPassword", "<token>")
                ),
            )
        )
    if problems:
        raise refusal(problems)
    return cfg


def decode(raw: str) -> Any:
    """Pulumi hands structured config to the program as JSON text and scalars as plain text."""
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw
    except RecursionError:
        return _TooDeep()


class _TooDeep:
    """A value nested deeper than Python's JSON decoder reads (the CLI's yaml.v3 reads up to 10,000 levels)."""


def from_pulumi() -> tuple[StackConfig, StackSecrets]:
    """Load the running stack's configuration from the Pulumi runtime (`pulumi up` or the mock engine)."""
    # Here: pulumi (0.35 s, measured) only under its runtime; the tools that load a stack file never import it.
    import pulumi
    from pulumi.runtime import config as runtime_config

    raw = {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}
    secret_keys = {k for k in raw if runtime_config.is_config_secret(k)}
    secret_keys |= set(runtime_config.get_config_secret_keys_env())
    lock, lock_problems = docker.read_lock(pulumi.get_stack())
    if lock_problems:
        raise ConfigError([ConfigProblem(path, message) for path, message in lock_problems])
    cfg = load(pulumi.get_stack(), {k: decode(v) for k, v in raw.items()}, secret_keys, lock=lock)
    for partition in docker.unlocked(cfg.hosts, lock):
        # dev places them (prod refuses): say so, since a later change may move them.
        pulumi.log.warn(
            f"{partition}: placed by the program, not held by {docker.lock_file(pulumi.get_stack())}; "
            f"run `{docker.lock_command(pulumi.get_stack())}` so that later changes never move it"
        )
    for key, message in effects.warnings(cfg):
        pulumi.log.warn(f"{PROJECT}:{key}: {message}")
    project_config = pulumi.Config(PROJECT)
    prefix = f"{PROJECT}:"
    secrets = StackSecrets(
        registry_password=project_config.get_secret("registryPassword"),
        huggingface_token=project_config.get_secret("huggingfaceToken"),
        vllm_api_key=project_config.get_secret("vllmApiKey"),
        grafana_admin_password=project_config.get_secret("grafanaAdminPassword"),
        vllm_tls_certificate=project_config.get_secret("vllmTlsCertificate"),
        vllm_tls_key=project_config.get_secret("vllmTlsKey"),
        secret_sections=frozenset(key[len(prefix) :] for key in secret_keys if key.startswith(prefix)),
    )
    return cfg, secrets
