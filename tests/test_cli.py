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
    # The name a user types, not the module behind it (`python -m tools.synth`: issue 24 item 11).
    assert capsys.readouterr().out.startswith(f"usage: rocm-stack {command} ")


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
