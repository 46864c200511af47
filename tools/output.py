"""How the generators (config reference, alert rules, dashboard) write what they generate.

Without options the text goes to standard output. `--write` rewrites the committed file (or `--out FILE`); `--out
FILE` alone writes a new file and refuses to overwrite an existing one, so a generator never replaces a committed
file nobody asked it to. Every file written is named on stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from schema.project import ROOT


def exit_codes(doc: str | None) -> str:
    """The `Exit codes:` paragraph of a tool's module docstring: its --help epilog (one text for both)."""
    text = doc or ""
    return text[text.index("Exit codes:") :].split("\n\n", 1)[0].strip()


def add_output_options(parser: argparse.ArgumentParser, committed: Path) -> None:
    shown = committed.relative_to(ROOT) if committed.is_relative_to(ROOT) else committed
    parser.add_argument(
        "--write", action="store_true", help=f"rewrite the committed {shown} (or the --out file) instead of printing"
    )
    parser.add_argument(
        "--out", type=Path, help="write to this new file instead of printing (with --write: overwrite it if it exists)"
    )


def emit(text: str, args: argparse.Namespace, committed: Path) -> int:
    """Print `text`, or write it as the options say; 2 (with the reason on stderr) when it would overwrite a file."""
    target: Path | None = args.out or (committed if args.write else None)
    if target is None:
        sys.stdout.write(text)
        return 0
    if target.exists() and not args.write:
        print(f"{target} exists: pass --write to overwrite it", file=sys.stderr)
        return 2
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    except OSError as error:
        print(f"cannot write {target}: {error.strerror}", file=sys.stderr)
        return 2
    print(f"wrote {target}", file=sys.stderr)
    return 0
