"""The layering of ARCHITECTURE.md, checked on the source: cores stay free of Lightning and of the callbacks, and
no module reaches into another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lightning_efficient"
CORES = ("functional", "data")


def _imports(path: Path) -> list[tuple[str, list[str]]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
    return out


def _modules(folder: Path = PACKAGE) -> list[Path]:
    return sorted(folder.rglob("*.py"))


@pytest.mark.parametrize("core", CORES)
def test_cores_import_neither_lightning_nor_callbacks_nor_the_app(core: str) -> None:
    banned = (
        "pytorch_lightning",
        "lightning",
        "lightning_efficient.callbacks",
        "lightning_efficient.pipeline",
        "lightning_efficient.app",
        "lightning_efficient.recipe",
    )
    found = [
        (p.relative_to(PACKAGE), m)
        for p in _modules(PACKAGE / core)
        for m, _ in _imports(p)
        if any(m == b or m.startswith(b + ".") for b in banned)
    ]
    assert not found, f"core modules importing higher layers: {found}"


def test_no_module_imports_a_private_name_of_another_module() -> None:
    found = [
        (p.relative_to(PACKAGE), m, n)
        for p in _modules()
        for m, names in _imports(p)
        if m.startswith("lightning_efficient")
        for n in names
        if n.startswith("_")
    ]
    assert not found, f"private names imported across modules: {found}"


def test_the_library_never_imports_the_app() -> None:
    found = [
        (p.relative_to(PACKAGE), m)
        for p in _modules()
        if "app" not in p.relative_to(PACKAGE).parts and p.name != "__main__.py"
        for m, _ in _imports(p)
        if m.startswith("lightning_efficient.app")
    ]
    assert not found, f"library modules importing the command-line app: {found}"
