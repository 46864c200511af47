"""Test stand-in for the Kubernetes wiring of the real __main__.py, run by components.synth.synthesize.

tests/test_kubernetes.py switches to the real project as soon as StackConfig has its `kubernetes` field;
this program can then be deleted. It reports problems in the loader's format (`rocm-stack:<key path>: why`).
"""
from types import SimpleNamespace

import pulumi
from pydantic import ValidationError

from components.config.kubernetes import KubernetesConfig, problems
from components.kubernetes import build_kubernetes


def key_path(loc: tuple[int | str, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)


config = pulumi.Config("rocm-stack")
environment = config.require("environment")
section = config.get_object("kubernetes")
if section is not None:
    try:
        kubernetes = KubernetesConfig.model_validate(section)
    except ValidationError as error:
        raise pulumi.RunError("\n".join(
            f"rocm-stack:kubernetes{key_path(e['loc'])}: "
            + ("unknown key" if e["type"] == "extra_forbidden" else e["msg"])
            for e in error.errors()
        )) from None
    found = list(problems(SimpleNamespace(environment=environment, kubernetes=kubernetes)))
    if found:
        raise pulumi.RunError("\n".join(f"rocm-stack:{path}: {message}" for path, message in found))
    build_kubernetes(kubernetes, environment)
