"""The stack configuration: one typed schema, validated once before any resource is declared.

Every key lives in the `rocm-stack:` namespace of `stacks/Pulumi.<stack>.yaml`. `load()` turns the raw
key/value map into a `StackConfig` or raises `ConfigError` listing every problem with its key path.
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError, field_validator, model_validator

from . import checks, docker, kubernetes, monitoring, workloads
from .base import ConfigModel
from .checks import ChecksConfig
from .docker import DEFAULT_IMAGES, HostConfig, SecurityConfig, SecurityProfile
from .kubernetes import KubernetesConfig
from .workloads import GpuFleet, InferenceConfig, TrainingConfig
from .monitoring import MonitoringConfig

PROJECT = "rocm-stack"

# Keys that hold credentials: accepted only as Pulumi secrets, never in the schema as plain values.
SECRET_KEYS = {
    "registryPassword": "the password or token of `rocm-stack:registry`",
    "huggingfaceToken": "the Hugging Face token vLLM uses to download gated models",
    "vllmApiKey": "the API key vLLM requires on /v1 (Kubernetes and Docker inference; required in prod)",
}


class RegistryConfig(ConfigModel):
    """A private registry the hosts pull from; its password is the secret `rocm-stack:registryPassword`."""

    server: str
    """The registry's host name (and port), as `docker login` takes it."""
    username: str


class StackConfig(ConfigModel):
    environment: Literal["dev", "prod"]
    """Selects the safe defaults and the stricter checks of prod. Unset: `prod` if the stack name starts with
    `prod`, else `dev`."""
    hosts: list[HostConfig] = [HostConfig(name="local")]
    """The GPU hosts running Docker. Unset: one host `local` on the local Docker socket with one container."""
    images: dict[str, str] = DEFAULT_IMAGES
    """Image references by key (containers and workloads name a key); setting one keeps the other defaults.
    Each must be pinned: an explicit version tag other than `latest`, or an `@sha256:` digest."""
    security: SecurityConfig = SecurityConfig()
    """Privileges of the GPU containers: see docs/security.md."""
    registry: RegistryConfig | None = None
    """A private registry the hosts pull from; its password is the secret `registryPassword`."""
    kubernetes: KubernetesConfig | None = None
    """The Kubernetes GPU layer (docs/kubernetes.md). Unset: no Kubernetes resources (a Docker-only stack)."""
    gpu_fleet: GpuFleet | None = None
    """The Kubernetes cluster's GPU nodes (the cluster cannot be asked offline): Kubernetes workloads are
    checked against it. Required in prod when a workload runs on Kubernetes."""
    training: list[TrainingConfig] = []
    """Training jobs (docs/workloads.md), each on Kubernetes, on Docker partitions of `hosts`, or both."""
    inference: list[InferenceConfig] = []
    """vLLM servers (docs/workloads.md), each on Kubernetes, on Docker partitions of `hosts`, or both."""
    monitoring: MonitoringConfig = MonitoringConfig()
    """GPU metrics exporter, alert rules and dashboard (docs/monitoring.md)."""
    checks: ChecksConfig = ChecksConfig()
    """The host preflight and the GPU check per partition that gate Docker partitions (docs/operations.md)."""

    @model_validator(mode="before")
    @classmethod
    def _default_gpu_access(cls, data: Any) -> Any:
        return docker.with_default_gpu_access(data)

    @field_validator("images")
    @classmethod
    def _keep_default_images(cls, images: dict[str, str]) -> dict[str, str]:
        # Setting one image must not drop the pinned defaults of the others.
        return {**DEFAULT_IMAGES, **images}

    @property
    def security_profile(self) -> SecurityProfile:
        if self.security.profile is not None:
            return self.security.profile
        return SecurityProfile.hardened if self.environment == "prod" else SecurityProfile.debug


@dataclass(frozen=True)
class ConfigProblem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{PROJECT}:{self.path}: {self.message}"


class ConfigError(Exception):
    def __init__(self, problems: list[ConfigProblem]):
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid stack configuration ({len(problems)} problem(s)):\n{lines}")


@dataclass(frozen=True)
class StackSecrets:
    """Secret config values, as Pulumi secret outputs (or None when unset)."""

    registry_password: Any = None
    huggingface_token: Any = None
    vllm_api_key: Any = None


