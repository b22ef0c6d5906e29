"""opmarket's pytest plugin (entry point ``pytest11``), for plugin authors' tests.

pytest imports this module in every run where opmarket is installed, so it imports nothing
of opmarket's run time until a test asks for a fixture.

- fixture ``opmarket_registry``: a fresh registry (built-in ops plus the plugins under
  test) for the test, the previous one back after it; ``opmarket.ops`` and ``opcheck`` see it.
- the plugins under test: the marker ``@pytest.mark.opmarket_plugins("name", ...)``, else
  the ini option ``opmarket_plugins``, else the entry points (group ``opmarket``) of the
  ``pyproject.toml`` in pytest's root directory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from opmarket.registry import Registry

__all__ = ["opmarket_registry", "pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: pytest.Parser) -> None:
    """The ini option ``opmarket_plugins``."""
    parser.addini(
        "opmarket_plugins",
        type="args",
        default=[],
        help="opmarket: the plugins (entry point names) that the opmarket_registry fixture "
        "loads; default: the [project.entry-points.opmarket] of the rootdir's pyproject.toml",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Declare the marker ``opmarket_plugins``."""
    config.addinivalue_line(
        "markers",
        "opmarket_plugins(*names): the plugins the opmarket_registry fixture loads for this "
        "test (none: only the built-in ops)",
    )


def _names(request: pytest.FixtureRequest) -> list[str]:
    marker = request.node.get_closest_marker("opmarket_plugins")
    if marker is not None:
        return [str(a) for a in marker.args]
    configured = request.config.getini("opmarket_plugins")
    if configured:
        return [str(a) for a in configured]
    from opmarket.testing._fixtures import plugins_under_test  # lazy: only when used

    return plugins_under_test(request.config.rootpath)


@pytest.fixture
def opmarket_registry(request: pytest.FixtureRequest) -> Iterator[Registry]:
    """A fresh registry for the test: the built-in ops and the plugins under test (each
    must load, or the test errors saying why); the process's registry comes back after."""
    from opmarket.testing._fixtures import PluginLoadError, plugin_registry  # lazy

    names = _names(request)
    try:
        context = plugin_registry(names)
        reg = context.__enter__()
    except PluginLoadError as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield reg
    finally:
        context.__exit__(None, None, None)
