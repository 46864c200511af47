"""No module of the program over ~600 lines without its reason at the top: a paragraph "Why one file: ..." in its
docstring (docs/development.md, "Where things live")."""

from __future__ import annotations

import ast

from schema.project import ROOT

LONG = 600


def test_long_modules_say_why_they_are_one_file():
    unexplained = []
    for path in sorted(ROOT.glob("*/**/*.py")):
        top = path.relative_to(ROOT).parts[0]
        if top.startswith(".") or top == "tests" or len(path.read_text().splitlines()) <= LONG:
            continue
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if "Why one file:" not in docstring:
            unexplained.append(str(path.relative_to(ROOT)))
    assert unexplained == [], "split them, or say at the top why each is one file"
