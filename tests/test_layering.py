"""Dependencies point one way (sdk <- registry <- compat <- web <- the CLI): no module imports a
package above its own, not even inside a function (DESIGN.md's layout table). sdk imports
nothing of ours; the library packages import no click (commands live in opmarket.cli)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What every library package must never import: the command line and its toolkit.
_NO_CLI = ("opmarket.cli", "click")
# folder -> the modules its modules must never import
FORBIDDEN = {
    "registry": ("opmarket.compat", "opmarket.web", *_NO_CLI),
    "compat": ("opmarket.web", *_NO_CLI),
    "web": _NO_CLI,
    # Framework bridges use sdk and registry; nothing of ours imports them.
    "bridges": ("opmarket.compat", "opmarket.web", *_NO_CLI),
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
        if within(module, FORBIDDEN[folder])
    ]
    assert wrong == []


def within(module: str, packages: tuple[str, ...]) -> bool:
    """Whether ``module`` is one of ``packages`` or inside one."""
    return any(module == p or module.startswith(p + ".") for p in packages)


def _ours_outside_sdk(module: str) -> bool:
    return within(module, ("opmarket",)) and not within(module, ("opmarket.sdk",))


def test_sdk_imports_nothing_of_ours() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in sorted((ROOT / "sdk").rglob("*.py"))
        for line, module in imported_modules(path)
        if _ours_outside_sdk(module) or within(module, _NO_CLI)
    ]
    assert wrong == []


def test_the_check_sees_what_it_must_refuse() -> None:
    """The prefixes catch what they are for, and no more (opmarket.sdk is sdk's own)."""
    assert all(map(_ours_outside_sdk, ("opmarket", "opmarket._fetch", "opmarket.registry")))
    assert not _ours_outside_sdk("opmarket.sdk._lazy")
    assert within("click.testing", _NO_CLI) and within("opmarket.cli._usage", _NO_CLI)
    assert not within("clickhouse", _NO_CLI)


def test_nothing_imports_a_bridge() -> None:
    bridges = (
        "opmarket.tensorflow",
        "opmarket.litert",
        "opmarket.jax",
        "opmarket.torch",
        "opmarket._bridge",
    )
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for folder in ("sdk", "registry", "compat", "web", "src")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for line, module in imported_modules(path)
        if module.startswith(bridges)
    ]
    assert wrong == []


def imported_names(path: Path) -> list[tuple[int, str, str]]:
    """Every (line, module, name) of the file's imports: ``import m`` gives (line, m, "")."""
    found: list[tuple[int, str, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, "") for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def public_names(init: Path) -> set[str]:
    """The ``__all__`` of a package's ``__init__.py``, read without importing it: a literal
    list, or derived from its ``EXPORTS`` map (module -> names), as lazy packages write it."""
    for node in ast.parse(init.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return set(ast.literal_eval(node.value))  # type: ignore[attr-defined]
        if any(isinstance(t, ast.Name) and t.id == "EXPORTS" for t in targets):
            exports = ast.literal_eval(node.value)  # type: ignore[attr-defined]
            return {name for names in exports.values() for name in names}
    return set()


FRAMEWORK_BRIDGES = ("tensorflow", "litert", "jax", "torch")


@pytest.mark.parametrize("bridge", FRAMEWORK_BRIDGES)
def test_a_bridge_reaches_opmarket_only_through_bridge_and_public_sdk(bridge: str) -> None:
    """One bridge architecture: a framework package imports its own modules, the public
    names of ``opmarket._bridge`` and of ``opmarket.sdk`` (and its public submodules), and its
    framework; the run time only through ``opmarket._bridge``."""
    shared = public_names(ROOT / "bridges" / "_bridge" / "__init__.py")
    wrong = []
    for path in sorted((ROOT / "bridges" / bridge).rglob("*.py")):
        for line, module, name in imported_names(path):
            if module == "opmarket" or not module.startswith("opmarket."):
                ok = module != "opmarket"
            elif module.startswith(f"opmarket.{bridge}"):
                ok = True
            elif module == "opmarket._bridge":
                ok = name in shared
            elif module == "opmarket.sdk" or module.startswith("opmarket.sdk."):
                ok = not any(part.startswith("_") for part in module.split(".")[2:])
            else:
                ok = False
            if not ok:
                where = f"{module}.{name}" if name else module
                wrong.append(f"{path.relative_to(ROOT)}:{line}: imports {where}")
    assert wrong == []


def test_the_shared_bridge_uses_only_public_registry_names() -> None:
    """``opmarket._bridge`` reaches the run time through ``opmarket.registry``'s ``__all__``
    (``prepare`` included), never a private module of it."""
    registry = public_names(ROOT / "registry" / "__init__.py")
    assert "prepare" in registry
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}{'.' + name if name else ''}"
        for path in sorted((ROOT / "bridges" / "_bridge").rglob("*.py"))
        for line, module, name in imported_names(path)
        if module.startswith("opmarket.registry")
        and (module != "opmarket.registry" or name not in registry)
    ]
    assert wrong == []


def test_the_checks_find_what_they_look_for(tmp_path: Path) -> None:
    """The helpers above see ``from m import name`` and ``import m`` in functions too."""
    source = tmp_path / "x.py"
    source.write_text(
        "def f():\n"
        "    from opmarket.registry._dispatch import Dispatcher\n"
        "    import opmarket.jax\n"
    )
    assert imported_names(source) == [
        (2, "opmarket.registry._dispatch", "Dispatcher"),
        (3, "opmarket.jax", ""),
    ]
