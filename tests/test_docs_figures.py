"""README.md and docs/development.md state no figure that changes with the code by hand: how many tests there are
and how long the suite runs are pytest's own summary on the reader's checkout (issue 36 item 9: the pages said 27
e2e tests, about 1,200 tests and 3.3 min while it was 59, 1,598 and about 6 min)."""

from __future__ import annotations

import re

import pytest

from schema.project import ROOT

PAGES = ("README.md", "docs/development.md")
# A count of tests or configs, or a run time of the suite or its tests: each goes stale with the next commit.
FIGURES = re.compile(
    r"(?<![=\w.])\d[\d,]*\+? (?:e2e |end-to-end )?(?:tests|bad configs)\b"
    r"|\b\d+(?:\.\d+)? min\b"
    r"|\b\d+ s (?:for|on) (?:the )?\d*"
    r"|\bin \d+ s\b"
)


@pytest.mark.parametrize("page", PAGES)
def test_no_figure_that_changes_with_the_code_is_typed_by_hand(page):
    text = (ROOT / page).read_text()
    found = [f"{page}:{n}: {m[0]!r}" for n, line in enumerate(text.splitlines(), 1) for m in FIGURES.finditer(line)]
    assert found == []


def test_the_pattern_finds_the_figures_the_pages_had():
    for stale in ("68 tests", "about 1,800 tests with lint", "took 6.1 min", "1,795 tests in 285 s", "35+ bad configs"):
        assert FIGURES.search(stale), stale
    for kept in ("the vLLM server's 30 s would hold", "shortened to 8 s in the plan", "`--durations=10`"):
        assert not FIGURES.search(kept), kept
