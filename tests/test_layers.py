"""The import layers hold: ``ldp <- wire <- store, simulator <- transforms <- pipelines``.

The graph is read from the sources with :mod:`ast`: every ``import`` and ``from ... import`` (also the lazy
ones inside functions, relative ones resolved), plus every string constant that is not a docstring and
names a module of the project (``"pipelines.show"``, ``"transforms.io:WriteResults"``, ``ref("...")``,
``importlib.import_module("...")``; a prefix such as ``"ldp.kinds."`` counts too). An edge from a package
to one its layer may not use fails, naming the file and line; so does a cycle between packages.

What each package may use (besides itself):

* ``ldp``: nothing of the others (numpy and scipy only);
* ``wire``: ``ldp``;
* ``store`` and ``simulator``: ``ldp`` and ``wire``, and neither the other (siblings: the simulator
  writes report files, the store holds results);
* ``transforms``: ``ldp``, ``wire``, ``store``, ``simulator``;
* ``pipelines``: all of them.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier: sources read, nothing imported or run

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("ldp", "wire", "store", "simulator", "transforms", "pipelines")
#: package -> the packages it may import (besides itself)
ALLOWED: dict[str, frozenset[str]] = {
    "ldp": frozenset(),
    "wire": frozenset({"ldp"}),
    "store": frozenset({"ldp", "wire"}),
    "simulator": frozenset({"ldp", "wire"}),
    "transforms": frozenset({"ldp", "wire", "store", "simulator"}),
    "pipelines": frozenset({"ldp", "wire", "store", "simulator", "transforms"}),
}
_MODULE_STRING = re.compile(
    r"(?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_]\w*)*(?:\.|:[A-Za-z_][\w.]*)?"
)

Edge = tuple[str, int, str, str]  # (file, line, how: import / string, target module)


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _is_module_string(text: str) -> bool:
    """Whether a string names a module of the project: ``pkg.mod``, ``pkg.mod:attr`` or ``pkg.mod.``."""
    return ("." in text or ":" in text) and _MODULE_STRING.fullmatch(text) is not None


def edges_of(path: Path, root: Path = ROOT) -> Iterator[Edge]:
    """Every module ``path`` (a file under ``root``) imports or names in a string (docstrings aside)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    skip = _docstrings(tree)
    rel = str(path.relative_to(root))
    nodes = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom, ast.Constant))]
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset)):  # in source order
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield rel, node.lineno, "import", alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            yield rel, node.lineno, "import", base
        elif isinstance(node.value, str) and id(node) not in skip and _is_module_string(node.value):
            yield rel, node.lineno, "string", node.value


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _top(module: str) -> str:
    return module.split(".")[0].split(":")[0]


def violations(paths: list[Path], root: Path = ROOT) -> list[str]:
    """One line per edge against the layers."""
    out = []
    for path in paths:
        source = _top(_module_name(path, root))
        for rel, line, how, target in edges_of(path, root):
            pkg = _top(target)
            if pkg in PACKAGES and pkg != source and pkg not in ALLOWED[source]:
                out.append(f"{rel}:{line}: {source} may not use {pkg} ({how} {target!r})")
    return out


def package_cycles(paths: list[Path], root: Path = ROOT) -> list[list[str]]:
    """The cycles of the package graph (each as a path back to its start)."""
    graph: dict[str, set[str]] = {p: set() for p in PACKAGES}
    for path in paths:
        source = _top(_module_name(path, root))
        for _, _, _, target in edges_of(path, root):
            if _top(target) in PACKAGES and _top(target) != source:
                graph[source].add(_top(target))
    cycles: list[list[str]] = []

    def visit(node: str, trail: list[str]) -> None:
        for nxt in sorted(graph[node]):
            if nxt == trail[0]:
                cycles.append([*trail, nxt])
            elif nxt not in trail and nxt > trail[0]:  # each cycle once, from its smallest package
                visit(nxt, [*trail, nxt])

    for start in PACKAGES:
        visit(start, [start])
    return cycles


def test_no_edge_goes_against_the_layers() -> None:
    found = violations(_sources())
    assert not found, "\n".join(found)


def test_no_cycle_between_packages() -> None:
    assert package_cycles(_sources()) == []


def test_the_scan_sees_lazy_imports_relative_imports_and_module_strings(tmp_path) -> None:
    """A file of ``ldp`` with each kind of upward edge is caught; docstrings and prose are not edges."""
    fake = tmp_path / "ldp" / "kinds"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "bad.py").write_text(
        '"""Names pipelines.simulate in its docstring: not an edge."""\n'
        "from . import rows\n"
        "def f():\n"
        '    """pipelines.show in a docstring."""\n'
        "    from transforms.io import WriteResults\n"
        '    return ref("pipelines.show_kinds:BUILT_IN"), "store.", "the store. Or not", "simulator.files"\n'
    )
    edges = list(edges_of(fake / "bad.py", tmp_path))
    found = violations([fake / "bad.py"], tmp_path)
    assert ("ldp/kinds/bad.py", 2, "import", "ldp.kinds") in edges  # `from . import rows`, resolved
    assert [line.split(": ", 1)[1] for line in found] == [
        "ldp may not use transforms (import 'transforms.io')",
        "ldp may not use pipelines (string 'pipelines.show_kinds:BUILT_IN')",
        "ldp may not use store (string 'store.')",
        "ldp may not use simulator (string 'simulator.files')",
    ]


def test_the_cycle_check_sees_a_cycle(tmp_path) -> None:
    for pkg, body in (("store", "import simulator.files\n"), ("simulator", "from store import Store\n")):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "x.py").write_text(body)
    cycles = package_cycles([tmp_path / "store" / "x.py", tmp_path / "simulator" / "x.py"], tmp_path)
    assert cycles == [["simulator", "store", "simulator"]]
