"""The CrossGuard policies of the rocm-stack pack: one per entry of the rule catalogue (rules/catalogue.py), bound to
the engine's callbacks.

Which stack is checked, and whether it is prod (rules.environment_of, the program's config loader's rule too): the
stack's name, from PULUMI_STACK (the Pulumi CLI starts the pack with PULUMI_STACK and PULUMI_CONFIG, the stack's
config as JSON, in its environment: pulumi/pulumi sdk/go/common/resource/plugin/analyzer_plugin.go constructEnv)
and from the URNs of the resources checked (`urn:pulumi:<stack>::...`); a stack whose name has the word `prod` or
`production` is prod whatever its config says (rules.is_prod_stack). The stack's `rocm-stack:environment` only ever makes a stack stricter: it is the config
being policed, so it never switches a prod rule off. The pack's own config, set by whoever enables the pack
(`pulumi up --policy-pack policy --policy-pack-config policy/prod.json`, `pulumi policy enable ... --config`), is
the switch that does not trust the stack author: `{"<policy>": {"prod": true}}` makes a policy judge any stack
as prod, `{"all": "mandatory"}` sets every policy's enforcement level (pkg/resource/analyzer/config.go
parsePolicyPackConfig/applyConfig; the SDK hands a policy its own properties: args.get_config()).
The pack's default enforcement level: mandatory for prod and when no stack is known (fail closed, e.g.
`policy publish`), advisory for a dev stack; the pack config overrides it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
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

from pulumi_policy.proxy import UnknownValueError

import rules
from rules import allowlist
from rules.catalogue import CATALOGUE
from rules.rule import Rule

PROJECT = "rocm-stack"
ENVIRONMENT_KEY = f"{PROJECT}:environment"
# policy/rocm_policy/pack.py -> the Pulumi project that holds policy/
PROJECT_DIR = Path(__file__).resolve().parents[2]
# The prod allow-list (rules/allowlist.py), derived from the program's synth of the prod stacks (`rocm-stack allowlist`).
ALLOWLIST_FILE = Path(__file__).with_name("allowlist.prod.json")
# What the offline runner (offline.py) passes in PULUMI_CONFIG for a value it cannot decrypt; the CLI passes every
# value decrypted (pulumi/pulumi v3.259.0 pkg/engine/update.go: `target.Config.Decrypt` before the analyzers start).
UNDECRYPTED = "[secret]"
# The pack-config property that makes a policy judge the stack as prod (every policy takes it).
PROD_KEY = "prod"
PROD_SCHEMA = {
    PROD_KEY: {
        "type": "boolean",
        "description": "Judge every stack as prod, whatever its name and config (set by whoever enables the pack)",
    }
}


@dataclass(frozen=True)
class StackContext:
    stack: str | None  # short name ("dev"), also when the backend qualifies it as org/project/dev
    environment: str | None  # "dev" | "prod" | None when no stack is known

    @property
    def prod(self) -> bool:
        return self.environment != "dev"  # unknown counts as prod: fail closed


def stack_context(
    policy_config: Mapping[str, Any] | None = None,
    urns: Iterable[str] = (),
    environ: Mapping[str, str] | None = None,
) -> StackContext:
    """The stack being checked: its name from PULUMI_STACK and the resources' URNs, its environment by
    rules.environment_of from the name and the stack config, or prod when the pack's config says so."""
    environ = os.environ if environ is None else environ
    names = [environ.get("PULUMI_STACK", "").rsplit("/", 1)[-1], *map(rules.stack_of_urn, urns)]
    known = sorted({n for n in names if n}, key=names.index)
    stack = known[0] if known else None
    try:
        config = json.loads(environ.get("PULUMI_CONFIG") or "{}")
    except json.JSONDecodeError:
        config = {}
    configured = config.get(ENVIRONMENT_KEY) if isinstance(config, dict) else None
    if (policy_config or {}).get(PROD_KEY) is True:
        return StackContext(stack, "prod")
    if not known:
        return StackContext(None, None)
    # Two names (a tampered URN) or one: prod if any is.
    environments = {rules.environment_of(name, configured) for name in known}
    return StackContext(stack, "prod" if "prod" in environments else "dev")


