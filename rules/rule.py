"""The rule catalogue: every guard rail of the project as one entry, run by the config loader (schema/) on what the
stack config asks for and by the policy pack (policy/rocm_policy/pack.py) on what the program declares.

An entry (`Rule`) has a stable id (the pack's policy name, which `--policy-pack-config` files address, and the end
of every refusal: `... (rule prod-host-access)`), a one-line statement, the reason with its upstream source, the
environments it refuses in, the config keys and plan fields it reads, its check, and examples that must pass and
must fail: each example says the case twice, as stack config (what the config loader reads) and as the resources
the program declares for it (what the pack judges); tests/test_rule_catalogue.py runs every example through both.
A rule whose `config_keys` is empty reads nothing the config can ask for: the program always declares it so, and the
pack guards the plan (an edit of the program, a resource added by hand); its failing examples are plans only.
docs/rules.md is generated from here (`rocm-stack rules --write`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

PROD = ("prod",)
EVERY_ENVIRONMENT = ("dev", "prod")


@dataclass(frozen=True)
class Declared:
    """One resource of an example plan, as plan.json records it (type token, name, inputs, `protect`)."""

    type: str
    name: str
    inputs: Mapping[str, Any]
    protect: bool = False

    def resource(self, stack: str) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "urn": f"urn:pulumi:{stack}::rocm-stack::{self.type}::{self.name}",
            "inputs": self.inputs,
            "protect": self.protect,
        }


@dataclass(frozen=True)
class Example:
    """One case of a rule: `config` (the `rocm-stack:` keys of a stack file, `{secure: ...}` for a secret; None
    where the config cannot ask for it), `plan` (what the program declares for it) and `decrypted`."""

    says: str
    config: Mapping[str, Any] | None
    plan: tuple[Declared, ...]
    stack: str = "prod-rules"  # prod by its name (rules.environment_of); "dev-rules" is dev
    # The text of its `secure:` values (keys as in `config`) as `pulumi up` decrypts them for the program and the pack
    # (PULUMI_CONFIG); synth, which cannot decrypt, hands a placeholder instead.
    decrypted: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rule:
    id: str
    statement: str  # one line: what holds
    reason: str  # why, each fact with its upstream source
    environments: tuple[str, ...]  # where the pack and the config loader refuse (dev alone is never a rule's)
    config_keys: tuple[str, ...]  # what the config loader reads; empty: nothing the config can ask for
    plan_fields: tuple[str, ...]  # what the pack reads of the declared resources
    check: Callable[..., Any]  # the function of rules/ both run (a stack rule's pack binding reads its inputs)
    scope: Literal["resource", "stack"]  # the pack judges one resource at a time, or the stack's resources at once
    passing: tuple[Example, ...]
    failing: tuple[Example, ...]
    config_schema: Mapping[str, Any] = field(default_factory=dict)  # the pack config properties it takes

    @property
    def prod_only(self) -> bool:
        return self.environments == PROD

    def refusal(self, message: str) -> str:
        """A refusal's text as both the config loader and the pack give it: it ends with the rule's id."""
        return f"{message} (rule {self.id})"
