"""Facts read out of the providers' upstream Go source with tree-sitter's Go grammar, so that tools/impact_rules.py
is checked against the providers' own code, not against itself; and where every test finds its upstream sources.

The project never copies upstream code: the sources are the refs tests/upstream.txt lists, which `make upstream`
fetches from GitHub into bare git repositories `$ROCM_STACK_UPSTREAM/owner+name/repo` (default: .upstream/ of the
checkout). A test whose ref is not there skips, naming `make upstream`; the citations still pin the facts. A test
that reads a repository or ref the list lacks fails: the list is every source the suite reads.

    python tests/upstream_go.py [URL]   # what `make upstream` runs; URL: where owner/name are (https://github.com)
"""

from __future__ import annotations

import fnmatch
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import tree_sitter_go
from tree_sitter import Language, Node, Parser

_GO = Parser(Language(tree_sitter_go.language()))
ROOT = Path(__file__).resolve().parents[1]
MANIFEST = Path(__file__).with_name("upstream.txt")
MIRRORS = Path(os.environ.get("ROCM_STACK_UPSTREAM") or ROOT / ".upstream")
FETCH = "make upstream"


@functools.cache
def listed() -> tuple[tuple[str, str], ...]:
    """(owner/name, ref) of every line of tests/upstream.txt."""
    lines = (line.split("#", 1)[0].split() for line in MANIFEST.read_text().splitlines())
    return tuple((fields[0], fields[1]) for fields in lines if fields)


def _is_listed(repo: str, ref: str) -> bool:
    for listed_repo, listed_ref in listed():
        if listed_repo != repo:
            continue
        if listed_ref == ref or fnmatch.fnmatchcase(f"refs/tags/{ref}", listed_ref) or listed_ref == f"refs/tags/{ref}":
            return True
    return False


def git_dir(repo: str, ref: str) -> Path:
    """The bare repository of `repo` (owner/name) where it holds `ref` (a commit or a tag); skips the calling test
    where it does not, fails where tests/upstream.txt does not list the ref."""
    assert _is_listed(repo, ref), f"{repo} {ref} is not in {MANIFEST.name}: add it there (then `{FETCH}`)"
    path = MIRRORS / repo.replace("/", "+") / "repo"
    if subprocess.run(
        ["git", f"--git-dir={path}", "cat-file", "-e", f"{ref}^{{commit}}"], capture_output=True
    ).returncode:
        pytest.skip(f"needs {repo} @ {ref} in {MIRRORS}: run `{FETCH}` (tests/upstream.txt)")
    return path


def show(repo: str, ref: str, path: str) -> str:
    """`path` of `repo` at `ref` (see git_dir)."""
    git = ["git", f"--git-dir={git_dir(repo, ref)}", "show", f"{ref}:{path}"]
    return subprocess.run(git, capture_output=True, check=True, text=True).stdout


def fetch(url: str = "https://github.com") -> int:
    """Fetch every listed ref that is not there yet (depth 1); 1 when one could not be fetched."""
    failed = 0
    for repo, ref in listed():
        path = MIRRORS / repo.replace("/", "+") / "repo"
        if not path.is_dir():
            subprocess.run(["git", "init", "--quiet", "--bare", str(path)], check=True)
        git = ["git", f"--git-dir={path}"]
        name = ref.removeprefix("refs/tags/")
        if "*" in ref:
            if subprocess.run([*git, "tag", "--list", name], capture_output=True, text=True).stdout:
                continue
        elif not subprocess.run([*git, "cat-file", "-e", f"{name}^{{commit}}"], capture_output=True).returncode:
            continue
        refspec = f"+{ref}:{ref}" if ref.startswith("refs/") else f"{ref}:refs/pins/{ref}"
        print(f"{repo} {ref}", file=sys.stderr)
        done = subprocess.run([*git, "fetch", "--quiet", "--depth", "1", "--no-tags", f"{url}/{repo}", refspec])
        failed |= done.returncode != 0
    return int(failed)


@dataclass(frozen=True)
class Upstream:
    """One public repository at the commit the rules cite."""

    repo: str  # owner/name
    commit: str

    def read(self, path: str) -> bytes:
        """`path` at the commit; skips the calling test where the mirror lacks the commit, fails where the commit
        lacks the path (the citation is wrong)."""
        return _show(self.repo, self.commit, path)

    def __post_init__(self) -> None:
        assert _is_listed(self.repo, self.commit), f"{self.repo} {self.commit} is not in {MANIFEST.name}"


@functools.cache  # the tests read the same few files many times
def _show(repo: str, commit: str, path: str) -> bytes:
    git = ["git", f"--git-dir={git_dir(repo, commit)}", "show", f"{commit}:{path}"]
    return subprocess.run(git, capture_output=True, check=True).stdout


def parse(source: bytes) -> Node:
    return _GO.parse(source).root_node


def text(node: Node) -> str:
    assert node.text is not None
    return node.text.decode()


def walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.named_children:
        yield from walk(child)


def _value(node: Node) -> Node:
    """The expression of a composite literal's element."""
    return node.named_children[0] if node.type == "literal_element" and node.named_children else node