def enforcement_level(context: StackContext) -> EnforcementLevel:
    """The pack's default level; `--policy-pack-config` (`all` or per policy) overrides it."""
    return EnforcementLevel.MANDATORY if context.prod else EnforcementLevel.ADVISORY


class _CliLoader(yaml.SafeLoader):
    """Reads a tag it does not know as its plain text, as the Pulumi CLI's yaml.v3 does (resolve.go L127-130 @ v3.0.1);
    PyYAML's safe_load raises on one, which would end the pack in a traceback. Synth refuses such tags outright
    (schema/stackfile.py); the pack only must not crash before the program's own refusal is seen."""


def _untagged(loader: yaml.SafeLoader, _suffix: str, node: yaml.Node) -> Any:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)  # type: ignore[arg-type]


_CliLoader.add_multi_constructor("", _untagged)


def stack_file_config(path: Path) -> dict[str, Any]:
    """The `config:` of a stack file (its `secure:` values as written); empty when the file is absent."""
    if not path.is_file():
        return {}
    return (yaml.load(path.read_text(), Loader=_CliLoader) or {}).get("config") or {}


def stack_config_file(stack: str, project_dir: Path = PROJECT_DIR) -> Path:
    """`<stackConfigDir>/Pulumi.<stack>.yaml` of the project, where `pulumi config set` writes."""
    project = yaml.safe_load((project_dir / "Pulumi.yaml").read_text()) or {}
    return project_dir / project.get("stackConfigDir", ".") / f"Pulumi.{stack}.yaml"


ResourceRule = Callable[[str, Mapping[str, Any]], list[str]]


def _resource_policy(
    name: str, description: str, rule: ResourceRule, *, prod_only: bool, tag: Callable[[str], str]
) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        context = stack_context(args.get_config(), [args.urn])
        if prod_only and not context.prod:
            args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
        for message in rule(args.resource_type, args.props):
            report_violation(tag(message), None)

    return ResourceValidationPolicy(
        name=name, description=description, validate=validate, config_schema=PolicyConfigSchema(PROD_SCHEMA)
    )


def _stack_context(args: StackValidationArgs) -> StackContext:
    return stack_context(args.get_config(), [r.urn for r in args.resources])


def _stack_policy(
    name: str, description: str, validate: Callable[[StackValidationArgs, ReportViolation], None], **schema: Any
) -> StackValidationPolicy:
    return StackValidationPolicy(
        name=name,
        description=description,
        validate=validate,
        config_schema=PolicyConfigSchema({**PROD_SCHEMA, **schema}),
    )


