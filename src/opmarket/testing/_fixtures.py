"""The registry the pytest plugin's ``opmarket_registry`` fixture hands a test: fresh, with
the built-in ops and exactly the plugins under test, each checked to have loaded."""

from __future__ import annotations

import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from opmarket.registry._discovery import ENTRY_POINT_GROUP
from opmarket.registry._registry import Registry
from opmarket.registry._runtime import isolated_registry, plugins
from opmarket.sdk import OpmarketError

__all__ = ["PluginLoadError", "plugin_registry", "plugins_under_test"]


class PluginLoadError(OpmarketError):
    """A plugin under test is not installed, or failed to load (the message says why)."""


def plugins_under_test(project: Path) -> list[str]:
    """The entry point names ``project``'s pyproject.toml declares in the group
    ``opmarket`` (none when it has no such file or group)."""
    path = project / "pyproject.toml"
    if not path.is_file():
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return []
    group = data.get("project", {}).get("entry-points", {}).get(ENTRY_POINT_GROUP, {})
    return sorted(group) if isinstance(group, dict) else []


@contextmanager
def plugin_registry(names: Sequence[str]) -> Iterator[Registry]:
    """An isolated registry (built-ins plus the plugins ``names``, whatever
    ``OPMARKET_PLUGINS`` says) for the duration; PluginLoadError naming the plugin when one
    is not installed or failed to load."""
    with isolated_registry(plugins=list(names)) as reg:
        loaded = {p.name: p for p in plugins()}
        for name in names:
            info = loaded.get(name)
            if info is None:
                raise PluginLoadError(
                    f"the plugin under test {name!r} is not installed: no entry point "
                    f"{name!r} in the group {ENTRY_POINT_GROUP!r} (install the project "
                    "first: pip install -e . or pip install --no-build-isolation -e .)"
                )
            if info.error:
                raise PluginLoadError(
                    f"the plugin under test {name!r} failed to load: {info.error}"
                )
        yield reg
