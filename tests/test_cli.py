"""The `rocm-stack` command: every subcommand answers --help, unknown ones fail, progress only for a person."""

import io
import subprocess
import sys

import pytest

from tools import cli
from tools.synth import ROOT


@pytest.mark.parametrize("command", [name for name, (module, _, _) in cli.COMMANDS.items() if cli._available(module)])
def test_each_subcommand_has_help(command, capsys):
    assert cli.run([command, "--help"]) == 0
    assert "usage:" in capsys.readouterr().out.lower()


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
