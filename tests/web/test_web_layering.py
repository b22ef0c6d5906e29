"""No import circle among opmarket.web's modules, not even through an import inside a function
or under TYPE_CHECKING: a circle means two modules that cannot be read, tested or moved apart
(issue 23; the three there were dodged with imports inside functions)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

WEB = Path(__file__).resolve().parents[2] / "web"


def module_name(path: Path) -> str:
    """``web/gpu/_index.py`` -> ``opmarket.web.gpu._index``; a package by its folder."""
    parts = path.relative_to(WEB).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(("opmarket", "web", *parts))


def web_imports(path: Path, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that the file imports: ``from pkg import mod`` names the
    submodule ``pkg.mod``, not the package."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the file's package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            subs = {f"{base}.{alias.name}" for alias in node.names} & modules
            found.update(subs or {base})
    return (found & modules) - {name}


def web_graph() -> dict[str, set[str]]:
    """Each module of opmarket.web -> the modules of opmarket.web it imports."""
    paths = sorted(WEB.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    return {module_name(p): web_imports(p, modules) for p in paths}


def circle(graph: dict[str, set[str]]) -> list[str]:
    """One import circle of ``graph`` (its first module again at the end), or []."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return []


def test_the_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    found = circle(graph)
    assert found[0] == found[-1] and set(found) == {"a", "b", "c"}
    assert circle({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_package_imports() -> None:
    graph = web_graph()
    # from opmarket.web.routes import _api (a submodule, at the top of _app)
    assert "opmarket.web.routes._api" in graph["opmarket.web._app"]
    # the lazy exports' modules, named under TYPE_CHECKING
    assert "opmarket.web.validation._pipeline" in graph["opmarket.web"]
    assert len(graph) > 50


def test_no_import_circle_in_web() -> None:
    assert circle(web_graph()) == []
