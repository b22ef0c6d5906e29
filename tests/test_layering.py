"""Dependencies point one way (sdk <- registry <- compat <- web): no module imports a package
above its own, not even inside a function (DESIGN.md's layout table)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# folder -> the opmarket packages its modules must never import
FORBIDDEN = {
    "sdk": ("opmarket.registry", "opmarket.compat", "opmarket.web", "opmarket._cli"),
    "registry": ("opmarket.compat", "opmarket.web", "opmarket._cli"),
    "compat": ("opmarket.web", "opmarket._cli"),
    "web": ("opmarket._cli",),
    # Framework bridges use sdk and registry; nothing of ours imports them.
    "bridges": ("opmarket.compat", "opmarket.web", "opmarket._cli"),
}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """Every module an ``import`` or ``from ... import`` in the file names, with its line."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_imports_point_one_way(folder: str) -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, module in imported_modules(path)
        if module.startswith(FORBIDDEN[folder])
    ]
    assert wrong == []


def test_nothing_imports_a_bridge() -> None:
    bridges = ("opmarket.tensorflow", "opmarket.litert", "opmarket.jax", "opmarket.torch")
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for folder in ("sdk", "registry", "compat", "web", "src")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, module in imported_modules(path)
        if module.startswith(bridges)
    ]
    assert wrong == []
