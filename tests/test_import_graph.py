"""No import circle among the project's own modules, inside a folder too (import-linter's contracts in pyproject.toml
only forbid imports between folders). A circle makes a module's meaning depend on which side is imported first, and
is what an import hidden inside a function body hides: grimp (import-linter's own graph, at the pinned version) reads
those too, and the imports under `if TYPE_CHECKING:`."""

from __future__ import annotations

import tomllib

import grimp
import pytest

from schema.project import ROOT

ROOT_PACKAGES = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]


def circles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Each circle once, as the modules around it: `a -> b -> ... -> a`, shortest path first."""
    found: dict[frozenset[str], list[str]] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(imported, importer)
            if back is not None:
                found.setdefault(frozenset(back), [importer, *back])
    return sorted(found.values())


def test_the_graph_covers_every_folder_of_the_program() -> None:
    """Every folder of Python code at the top of the project is a root package of the contract (and of this test)."""
    folders = {
        p.relative_to(ROOT).parts[0] for p in ROOT.glob("*/**/*.py") if not p.relative_to(ROOT).parts[0].startswith(".")
    }
    assert folders - {"tests"} == set(ROOT_PACKAGES)


def test_no_module_imports_itself_back() -> None:
    graph = grimp.build_graph(*ROOT_PACKAGES, cache_dir=None)
    assert circles(graph) == [], "import circles (break each by moving what both sides need into a third module)"


def test_a_circle_inside_one_folder_is_found(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from circled import b\n")
    (package / "b.py").write_text("def late():\n    from circled import a  # inside a function: still a circle\n")
    (package / "c.py").write_text("from circled import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert circles(grimp.build_graph("circled", cache_dir=None)) == [["circled.a", "circled.b", "circled.a"]]
