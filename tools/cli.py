"""`rocm-stack`: the project's one command line (console script of pyproject.toml; `make` targets call it).

Each subcommand is one offline tool of tools/; its options are defined once, by the tool, and
`rocm-stack COMMAND --help` prints them. Slow commands show a rich progress spinner on stderr, but only for a
person at a terminal: never under CI (`CI` set) or when stderr is not a TTY, so logs stay plain.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import typer
from rich.console import Console

# name: (module, what it does, slow). The module's main(argv) parses the arguments and returns the exit code.
COMMANDS: dict[str, tuple[str, str, bool]] = {
    "synth": (
        "tools.synth",
        "Run the program under Pulumi's mock engine and write plan.json, manifests and Docker scripts.",
        True,
    ),
    "diff": (
        "tools.diff",
        "Compare two synth plans: resources added, removed, changed, and what `pulumi up` does to them (Markdown, JSON).",
        False,
    ),
    "drift": ("tools.drift", "Turn `pulumi preview --refresh --json` into a drift report (exit 1 on drift).", False),
    "topology": (
        "tools.topology",
        "Show a saved rocm-smi/amd-smi GPU topology and a placement: a table, --json, or an --svg picture.",
        False,
    ),
    "alerts": ("tools.alerts", "Print (or --write) the GPU alert rules as a Prometheus rules file.", False),
    "dashboard": ("tools.dashboard", "Print (or --write) the Grafana dashboard JSON.", False),
    "config-reference": (
        "tools.config_reference",
        "Print (or --write, --check) docs/config-reference.md, generated from the schema.",
        False,
    ),
    "rules": (
        "tools.rules_reference",
        "Print (or --write, --check) docs/rules.md, generated from the rule catalogue.",
        False,
    ),
    "allowlist": (
        "tools.allowlist",
        "Print (or --write, --check) the policy pack's prod allow-list, derived from the synth of the prod stacks.",
        True,
    ),
    "images": ("tools.images", "List every image the stack pulls (for copying them into an air-gapped mirror).", True),
    "lock": ("tools.lock", "Write the stack's placement lock (stacks/placement.STACK.yaml).", True),
    "verify": ("tools.verify", "Verify a deployed stack.", True),
}

app = typer.Typer(
    name="rocm-stack",
    help="The rocm-stack offline tools: synth, diff, drift, topology, alerts, ...",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    add_completion=False,
    pretty_exceptions_enable=False,
)


def show_progress(stream: Any = None) -> bool:
    """A spinner only for a person watching: stderr is a terminal and this is not CI."""
    stream = sys.stderr if stream is None else stream
    return not os.environ.get("CI") and stream.isatty()


def progress(text: str) -> AbstractContextManager[Any]:
    if not show_progress():
        return nullcontext()

    return Console(stderr=True).status(text)


def _available(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _command(name: str, module: str, slow: bool) -> Callable[[typer.Context], None]:
    def run(ctx: typer.Context) -> None:
        main = importlib.import_module(module).main
        with progress(f"rocm-stack {name} ...") if slow else nullcontext():
            code = main(list(ctx.args))
        raise typer.Exit(code or 0)

    return run


for _name, (_module, _help, _slow) in COMMANDS.items():
    if _available(_module):
        # Arguments go to the tool untouched (its own --help included): one definition of each option.
        app.command(
            _name,
            help=_help,
            add_help_option=False,
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(_command(_name, _module, _slow))


def run(argv: Sequence[str]) -> int:
    """Run `rocm-stack ARGV...` in this process; returns the exit code (tests and the `python -m` wrappers)."""
    try:
        app(list(argv), prog_name="rocm-stack")
    except SystemExit as done:  # typer always exits; so do the tools' argparse (--help, usage errors)
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] != ["synth"]:
        sys.exit(run(argv))
    from tools.synth import exit_process  # here: only synth needs tools.synth (1.3 s to import, measured)

    gc.disable()  # a synth process never turns it back on and skips teardown (tools.synth.exit_process)
    exit_process(run(argv))


if __name__ == "__main__":
    main()
