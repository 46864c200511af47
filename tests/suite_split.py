"""The two sets of the suite (docs/development.md, "Tests"): `make test` runs the fast set, every test not marked
`slow`; `make check`, which CI runs (.ci/run), runs every test. A test is slow where it is marked so (the marker,
registered in pyproject.toml, where the test is defined) or lives in tests/e2e (each needs a real Docker daemon).

An unmarked test that takes longer than SLOW_SECONDS (its setup, call and teardown together, its module's fixtures
included) fails the run that saw it: mark it `@pytest.mark.slow` or make it faster. The budget is wall time on a
machine that is not overloaded: with more runnable processes than cores (the 1-minute load average), each runs that
many times slower, and so the budget grows by that factor; a loaded machine does not fail a fast test.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

SLOW = "slow"
SLOW_SECONDS = 10.0
E2E = Path(__file__).parent / "e2e"
# Every test collected, before `-m` deselects any, and whether it is slow: by node id.
COLLECTED = pytest.StashKey[dict[str, bool]]()


def budget(load: float, cores: int) -> float:
    """SLOW_SECONDS scaled by how many times over its cores the machine is loaded (never below SLOW_SECONDS)."""
    return SLOW_SECONDS * max(1.0, load / cores)


@dataclass(frozen=True)
class Overrun:
    nodeid: str
    seconds: float
    budget: float
    load: float

    def __str__(self) -> str:
        return (
            f"{self.nodeid}: {self.seconds:.1f} s, over its budget of {self.budget:.1f} s (load {self.load:.1f} on "
            f"{os.cpu_count()} cores): mark it @pytest.mark.{SLOW} (it then runs in `make check`) or make it faster"
        )


class DurationGuard:
    """Sums each test's phases as the reports arrive (on the xdist controller, or in a run without xdist) and keeps
    the unmarked tests over budget."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.overruns: list[Overrun] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        if report.when != "teardown" or SLOW in report.keywords:
            return
        load = os.getloadavg()[0]
        allowed = budget(load, os.cpu_count() or 1)
        if self.seconds[report.nodeid] > allowed:
            self.overruns.append(Overrun(report.nodeid, self.seconds[report.nodeid], allowed, load))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.overruns and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.overruns:
            terminalreporter.section(f"unmarked tests over {SLOW_SECONDS:g} s (tests/suite_split.py)", red=True)
            for overrun in self.overruns:
                terminalreporter.line(str(overrun), red=True)


def mark_e2e(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(E2E):
            item.add_marker(SLOW)


def is_slow(item: pytest.Item) -> bool:
    return item.get_closest_marker(SLOW) is not None
