"""The suite's two sets (tests/suite_split.py, docs/development.md "Tests"): `make test` runs exactly the tests not
marked slow, `make check` and CI every test, and an unmarked test over its budget fails the run.

pytest selects by marker with `-m EXPR`, `not slow` deselecting every test that carries the `slow` marker
(docs.pytest.org/en/stable/example/markers.html, "Marking test functions and selecting them for a run").
"""

from __future__ import annotations

import shlex
import subprocess
from types import SimpleNamespace

import pytest

from schema.project import ROOT
from suite_split import COLLECTED, SLOW, SLOW_SECONDS, DurationGuard, budget

VALUED = {"-n", "-m", "-k", "-p", "--durations", "--dist"}


def pytest_arguments(target: str) -> tuple[dict[str, str], list[str]]:
    """The options and paths of the pytest command a make target runs (`make -n`: printed, not run)."""
    dry = subprocess.run(["make", "-n", target], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    (line,) = [line for line in dry.splitlines() if " -m pytest " in line]
    words = shlex.split(line)
    words = words[words.index("pytest") + 1 :]
    options: dict[str, str] = {}
    paths = []
    while words:
        word = words.pop(0)
        if word in VALUED:
            options[word] = words.pop(0)
        elif word.startswith("-"):
            name, _, value = word.partition("=")
            options[name] = value
        else:
            paths.append(word)
    return options, paths


LEAVE_OUT = {"-k", "--ignore", "--ignore-glob", "--deselect", "--lf", "--last-failed", "-x", "--exitfirst"}


def test_make_test_runs_every_test_not_marked_slow():
    options, paths = pytest_arguments("test")
    assert paths == ["tests"]
    assert options["-m"] == f"not {SLOW}"
    assert not LEAVE_OUT & options.keys()


def test_make_check_and_ci_run_every_test():
    options, paths = pytest_arguments("check")
    assert paths == ["tests"]
    assert not (LEAVE_OUT | {"-m"}) & options.keys()
    commands = [line for line in (ROOT / ".ci/run").read_text().splitlines() if line and not line.startswith("#")]
    assert commands[-1] == "make check"


def test_this_run_selects_exactly_the_tests_its_marker_expression_names(request):
    """In `make test` no slow test is selected and no unmarked one left out; in `make check` every test runs."""
    config = request.config
    collected = config.stash[COLLECTED]
    choose = {"": lambda slow: True, f"not {SLOW}": lambda slow: not slow, SLOW: lambda slow: slow}
    if config.option.keyword or config.option.deselect or config.option.markexpr not in choose:
        pytest.skip("a run narrowed by -k, --deselect or another marker expression")
    wanted = choose[config.option.markexpr]
    assert {item.nodeid for item in request.session.items} == {test for test, slow in collected.items() if wanted(slow)}


def test_every_end_to_end_test_is_slow(request):
    collected = request.config.stash[COLLECTED]
    assert [test for test, slow in collected.items() if test.startswith("tests/e2e/") and not slow] == []


def test_the_budget_grows_only_on_a_machine_loaded_over_its_cores():
    assert budget(load=0.5, cores=2) == budget(load=2.0, cores=2) == SLOW_SECONDS
    assert budget(load=8.0, cores=2) == 4 * SLOW_SECONDS


def report(nodeid: str, when: str, seconds: float, slow: bool = False) -> pytest.TestReport:
    keywords = {nodeid: 1, **({SLOW: 1} if slow else {})}
    return pytest.TestReport(nodeid, ("t.py", 0, nodeid), keywords, "passed", None, when, duration=seconds)


def guard_after(monkeypatch, load: float, *tests: tuple[str, float, bool]) -> DurationGuard:
    """A guard that saw each test's setup, call and teardown (a third of its time each), at this load on 2 cores."""
    monkeypatch.setattr("os.getloadavg", lambda: (load, load, load))
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    guard = DurationGuard()
    for nodeid, seconds, slow in tests:
        for when in ("setup", "call", "teardown"):
            guard.pytest_runtest_logreport(report(nodeid, when, seconds / 3, slow))
    return guard


def test_an_unmarked_test_over_its_budget_fails_the_run_and_says_what_to_do(monkeypatch):
    over, under, marked = SLOW_SECONDS + 1, SLOW_SECONDS - 1, 10 * SLOW_SECONDS
    guard = guard_after(monkeypatch, 1.0, ("t.py::over", over, False), ("t.py::under", under, False))
    guard.pytest_runtest_logreport(report("t.py::marked", "call", marked, slow=True))
    guard.pytest_runtest_logreport(report("t.py::marked", "teardown", 0, slow=True))
    assert [overrun.nodeid for overrun in guard.overruns] == ["t.py::over"]
    assert "mark it @pytest.mark.slow" in str(guard.overruns[0])
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    guard.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED


def test_a_loaded_machine_does_not_fail_a_fast_test(monkeypatch):
    guard = guard_after(monkeypatch, 8.0, ("t.py::slowed_down", 3 * SLOW_SECONDS, False))
    assert guard.overruns == []
    session = SimpleNamespace(exitstatus=pytest.ExitCode.OK)
    guard.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.OK
