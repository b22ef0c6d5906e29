"""The process-wide registry, ``opmarket.ops``, ``load_plugins`` and ``register``."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from opmarket.registry import _default_plugin
from opmarket.registry._namespace import OpsNamespace
from opmarket.registry._plugins import PluginInfo, discover, load_into
from opmarket.registry._registry import Registry

__all__ = [
    "get_registry",
    "isolated_registry",
    "load_plugins",
    "new_registry",
    "ops_namespace",
    "plugins",
    "register",
]

BUILTIN_SOURCE = "opmarket (built-in)"

_registry: Registry | None = None
_plugins: list[PluginInfo] | None = None  # None until discovery ran
_ops: OpsNamespace | None = None


def new_registry() -> Registry:
    """A registry holding the built-in ops and nothing else."""
    reg = Registry()
    items: list[Any] = []
    _default_plugin.register(register=lambda *a: items.extend(a))
    reg.register(*items, source=BUILTIN_SOURCE)
    reg.on_change(_reset_namespace)
    return reg


def _reset_namespace() -> None:
    if _ops is not None:
        _ops.reset()


def get_registry() -> Registry:
    """The process's registry (plugins not loaded by this call)."""
    global _registry
    if _registry is None:
        _registry = new_registry()
    return _registry


def load_plugins() -> list[PluginInfo]:
    """Discover and load the installed plugins, once per process; what each did."""
    global _plugins
    if _plugins is None:
        reg = get_registry()
        _plugins = []  # set first: a plugin that reaches opmarket.ops must not recurse
        _plugins.extend(load_into(reg, discover()))
    return list(_plugins)


def plugins() -> list[PluginInfo]:
    """The plugins loaded so far (empty before ``load_plugins``)."""
    return list(_plugins or [])


def ops_namespace() -> OpsNamespace:
    """``opmarket.ops``, after loading the plugins."""
    global _ops
    load_plugins()
    if _ops is None:
        _ops = OpsNamespace(get_registry)
    return _ops


def register(*items: Any, source: str | None = None) -> None:
    """Register ops, kernels, gradients, ... in the process's registry (what a script or a
    test does; plugins hand theirs to their ``register`` hook)."""
    if source is None:
        source = sys._getframe(1).f_globals.get("__name__", "<python>")
    get_registry().register(*items, source=source)


@contextmanager
def isolated_registry(*, plugins: bool | Iterable[str] = False) -> Iterator[Registry]:
    """A fresh registry with the built-ins for the duration, then the previous one back:
    for tests that define their own ops. ``plugins=True`` also loads the installed plugins
    (after the environment variables); a list of entry point names loads exactly those,
    whatever the environment says (what a plugin's own tests use)."""
    global _registry, _plugins
    saved = _registry, _plugins
    _registry = new_registry()
    _plugins = None if plugins is True else []
    _reset_namespace()
    try:
        if plugins is True:
            load_plugins()
        elif plugins:
            assert _plugins is not None
            _plugins.extend(load_into(_registry, discover(names=list(plugins))))
        yield _registry
    finally:
        _registry, _plugins = saved
        _reset_namespace()
