"""The policy pack's prod allow-list (policy/rocm_policy/allowlist.prod.json), derived from the program's own synth of
every committed prod stack (a stack file under stackConfigDir whose name or config makes it prod).

    rocm-stack allowlist --write   # after a change of the program or of a prod stack file: commit the result
    rocm-stack allowlist --check   # exit 1 when the committed list is not what the program declares now

Exit codes: 0 printed, written or current; 1 `--check` found the committed list stale; 2 `--out` names an existing
file (without `--write`) or the file cannot be written, or a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import rules
from policy.rocm_policy.pack import ALLOWLIST_FILE
from rules import allowlist
from schema.project import ROOT
from tools.output import add_output_options, emit, exit_codes
from tools.synth import Plan, autoname, autonamed, mock_id, stack_config, stack_file, synthesize


def prod_stacks(project_dir: Path = ROOT) -> list[str]:
    """The committed stacks the pack judges as prod: by their name (rules.is_prod_stack) or their config."""
    folder = stack_file("prod", project_dir).parent
    names = sorted(p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in folder.glob("Pulumi.*.yaml"))
    return [
        name
        for name in names
        if rules.environment_of(name, stack_config(name, project_dir).get("rocm-stack:environment")) == "prod"
    ]


def computed_texts(plan: Plan) -> set[str]:
    """What the mock engine gave as resources' outputs: their IDs (a container's stands for its Docker ID), image IDs
    and digests, the names the provider gives an unnamed Kubernetes object."""
    texts = {mock_id(r["name"]) for r in plan.resources}
    texts |= {autoname(r["name"]) for r in plan.resources if autonamed(r["type"], r["inputs"])}
    for outputs in plan.mock_outputs.values():
        texts |= {str(outputs[k]) for k in ("imageId", "repoDigest") if k in outputs}
    return texts


def derived(stacks: list[str] | None = None) -> dict[str, Any]:
    plans = [synthesize(stack) for stack in (prod_stacks() if stacks is None else stacks)]
    computed = set().union(*(computed_texts(p) for p in plans))
    return {
        "derivedFrom": [p.stack for p in plans],
        **allowlist.derive([p.resources for p in plans], computed),
    }


def render(stacks: list[str] | None = None) -> str:
    return json.dumps(derived(stacks), indent=1, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack allowlist", description=__doc__.splitlines()[0], epilog=exit_codes(__doc__)
    )
    add_output_options(parser, ALLOWLIST_FILE)
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed list is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if ALLOWLIST_FILE.read_text() != text:
            print(
                f"{ALLOWLIST_FILE.relative_to(ROOT)} is stale: run `rocm-stack allowlist --write`",
                file=sys.stderr,
            )
            return 1
        return 0
    return emit(text, args, ALLOWLIST_FILE)


if __name__ == "__main__":
    sys.exit(main())
