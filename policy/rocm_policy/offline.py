"""Run the policy pack over an offline synth plan, without the Pulumi CLI or a backend.

    PYTHONPATH=policy python -m rocm_policy.offline out/dev/plan.json [--policy-pack-config policy/prod.json]

Each declared resource goes through the same `validate` callbacks the engine would call during
`pulumi preview --policy-pack policy [--policy-pack-config FILE]` (inputs as the provider receives them, `protect`
from the plan), with PULUMI_STACK/PULUMI_CONFIG set from the plan's stack as the CLI sets them for the pack, and the
pack config applied as the CLI applies it. CI runs this on every pull request, forks included (no secrets needed). Exit codes: 0 no mandatory violation, 1 mandatory
violations, 2 unreadable plan.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)
from pulumi_policy.policy import _NotApplicableError

from . import pack
from .pack import POLICIES, enforcement_level, stack_config_file, stack_context


@dataclass(frozen=True)
class Violation:
    policy: str
    level: str
    urn: str
    message: str


def engine_config(config: Mapping[str, Any], decrypted: Mapping[str, str] | None = None) -> dict[str, str]:
    """Stack config as the CLI passes it in PULUMI_CONFIG: strings, structures as JSON, a `secure:` value as its
    `decrypted` text where given (the CLI decrypts every one; this runner has no key: pack.UNDECRYPTED)."""
    decrypted = decrypted or {}

    def engine_value(key: str, value: Any) -> str:
        if isinstance(value, Mapping) and set(value) == {"secure"}:
            return decrypted.get(key, pack.UNDECRYPTED)
        return value if isinstance(value, str) else json.dumps(value)

    return {k: engine_value(k, v) for k, v in config.items()}


@contextmanager
def stack_environment(
    stack: str, project_dir: Path | None = None, decrypted: Mapping[str, str] | None = None
) -> Iterator[None]:
    """PULUMI_STACK and PULUMI_CONFIG as the CLI sets them, from the project's (default: the pack's) stack file, its
    `secure:` values as `decrypted` gives them (by full key, `rocm-stack:vllmApiKey`)."""
    path = stack_config_file(stack, project_dir or pack.PROJECT_DIR)
    config = pack.stack_file_config(path)
    saved = {k: os.environ.get(k) for k in ("PULUMI_STACK", "PULUMI_CONFIG")}
    os.environ.update(PULUMI_STACK=stack, PULUMI_CONFIG=json.dumps(engine_config(config, decrypted)))
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _options(resource: Mapping[str, Any]) -> PolicyResourceOptions:
    return PolicyResourceOptions(
        protect=bool(resource.get("protect")),
        ignore_changes=[],
        delete_before_replace=None,
        aliases=[],
        custom_timeouts=PolicyCustomTimeouts(0, 0, 0),
        additional_secret_outputs=[],
        parent=resource.get("parent"),
    )


PolicyConfig = Mapping[str, Mapping[str, Any]]


def read_policy_config(path: Path) -> dict[str, dict[str, Any]]:
    """A `--policy-pack-config` file: policy name (or `all`) -> a level, or an object of properties with an optional
    `enforcementLevel` (pulumi/pulumi pkg/resource/analyzer/config.go parsePolicyPackConfig)."""
    raw = json.loads(path.read_text() or "{}")
    config: dict[str, dict[str, Any]] = {}
    for name, value in raw.items():
        entry = {"enforcementLevel": value} if isinstance(value, str) else dict(value)
        level = entry.get("enforcementLevel")
        if level is not None and level not in {e.value for e in EnforcementLevel}:
            raise ValueError(f"{name}: {level!r} is not an enforcement level")
        config[name] = entry
    return config


def _level(policy: str, default: str, config: PolicyConfig) -> str:
    """The CLI's order (config.go applyConfig): the pack's default, then `all`, then the policy's own."""
    level = config.get("all", {}).get("enforcementLevel") or default
    return config.get(policy, {}).get("enforcementLevel") or level


def check(
    resources: Iterable[Mapping[str, Any]], policies=POLICIES, config: PolicyConfig | None = None
) -> list[Violation]:
    """Violations of every policy for resources shaped like plan.json's (type, name, urn, inputs, protect), under
    a pack config shaped like read_policy_config's."""
    resources = list(resources)
    config = config or {}
    default = enforcement_level(stack_context()).value  # the pack's, fixed when its process starts
    violations: list[Violation] = []

    def reporter(policy_name: str, level: str, default_urn: str) -> Callable[..., None]:
        def report(message: str, urn: str | None = None) -> None:
            violations.append(Violation(policy_name, level, urn or default_urn, message))

        return report

    for policy in policies:
        level = _level(policy.name, default, config)
        if level == EnforcementLevel.DISABLED.value:
            continue
        properties = {k: v for k, v in config.get(policy.name, {}).items() if k != "enforcementLevel"}
        try:
            if isinstance(policy, ResourceValidationPolicy):
                for r in resources:
                    args = ResourceValidationArgs(
                        r["type"], r.get("inputs", {}), r.get("urn", ""), r["name"], _options(r), None, properties
                    )
                    policy.validate(args, reporter(policy.name, level, r.get("urn") or r["name"]))
            elif isinstance(policy, StackValidationPolicy):
                stack = [
                    PolicyResource(
                        r["type"], r.get("inputs", {}), r.get("urn", ""), r["name"], _options(r), None, None, [], {}
                    )
                    for r in resources
                ]
                by_urn = {p.urn: p for p in stack if p.urn}
                for p, r in zip(stack, resources, strict=True):  # the engine's dependencies, as plan.json records them
                    p.dependencies = [by_urn[u] for u in r.get("depends_on", ()) if u in by_urn]
                policy.validate(StackValidationArgs(stack, properties), reporter(policy.name, level, ""))
        except _NotApplicableError:
            continue  # the pack's rules only decline for a whole stack (a prod-only rule on dev)
    return violations


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rocm_policy.offline", description=__doc__.split("\n\n")[0])
    parser.add_argument("plan", type=Path, help="plan.json written by `python -m tools.synth`")
    parser.add_argument(
        "--policy-pack-config", type=Path, help="the pack config, as `pulumi up --policy-pack-config` takes it"
    )
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        plan = json.loads(args.plan.read_text())
        stack, resources = plan["stack"], plan["resources"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"error: cannot read synth plan {args.plan}: {error}", file=sys.stderr)
        return 2
    try:
        config = read_policy_config(args.policy_pack_config) if args.policy_pack_config else {}
    except (OSError, ValueError, AttributeError, TypeError) as error:
        print(f"error: cannot read policy pack config {args.policy_pack_config}: {error}", file=sys.stderr)
        return 2
    with stack_environment(stack):
        violations = check(resources, config=config)
        context = stack_context(urns=[r.get("urn", "") for r in resources])
        level = _level("all", enforcement_level(stack_context()).value, config)
    print(f"### Policy pack on the synth of stack `{stack}` ({context.environment}: {level})\n")
    for v in violations:
        print(f"- **{v.level}** `{v.policy}` `{v.urn}`: {v.message}")
    if not violations:
        print("No violations.")
    return 1 if any(v.level == "mandatory" for v in violations) else 0


if __name__ == "__main__":
    sys.exit(main())
