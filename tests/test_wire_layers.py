"""The wire package's layer: it imports without Beam and names nothing above it (``docs/architecture.md``).

Every module of ``wire/`` is imported afresh with ``apache_beam`` blocked (``sys.modules`` entry None, so
any ``import apache_beam`` raises), in this process: the modules of the project are put aside and put back
afterwards. Its sources are read for imports of, or strings naming, the upper layers.
"""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

pytestmark: list[pytest.MarkDecorator] = []  # the fast tier: in-process, no service

ROOT = Path(__file__).resolve().parents[1]
WIRE = ROOT / "wire"
#: the packages above the wire (``ldp <- wire <- store, simulator <- transforms <- pipelines``)
UPPER = ("transforms", "pipelines", "store", "simulator", "apache_beam")
_PROJECT = ("wire", "ldp", "schemas", "transforms", "pipelines", "store", "simulator", "apache_beam")


def _wire_modules() -> list[str]:
    return sorted(
        "wire" if p.name == "__init__.py" else f"wire.{p.stem}" for p in WIRE.glob("*.py")
    )


def _import_without_beam(modules: list[str]) -> dict[str, str]:
    """``{module: error}`` of the modules that fail to import while ``apache_beam`` is blocked."""
    saved = dict(sys.modules)
    for name in list(sys.modules):
        if name.split(".")[0] in _PROJECT:
            del sys.modules[name]
    sys.modules["apache_beam"] = None  # type: ignore[assignment]
    failed: dict[str, str] = {}
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                failed[name] = str(exc)
        loaded_beam = [m for m in sys.modules if m.startswith("apache_beam.")]
        if loaded_beam:
            failed["apache_beam"] = f"loaded {loaded_beam[:3]}"
    finally:
        sys.modules.clear()
        sys.modules.update(saved)
    return failed


def test_every_wire_module_imports_without_beam() -> None:
    modules = _wire_modules()
    assert "wire.validate" in modules and "wire.decode" in modules
    assert _import_without_beam(modules) == {}


def test_the_check_sees_a_module_that_needs_beam(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The blocked import is really blocked: a module importing Beam is reported."""
    (tmp_path / "needs_beam_probe.py").write_text("import apache_beam\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    failed = _import_without_beam(["needs_beam_probe"])
    sys.modules.pop("needs_beam_probe", None)
    assert "needs_beam_probe" in failed


def _upward_names(source: str) -> list[str]:
    """Imports of the upper layers, and string constants that name one of their modules
    (``"transforms.io"``, ``"pipelines.show:ShowSpec"``), in one module's source; docstrings excepted."""
    tree = ast.parse(source)
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] in UPPER]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in UPPER:
            found.append(node.module)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            text = node.value.strip()
            head = text.replace(":", ".").split(".")[0]
            if head in UPPER and text != head and text[len(head)] in ".:":
                found.append(text)
    return found


@pytest.mark.parametrize("path", sorted(WIRE.glob("*.py")), ids=lambda p: p.name)
def test_no_wire_module_names_an_upper_layer(path: Path) -> None:
    assert _upward_names(path.read_text(encoding="utf-8")) == []


def test_the_scan_sees_imports_and_string_references() -> None:
    src = 'import transforms.io\nfrom pipelines.cli import fail\nX = ref("store.store:Store")\n"""doc"""\n'
    assert _upward_names(src) == ["transforms.io", "pipelines.cli", "store.store:Store"]
    assert _upward_names('"""See transforms.io."""\nY = "transforms"\n') == []
