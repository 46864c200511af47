"""The `rocm-stack` command: every subcommand answers --help, unknown ones fail, progress only for a person."""

import ast
import importlib
import inspect
import io
import re
import subprocess
import sys

import pytest

from tools import cli
from tools.synth import ROOT


@pytest.mark.parametrize("command", [name for name, (module, _, _) in cli.COMMANDS.items() if cli._available(module)])
def test_each_subcommand_has_help(command, capsys):
    assert cli.run([command, "--help"]) == 0
    # The name a user types, not the module behind it (`python -m tools.synth`: issue 24 item 11).
    assert capsys.readouterr().out.startswith(f"usage: rocm-stack {command} ")


def test_h_is_help_for_the_command_and_each_subcommand(capsys):
    """`rocm-stack -h` was "No such option: -h" (typer's default is --help alone)."""
    assert cli.run(["-h"]) == 0
    assert "Usage: rocm-stack [OPTIONS] COMMAND" in capsys.readouterr().out
    for command in cli.COMMANDS:
        assert cli.run([command, "-h"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: rocm-stack {command} ")


def _returned_codes(module) -> set[int]:
    """The exit codes main() returns or passes to parser.exit (literals and module constants)."""
    tree = ast.parse(inspect.getsource(module))
    (main,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    codes: set[int] = set()
    for node in ast.walk(main):
        if isinstance(node, ast.Return) and node.value is not None:
            values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "exit":
            values = node.args[:1]
        else:
            continue
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, int):
                codes.add(value.value)
            elif isinstance(value, ast.Name) and isinstance(getattr(module, value.id, None), int):
                codes.add(getattr(module, value.id))
    return codes


@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_each_subcommands_help_lists_its_exit_codes(command, capsys):
    """Every code main() returns is in the help's `Exit codes:` paragraph, and so is 2, argparse's usage error."""
    module = importlib.import_module(cli.COMMANDS[command][0])
    assert cli.run([command, "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Exit codes:" in help_text, help_text
    listed = help_text[help_text.index("Exit codes:") :]
    listed_codes = {int(code) for code in re.findall(r"(?:Exit codes:|[,;]) (\d)\b", listed)}
    assert _returned_codes(module) | {2} <= listed_codes, listed
    assert "usage error" in listed


def test_synth_writes_to_out_stack_by_default_as_make_synth(tmp_path, monkeypatch):
    from tools import synth

    assert "OUT ?= out/$(STACK)" in (ROOT / "Makefile").read_text().splitlines()
    monkeypatch.chdir(tmp_path)
    assert synth.main(["--stack", "dev", "--project-dir", str(ROOT)]) == 0
    assert (tmp_path / "out" / "dev" / "plan.json").is_file()


def test_readme_lists_every_subcommand_and_every_kind_of_synth_output(prod_plan):
    from tools.synth import rendered_files

    readme = (ROOT / "README.md").read_text()
    for name in cli.COMMANDS:
        assert f"| `{name}" in readme or f", `{name}`" in readme, name
    table = readme.split("What synth writes:", 1)[1].split("\n\n", 2)[1]
    documented = [line.split("`")[1] for line in table.splitlines()[2:]]
    for written in rendered_files(prod_plan):
        kind = written.split("/", 1)[0] + "/" if "/" in written else written
        assert any(d == written or (d.startswith(kind) and "/" in written) for d in documented), written


def test_unknown_command_is_a_usage_error():
    assert cli.run(["nope"]) == 2


def test_console_script_is_declared_for_the_cli():
    """`pip install -e .` (make venv) installs `rocm-stack` from pyproject.toml's [project.scripts]."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["rocm-stack"] == "tools.cli:main"


def test_synth_through_the_cli_exits_2_on_a_missing_stack(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "tools.cli", "synth", "--stack", "nope", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "nope" in result.stderr


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_only_on_a_terminal_outside_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    assert cli.show_progress(_Stream(tty=True))
    assert not cli.show_progress(_Stream(tty=False))
    monkeypatch.setenv("CI", "true")
    assert not cli.show_progress(_Stream(tty=True))
