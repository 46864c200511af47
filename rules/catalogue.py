"""The rule catalogue: every rule of rules/ in one tuple, by its stable id (rules/rule.py says what an entry holds).
The policy pack declares one policy per entry and nothing else; the config loader tags each refusal with its entry's
id; docs/rules.md is generated from it (`rocm-stack rules --write`)."""

from __future__ import annotations

from . import allowlist, credentials, docker_hosts, kubernetes, stack_config, supply
from .rule import Rule

CATALOGUE: tuple[Rule, ...] = (
    *supply.RULES,
    *docker_hosts.RULES,
    *kubernetes.RULES,
    *credentials.RULES,
    *stack_config.RULES,
    *allowlist.RULES,
)
BY_ID = {rule.id: rule for rule in CATALOGUE}
