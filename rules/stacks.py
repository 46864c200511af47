"""Which stack is prod: by the words of its name, its config making it only stricter; the stack of a resource URN."""

from __future__ import annotations

import re
from typing import Any

_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")


PROD_WORDS = frozenset({"prod", "production"})


def is_prod_stack(stack: str) -> bool:
    """A stack is prod when `prod` or `production`, in any case, is a word of its name (words split at any character
    but a letter or digit, and where case or letters and digits change, the config keys' rule `_words`): `prod`,
    `PROD`, `prod-eu`, `prod_eu`, `eu.prod`, `eu-prod`, `euProd`, `prod2`, `production`, also `non-prod` (fail
    closed: name a development stack otherwise); `product-demo` and `preprod` are not. `org/project/prod` counts as
    `prod`."""
    return not PROD_WORDS.isdisjoint(_words(stack.rsplit("/", 1)[-1]))


def environment_of(stack: str, configured: Any = None) -> str:
    """The environment a stack runs in: the program's config loader and the policy pack both decide with this.
    A stack's config may make it stricter (`environment: prod` on `lab`), never a prod stack laxer: the config is
    what the prod rules police, so it cannot switch them off."""
    return "prod" if is_prod_stack(stack) or configured == "prod" else "dev"


def laxer_environment_problem(stack: str, configured: Any) -> str | None:
    """Why a stack's `environment` is refused: `dev` on a stack whose name makes it prod."""
    if configured == "dev" and is_prod_stack(stack):
        return (
            f"stack '{stack}' is prod by its name (`prod` or `production` is a word of it), and its config cannot make it "
            "laxer: remove `environment: dev` (or set prod); a development stack takes another name (`dev`, `lab-*`)"
        )
    return None


def stack_of_urn(urn: str) -> str | None:
    """The stack of a resource URN, `urn:pulumi:<stack>::<project>::<type>::<name>` (Pulumi docs, "Resource
    URNs"); None for anything else."""
    if not urn.startswith("urn:pulumi:"):
        return None
    return urn[len("urn:pulumi:") :].split("::", 1)[0] or None


def _words(key: str) -> list[str]:
    return [w.lower() for w in _WORDS.findall(key)]
