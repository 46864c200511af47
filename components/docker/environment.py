"""The environment of a Docker container, as the provider's `envs` input."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi


def container_envs(env: Mapping[str, pulumi.Input[str]], secret: bool) -> pulumi.Input[Sequence[pulumi.Input[str]]]:
    """`envs` of a docker.Container; secret as a whole when its variables came from a secret stack key (the
    provider's state and `pulumi preview` then hide them all: keep credentials in files where the image allows)."""
    envs: list[Any] = [pulumi.Output.concat(k, "=", v) for k, v in sorted(env.items())]
    return pulumi.Output.secret(envs) if secret else envs