def _key_path(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _pydantic_problems(error: ValidationError, data: Mapping[str, Any]) -> Iterable[ConfigProblem]:
    for item in error.errors(include_url=False):
        # Tagged/union sub-locations ('function-after[...]') are noise for a config author.
        loc = tuple(p for p in item["loc"] if isinstance(p, int) or "[" not in str(p))
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = "unknown key" + _allowed_keys_hint(loc[:-1], data)
        elif "input" in item and not isinstance(item["input"], (dict, list)):
            message += f" (got {item['input']!r})"
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
    yield from workloads.problems(cfg)
    yield from monitoring.problems(cfg.monitoring, [(h.name, h.gpu_model) for h in cfg.hosts])
    yield from checks.problems(cfg.checks, cfg.images, cfg.environment)


def load(stack: str, values: Mapping[str, Any], secret_keys: Iterable[str] = (),
         lock: docker.PlacementLock | None = None, place_unlocked: bool = False) -> StackConfig:
    """Validate the `rocm-stack:*` values of a stack (already JSON-decoded) into a StackConfig.

    `secret_keys` are the full keys Pulumi holds as secrets; the credential keys must be among them.
    `lock` is the placement lock (default: `stacks/placement.<stack>.yaml` if present); prod refuses a `gpuCount`
    partition it does not hold unless `place_unlocked` (what `make lock` uses to place new ones).
    Raises ConfigError with every problem found.
    """
    secret_keys = set(secret_keys)
    prefix = f"{PROJECT}:"
    data: dict[str, Any] = {}
    problems: list[ConfigProblem] = []
    for key, value in values.items():
        if not key.startswith(prefix):
            continue  # other namespaces (docker:, kubernetes:, aws:) belong to their providers
        name = key[len(prefix):]
        if name in SECRET_KEYS:
            if key not in secret_keys:
                problems.append(ConfigProblem(name, (
                    f"{SECRET_KEYS[name]} must be a Pulumi secret; run "
                    f"`pulumi config set --secret {name}` instead of storing it in plain text"
                )))
            continue
        data[name] = value
    data.setdefault("environment", "prod" if stack.startswith("prod") else "dev")
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as error:
        raise ConfigError(problems + list(_pydantic_problems(error, data))) from None
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
                host, f"hosts[{index}]", lock.hosts.get(host.name), stack=stack, require_lock=require_lock)
            hosts.append(host)
            problems += [ConfigProblem(path, message) for path, message in placement_problems]
            if not placement_problems:
                problems += [ConfigProblem(path, message) for path, message in
                             docker.isolation_problems(host, f"hosts[{index}]", cfg.environment)]
        cfg = cfg.model_copy(update={"hosts": hosts})
    secret_names = {key[len(prefix):] for key in secret_keys if key.startswith(prefix)}
    problems += [ConfigProblem(path, message) for path, message in workloads.secret_problems(cfg, secret_names)]
    if cfg.registry is not None and f"{prefix}registryPassword" not in secret_keys:
        problems.append(ConfigProblem("registryPassword", (
            "`rocm-stack:registry` is set but its password is missing; run "
            "`pulumi config set --secret registryPassword <token>`"
        )))
    if problems:
        raise ConfigError(problems)
    return cfg


def decode(raw: str) -> Any:
    """Pulumi hands structured config to the program as JSON text and scalars as plain text."""
    try:
        return json.loads(raw)
    except (TypeError, ValueError):
        return raw


def from_pulumi() -> tuple[StackConfig, StackSecrets]:
    """Load the running stack's configuration from the Pulumi runtime (`pulumi up` or the mock engine)."""
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
        pulumi.log.warn(f"{partition}: placed by the program, not held by {docker.lock_file(pulumi.get_stack())}; "
                        f"run `{docker.lock_command(pulumi.get_stack())}` so that later changes never move it")
    project_config = pulumi.Config(PROJECT)
    secrets = StackSecrets(
        registry_password=project_config.get_secret("registryPassword"),
        huggingface_token=project_config.get_secret("huggingfaceToken"),
        vllm_api_key=project_config.get_secret("vllmApiKey"),
    )
    return cfg, secrets
