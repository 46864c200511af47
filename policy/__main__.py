"""rocm-stack policy pack (Pulumi CrossGuard): `pulumi preview --policy-pack policy`.

The CLI runs this file with the policy pack directory as working directory and first entry of sys.path, so
the pack's bindings are imported as the package `rocm_policy` beside it; the rules themselves are the project's rule
catalogue (`rules/`, one level up: the config loader runs the same), which goes on sys.path right after.
Starting the pack serves the policies to the engine over gRPC until the operation ends.
"""

import sys
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from pulumi_policy import PolicyPack  # noqa: E402

from rocm_policy.pack import POLICIES, enforcement_level, stack_context  # noqa: E402

PolicyPack(
    name="rocm-stack",
    policies=POLICIES,
    # Mandatory for prod (by the stack's name, or its config asking for prod) and for an unknown stack, advisory for
    # dev (rocm_policy/pack.py); the pack config (--policy-pack-config policy/prod.json) overrides it.
    enforcement_level=enforcement_level(stack_context()),
)
