"""Compare two offline synth plans (`plan.json` of `rocm-stack synth`) and summarise in Markdown.

    rocm-stack diff BASE HEAD [--title TEXT] [--out FILE] [--json FILE]

BASE and HEAD are what `rocm-stack synth --out` writes (a folder: its plan.json is read) or a plan.json itself.

CI posts this on the pull request: which resources the change adds, removes or changes (by type and name, the
identity Pulumi keeps across runs) and, for a changed one, which input paths differ; then what `pulumi up` will do
to each of them and what that means for the running platform (tools/impact.py, by the rules of
tools/impact_rules.py). `--json` also writes that prediction as JSON.
Exit codes: 0 summary written (a warning on stderr when the two plans are of different stacks), 2 a plan could not
be read, or a usage error.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path

from tools import impact
from tools.output import exit_codes
from tools.synth_diff import DEFAULT_MAX_ROWS, UnreadablePlan, diff, load, to_markdown


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="rocm-stack diff", description=__doc__.split("\n\n")[0], epilog=exit_codes(__doc__)
    )
    parser.add_argument("base", type=Path, help="the base branch's synth folder (or its plan.json)")
    parser.add_argument("head", type=Path, help="the change's synth folder (or its plan.json)")
    parser.add_argument("--title", help="heading (default: 'Synth diff: stack STACK')")
    parser.add_argument("--max-rows", type=int, default=DEFAULT_MAX_ROWS)
    parser.add_argument("--out", type=Path, help="append the Markdown here (e.g. $GITHUB_STEP_SUMMARY)")
    parser.add_argument("--json", type=Path, help="write the predicted actions and their rules here as JSON")
    args = parser.parse_args(list(argv) if argv is not None else None)
    try:
        base, head = load(args.base), load(args.head)
    except UnreadablePlan as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if base.stack != head.stack:
        print(
            f"warning: the plans are of different stacks (base {base.stack!r}, head {head.stack!r}): the diff compares "
            "two stacks, not a change of one",
            file=sys.stderr,
        )
    result = diff(base, head)
    report = impact.predict(base, head, result)
    markdown = to_markdown(result, args.title or f"Synth diff: stack `{head.stack}`", args.max_rows)
    markdown += "\n" + impact.to_markdown(report, args.max_rows)
    if args.json:
        args.json.write_text(report.model_dump_json(indent=2) + "\n")
    if args.out:
        with args.out.open("a") as summary:
            summary.write(markdown)
    else:
        sys.stdout.write(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