def _validate_protection(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = _stack_context(args)
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    charts = args.get_config().get("charts", rules.DEFAULT_PROTECTED_CHARTS)
    declared = [rules.Declared(r.resource_type, r.name, r.props, bool(r.opts.protect), r.urn) for r in args.resources]
    for message, urn in rules.unprotected(declared, charts):
        report_violation(message, urn)


def _validate_isolation(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    containers = [r.props for r in args.resources if r.resource_type == rules.CONTAINER]
    for message in rules.host_isolation_problems(containers, prod=_stack_context(args).prod):
        report_violation(message, None)


def _validate_one_entry_per_machine(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = _stack_context(args)
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    providers = {r.name: r.urn for r in args.resources if r.resource_type == rules.DOCKER_PROVIDER}
    endpoints = rules.docker_providers((r.resource_type, r.name, r.props) for r in args.resources)
    for host, message in rules.duplicate_endpoint_problems(endpoints):
        report_violation(message, providers.get(host))


def _prod_resources(args: StackValidationArgs) -> list[rules.Declared]:
    """The plan's resources for a prod-only stack rule (not applicable elsewhere)."""
    context = _stack_context(args)
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    return [rules.Declared(r.resource_type, r.name, r.props, bool(r.opts.protect), r.urn) for r in args.resources]


def _validate_token_holders(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    for message, urn in rules.token_holder_problems(_prod_resources(args)):
        report_violation(message, urn)


def _validate_namespace_levels(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    for message, urn in rules.namespace_level_problems(_prod_resources(args)):
        report_violation(message, urn)


def _validate_network_isolation(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    for message, urn in rules.unisolated_workloads(_prod_resources(args)):
        report_violation(message, urn)


def _stack_file_config(args: StackValidationArgs, context: StackContext) -> tuple[Path, dict[str, Any]]:
    """The stack file's `config:` (with its `secure:` values as written); not applicable without one."""
    if context.stack is None:
        args.not_applicable("no stack: nothing to read")
    path = stack_config_file(context.stack, PROJECT_DIR)
    if not path.is_file():
        args.not_applicable(f"no stack config file {path.name} (config kept elsewhere, e.g. a Pulumi ESC environment)")
    return path, stack_file_config(path)


def _validate_remote_code(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = _stack_context(args)
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    # The opt-in is config: without a stack file none is given.
    path = stack_config_file(context.stack, PROJECT_DIR) if context.stack else None
    config = stack_file_config(path) if path else {}
    opted_in = rules.remote_code_opt_ins(config.get(f"{PROJECT}:inference", config.get("inference")))
    for r in args.resources:
        for message in rules.remote_code_problems(r.resource_type, r.props, opted_in):
            report_violation(message, r.urn)


def _pulumi_config() -> dict[str, Any]:
    """The stack's config as the engine hands it to the pack (PULUMI_CONFIG: every value decrypted)."""
    try:
        config = json.loads(os.environ.get("PULUMI_CONFIG") or "{}")
    except json.JSONDecodeError:
        return {}
    return config if isinstance(config, dict) else {}


def _decrypted() -> dict[str, Any]:
    """The project's keys of PULUMI_CONFIG, without the namespace, but those the offline runner could not decrypt."""
    prefix = f"{PROJECT}:"
    return {k[len(prefix) :]: v for k, v in _pulumi_config().items() if k.startswith(prefix) and v != UNDECRYPTED}


def _validate_environment_credentials(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = _stack_context(args)
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    # The pack sees every input decrypted (the SDK unwraps the engine's secret markers: pulumi_policy 1.21.0
    # policy.py deserialize_properties), so a value that came from a `secure:` config value is known by its text.
    engine = _pulumi_config()
    path = stack_config_file(context.stack, PROJECT_DIR) if context.stack else None
    if path is not None and path.is_file():
        secrets = rules.secret_texts(stack_file_config(path), engine)
    else:  # config kept elsewhere (a Pulumi ESC environment): any of its values may be a secret
        secrets = {v for v in engine.values() if isinstance(v, str)}
    for r in args.resources:
        for message in rules.environment_credential_problems(r.resource_type, r.props, secrets):
            report_violation(message, r.urn)


def _validate_stack_name(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = _stack_context(args)
    if context.stack is None:
        args.not_applicable("no stack: no name to judge")
    if problem := rules.laxer_environment_problem(context.stack, _pulumi_config().get(ENVIRONMENT_KEY)):
        report_violation(problem, None)


def _validate_secret_strength(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = _stack_context(args)
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    for key, problem in rules.weak_secrets(_decrypted()):
        report_violation(f"config '{PROJECT}:{key}' {problem}", None)


def _validate_tls_pem(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    for key, problem in rules.pem_problems(_decrypted()):
        report_violation(f"config '{PROJECT}:{key}' {problem}", None)


def _validate_config_secrets(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    # Only the stack file says which values are `secure:`; the engine hands the pack decrypted values.
    path, config = _stack_file_config(args, _stack_context(args))
    for key, why in rules.plaintext_secrets(config):
        # A value inside structured config is addressed with --path (`rocm-stack:registry.password`).
        path_flag = "--path " if any(c in key for c in ".[") else ""
        report_violation(
            f"config '{key}' holds a credential in plain text in {path.name} ({why}): "
            f"run `pulumi config set {path_flag}--secret '{key}' ...`, or give a file's path",
            None,
        )
    # The engine hands the pack the declared command lines decrypted: only the stack file says a value was secret.
    for key in rules.secrets_in_arguments(config):
        report_violation(f"config '{key}' {rules.SECRET_IN_ARGUMENTS}", None)


def _images(resource: Any) -> tuple[str, ...]:
    """The image references a resource's `image` depends on: the RemoteImages among the engine's dependencies of that
    property (of the resource, where the engine records none per property)."""
    by_property = getattr(resource, "property_dependencies", None) or {}
    dependencies = by_property.get("image") or getattr(resource, "dependencies", None) or []
    return tuple(
        str(d.props.get("name"))
        for d in dependencies
        if d.resource_type == allowlist.REMOTE_IMAGE and d.props.get("name")
    )


def plain(value: Any) -> Any:
    """The engine's inputs as plain data, allowlist.UNKNOWN for each value the engine does not know during preview
    (pulumi_policy's proxies raise UnknownValueError on reading one)."""

    def read(read_one: Callable[[], Any]) -> Any:
        try:
            return plain(read_one())
        except UnknownValueError:
            return allowlist.UNKNOWN

    if isinstance(value, Mapping):
        return {key: read(lambda key=key: value[key]) for key in value}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [read(lambda index=index: value[index]) for index in range(len(value))]
    return value


def _validate_declared_by_the_program(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    context = _stack_context(args)
    if not context.prod:
        args.not_applicable(f"applies to prod stacks; stack '{context.stack}' is {context.environment}")
    allowed = allowlist.load(ALLOWLIST_FILE)
    for r in args.resources:
        judged = allowlist.Judged(r.resource_type, plain(r.props), r.urn, _images(r))
        for message in allowlist.problems(judged, allowed):
            report_violation(message, r.urn)


# The stack rules' bindings: what each reads of the stack (its resources, the stack file, the engine's config).
STACK_VALIDATORS: dict[str, Callable[[StackValidationArgs, ReportViolation], None]] = {
    "gpu-partitions-isolated": _validate_isolation,
    "one-host-entry-per-machine": _validate_one_entry_per_machine,
    "prod-service-account-tokens-read-only": _validate_token_holders,
    "prod-workloads-network-isolated": _validate_network_isolation,
    "no-plaintext-secrets-in-config": _validate_config_secrets,
    "prod-no-plaintext-credentials-in-environment": _validate_environment_credentials,
    "remote-code-opt-in": _validate_remote_code,
    "prod-operator-and-namespaces-protected": _validate_protection,
    "prod-namespaces-pod-security-as-needed": _validate_namespace_levels,
    "prod-declared-by-the-program": _validate_declared_by_the_program,
    "prod-by-stack-name": _validate_stack_name,
    "prod-secret-strength": _validate_secret_strength,
    "vllm-tls-pem": _validate_tls_pem,
}


def policy(rule: Rule) -> ResourceValidationPolicy | StackValidationPolicy:
    """The catalogue entry as a CrossGuard policy: its id is the policy's name, its statement the description, and
    every message it reports ends with its id."""

    def tagged(report_violation: ReportViolation) -> ReportViolation:
        return lambda message, urn=None: report_violation(rule.refusal(message), urn)

    if rule.scope == "resource":
        return _resource_policy(rule.id, rule.statement, rule.check, prod_only=rule.prod_only, tag=rule.refusal)
    validate = STACK_VALIDATORS[rule.id]
    return _stack_policy(
        rule.id, rule.statement, lambda args, report: validate(args, tagged(report)), **rule.config_schema
    )


POLICIES = [policy(rule) for rule in CATALOGUE]