def _fields(literal_value: Node) -> dict[str, Node]:
    """`Key: value` pairs of a composite literal's body."""
    return {
        text(child.named_children[0]).strip('"'): _value(child.named_children[1])
        for child in literal_value.named_children
        if child.type == "keyed_element"
    }


@dataclass(frozen=True)
class SchemaAttribute:
    """One attribute of a terraform-plugin-sdk schema map as declared."""

    path: str  # dotted, nested blocks included: `healthcheck.interval`
    line: int  # 1-based line of its `"name": {` in the file
    type: str  # schema.TypeSet, ...
    force_new: bool
    input: bool  # Optional or Required (not Computed only)
    resource_elem: bool  # a block of nested attributes (Elem: &schema.Resource or a resource variable)
    computed: bool = False  # Computed: true
    default: str | None = None  # the Go expression of its Default, as written
    diff_suppress: str | None = None  # the Go expression of its DiffSuppressFunc, as written


def _bool(node: Node | None, bindings: dict[str, bool]) -> bool:
    if node is None:
        return False
    return bindings[text(node)] if node.type == "identifier" else text(node) == "true"


def _resource_literal(node: Node, files: list[Node]) -> tuple[Node, dict[str, bool]] | None:
    """The `schema.Resource{...}` body an Elem names, resolving `var x = &schema.Resource{...}` and
    `var x = f(true)` where `func f(p bool) *schema.Resource { return &schema.Resource{...} }` (TFD's labelSchema)."""
    if node.type == "unary_expression":
        node = node.named_children[0]
    if node.type == "composite_literal" and text(node.child_by_field_name("type")) == "schema.Resource":
        return node.child_by_field_name("body"), {}
    if node.type != "identifier":
        return None
    name = text(node)
    for root in files:
        for spec in (n for n in walk(root) if n.type == "var_spec"):
            if text(spec.child_by_field_name("name")) != name:
                continue
            value = spec.child_by_field_name("value").named_children[0]
            if value.type == "call_expression":
                function = text(value.child_by_field_name("function"))
                arguments = [text(a) == "true" for a in value.child_by_field_name("arguments").named_children]
                for declaration in (n for root2 in files for n in walk(root2) if n.type == "function_declaration"):
                    if text(declaration.child_by_field_name("name")) == function:
                        parameters = [
                            text(p.child_by_field_name("name"))
                            for p in declaration.child_by_field_name("parameters").named_children
                        ]
                        returned = next(n for n in walk(declaration) if n.type == "return_statement")
                        body, _ = _resource_literal(returned.named_children[0].named_children[0], files) or (None, {})
                        assert body is not None
                        return body, dict(zip(parameters, arguments))
            return _resource_literal(value, files)
    return None


def _schema_map(
    body: Node, prefix: str, files: list[Node], bindings: dict[str, bool], out: list[SchemaAttribute]
) -> None:
    for key, value in _fields(body).items():
        fields = _fields(value)
        elem = fields.get("Elem")
        nested = _resource_literal(elem, files) if elem is not None else None
        out.append(
            SchemaAttribute(
                path=prefix + key,
                line=value.start_point[0] + 1,  # the line of `"key": {`
                type=text(fields["Type"]) if "Type" in fields else "",
                force_new=_bool(fields.get("ForceNew"), bindings),
                input="Optional" in fields or "Required" in fields,
                resource_elem=nested is not None,
                computed=_bool(fields.get("Computed"), bindings),
                default=text(fields["Default"]) if "Default" in fields else None,
                diff_suppress=text(fields["DiffSuppressFunc"]) if "DiffSuppressFunc" in fields else None,
            )
        )
        if nested is not None:
            resource_body, nested_bindings = nested
            schema_body = _fields(resource_body)["Schema"].child_by_field_name("body")
            _schema_map(schema_body, f"{prefix}{key}.", files, nested_bindings or bindings, out)


def resource_schema(resource_file: bytes, *helper_files: bytes) -> list[SchemaAttribute]:
    """Every attribute of the one resource a TFD `resource_*.go` file declares (`Schema: map[string]*schema.Schema`
    of the `schema.Resource` its constructor returns), nested blocks included."""
    files = [parse(resource_file), *map(parse, helper_files)]
    for node in walk(files[0]):
        if node.type == "keyed_element" and text(node.named_children[0]) == "Schema":
            value = _value(node.named_children[1])
            if value.type == "composite_literal":
                out: list[SchemaAttribute] = []
                _schema_map(value.child_by_field_name("body"), "", files, {}, out)
                return out
    raise ValueError("no schema map")


def string_list_in_function(source: bytes, function: str) -> tuple[list[str], int]:
    """The string literals of the first `[]string{...}` inside `function`, and its line."""
    for declaration in (n for n in walk(parse(source)) if n.type == "function_declaration"):
        if text(declaration.child_by_field_name("name")) == function:
            literal = next(
                n
                for n in walk(declaration)
                if n.type == "composite_literal" and text(n.child_by_field_name("type")) == "[]string"
            )
            strings = [text(n).strip('"') for n in walk(literal) if n.type == "interpreted_string_literal"]
            return strings, literal.start_point[0] + 1
    raise ValueError(f"no function {function}")


if __name__ == "__main__":
    sys.exit(fetch(*sys.argv[1:2]))
