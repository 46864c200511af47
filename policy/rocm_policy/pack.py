"""The CrossGuard policies of the rocm-stack pack: the rules of `rules.py` bound to the engine's callbacks.

Which stack is checked: the Pulumi CLI starts the policy pack process with PULUMI_STACK and PULUMI_CONFIG (the
stack's config as JSON, secrets decrypted) in its environment (pulumi/pulumi sdk/go/common/resource/plugin/
analyzer_plugin.go, constructEnv). The environment is `rocm-stack:environment`, else the stack's name
(`prod` or `prod-*` is prod: rules.default_environment), the same default as the program's config loader. The pack's enforcement level follows:
mandatory for prod, advisory for dev, mandatory when no stack is known (fail closed, e.g. `policy publish`).
A policy's level can still be overridden with `--policy-pack-config`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pulumi_policy import (
    EnforcementLevel,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from . import rules

PROJECT = "rocm-stack"
ENVIRONMENT_KEY = f"{PROJECT}:environment"
# policy/rocm_policy/pack.py -> the Pulumi project that holds policy/
PROJECT_DIR = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class StackContext:
    stack: str | None  # short name ("dev"), also when the backend qualifies it as org/project/dev
    environment: str | None  # "dev" | "prod" | None when no stack is known

    @property
    def prod(self) -> bool:
        return self.environment != "dev"  # unknown counts as prod: fail closed


def stack_context(environ: Mapping[str, str] | None = None) -> StackContext:
    environ = os.environ if environ is None else environ
    stack = environ.get("PULUMI_STACK", "").rsplit("/", 1)[-1] or None
    try:
        config = json.loads(environ.get("PULUMI_CONFIG") or "{}")
    except json.JSONDecodeError:
        config = {}
    environment = config.get(ENVIRONMENT_KEY) if isinstance(config, dict) else None
    if environment not in ("dev", "prod"):
        environment = None if stack is None else rules.default_environment(stack)
    return StackContext(stack, environment)


def enforcement_level(context: StackContext) -> EnforcementLevel:
    return EnforcementLevel.MANDATORY if context.prod else EnforcementLevel.ADVISORY


def stack_config_file(stack: str, project_dir: Path = PROJECT_DIR) -> Path:
    """`<stackConfigDir>/Pulumi.<stack>.yaml` of the project, where `pulumi config set` writes."""
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}
    return project_dir / project.get("stackConfigDir", ".") / f"Pulumi.{stack}.yaml"


ResourceRule = Callable[[str, Mapping[str, Any]], list[str]]


def _resource_policy(
    name: str, description: str, rule: ResourceRule, *, prod_only: bool = False
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        context = stack_context()
        if prod_only and not context.prod:
            args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
        for message in rule(args.resource_type, args.props):
            report_violation(message, None)

    return ResourceValidationPolicy(name=name, description=description, validate=validate)


def _validate_protection(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = stack_context()
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    charts = args.get_config().get("charts", rules.DEFAULT_PROTECTED_CHARTS)
    declared = [rules.Declared(r.resource_type, r.name, r.props, bool(r.opts.protect), r.urn) for r in args.resources]
    for message, urn in rules.unprotected(declared, charts):
        report_violation(message, urn)


def _validate_isolation(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    containers = [r.props for r in args.resources if r.resource_type == rules.CONTAINER]
    for message in rules.host_isolation_problems(containers, prod=stack_context().prod):
        report_violation(message, None)


def _validate_config_secrets(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    # Only the stack file says which values are `secure:`; the engine hands the pack decrypted values.
    context = stack_context()
    if context.stack is None:
        args.not_applicable("no stack: nothing to read")
    path = stack_config_file(context.stack, PROJECT_DIR)
    if not path.is_file():
        args.not_applicable(f"no stack config file {path.name} (config kept elsewhere, e.g. a Pulumi ESC environment)")
    config = (yaml.safe_load(path.read_text()) or {}).get("config") or {}
    for key in rules.plaintext_secrets(config):
        # A value inside structured config is addressed with --path (`rocm-stack:registry.password`).
        path_flag = "--path " if any(c in key for c in ".[") else ""
        report_violation(
            f"config '{key}' holds a credential in plain text in {path.name}: "
            f"run `pulumi config set {path_flag}--secret '{key}' ...`",
            None,
        )


POLICIES = [
    _resource_policy(
        "pinned-images",
        "Images are pinned: a version tag or a digest, never 'latest' or no tag (Docker images, Kubernetes pods).",
        rules.unpinned_images,
    ),
    _resource_policy(
        "docker-gpu-container-devices",
        "Docker GPU containers map /dev/kfd and render nodes (or CDI GPUs), have a /dev/shm (IPC private or host) "
        "and add only numeric groups.",
        rules.docker_gpu_container_problems,
    ),
    _resource_policy(
        "no-debug-privileges-in-prod",
        "Prod runs no SYS_PTRACE, privileged or seccomp-unconfined containers.",
        rules.debug_privilege_problems,
        prod_only=True,
    ),
    _resource_policy(
        "gpu-pods-limits-and-shm",
        "Pods asking for amd.com/gpu set it as a limit and mount a memory-backed /dev/shm.",
        rules.gpu_pod_problems,
    ),
    _resource_policy(
        "gpu-operator-drains-before-driver-upgrade",
        "In prod the GPU Operator cordons and drains nodes, a bounded number at a time, before a driver upgrade.",
        rules.driver_upgrade_problems,
        prod_only=True,
    ),
    StackValidationPolicy(
        name="gpu-partitions-isolated",
        description="The partitions of a Docker host have disjoint render nodes; in prod none maps the whole /dev/dri "
        "or uses the host's IPC namespace beside another partition.",
        validate=_validate_isolation,
    ),
    StackValidationPolicy(
        name="no-plaintext-secrets-in-config",
        description="Stack config keys that hold credentials (password, token, api key...) are Pulumi secrets.",
        validate=_validate_config_secrets,
    ),
    StackValidationPolicy(
        name="prod-operator-and-namespaces-protected",
        description="In prod the GPU Operator and cert-manager Helm releases and the namespaces are protected.",
        validate=_validate_protection,
        config_schema=PolicyConfigSchema(
            properties={
                "charts": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "Helm charts whose releases must be protected",
                }
            }
        ),
    ),
]
