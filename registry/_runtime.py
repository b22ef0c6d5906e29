"""The process-wide registry, ``opmarket.ops``, ``load_plugins`` and ``register``.

Plugins load lazily: discovery (no imports) runs on the first need; ``opmarket.ops.<name>``
then imports only the plugins whose manifests declare a matching op, a kernel for one, or
an op those need (and any plugin without a readable manifest); ``load_plugins()`` and
everything that needs every op (graphs, custom calls, conformance, ``dir(opmarket.ops)``)
load the rest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from opmarket.registry import _default_plugin
from opmarket.registry._discovery import EntryPointRecord
from opmarket.registry._manifest import read_manifest
from opmarket.registry._namespace import OpsNamespace, matches
from opmarket.registry._plugins import PluginInfo, discover, load_into
from opmarket.registry._registry import Registry
from opmarket.sdk import OpmarketError
from opmarket.sdk.build._inline import install_library_loader

__all__ = [
    "get_registry",
    "isolated_registry",
    "load_plugins",
    "load_plugins_for",
    "new_registry",
    "ops_namespace",
    "plugins",
    "register",
    "registry_or_default",
]

BUILTIN_SOURCE = "opmarket (built-in)"

_registry: Registry | None = None
_plugins: list[PluginInfo] | None = None  # loaded so far; None until discovery ran
_pending: list[EntryPointRecord] = []  # discovered, not loaded yet
_declares: dict[EntryPointRecord, frozenset[str] | None] = {}  # None: no manifest
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


def registry_or_default(registry: Registry | None) -> Registry:
    """``registry``, or when it is None the process's with every installed plugin loaded:
    the default of each function that takes ``registry=``."""
    if registry is not None:
        return registry
    load_plugins()
    return get_registry()


def _discover() -> list[PluginInfo]:
    global _plugins, _pending
    if _plugins is None:
        _plugins, _pending = [], discover()
    return _plugins


def _load(entries: list[EntryPointRecord]) -> None:
    global _pending
    loaded = _discover()
    # Taken off the pending list first: a plugin that reaches opmarket.ops must not recurse.
    _pending = [e for e in _pending if e not in entries]
    if entries:
        loaded.extend(load_into(get_registry(), entries))


def load_plugins() -> list[PluginInfo]:
    """Discover and load the installed plugins, once per process; what each did."""
    _discover()
    _load(list(_pending))
    return list(_plugins or [])


def _declared(entry: EntryPointRecord) -> frozenset[str] | None:
    """The ops the entry's manifest defines or has kernels for (None: no manifest)."""
    if entry not in _declares:
        try:
            opset = read_manifest(entry)
            _declares[entry] = frozenset(
                {o.name for o in opset.ops} | {k.op for k in opset.kernels}
            )
        except (OpmarketError, OSError):
            _declares[entry] = None
    return _declares[entry]


def load_plugins_for(prefix: str, name: str | None, *, full: bool = False) -> None:
    """Load the pending plugins that ``opmarket.ops`` needs to resolve ``name`` under the
    namespace ``prefix`` (``full``: ``name`` is an op's full name below it; None: every
    plugin), with the plugins that declare the ops they declare (kernels for an op, the
    op of a kernel), and the plugins without a manifest, which may declare anything."""
    _discover()
    if not _pending:
        return
    if name is None:
        _load(list(_pending))
        return
    wanted = [
        e
        for e in _pending
        if (ops := _declared(e)) is None or any(matches(op, prefix, name, full=full) for op in ops)
    ]
    mentioned: set[str] = set()
    grew = True
    while grew:  # close over shared ops, so kernels and their ops load together
        for e in wanted:
            mentioned |= _declared(e) or set()
        more = [e for e in _pending if e not in wanted and (_declared(e) or set()) & mentioned]
        wanted.extend(more)
        grew = bool(more)
    _load([e for e in _pending if e in wanted])


def plugins() -> list[PluginInfo]:
    """The plugins loaded so far (empty before ``load_plugins``)."""
    return list(_plugins or [])


def ops_namespace() -> OpsNamespace:
    """``opmarket.ops``: it loads the plugins each name needs as it is looked up."""
    global _ops
    if _ops is None:
        _ops = OpsNamespace(get_registry, loader=load_plugins_for)
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
    global _registry, _plugins, _pending
    saved = _registry, _plugins, _pending
    _registry = new_registry()
    _plugins, _pending = (None, []) if plugins is True else ([], [])
    _reset_namespace()
    try:
        if plugins is True:
            load_plugins()
        elif plugins:
            assert _plugins is not None
            _plugins.extend(load_into(_registry, discover(names=list(plugins))))
        yield _registry
    finally:
        _registry, _plugins, _pending = saved
        _reset_namespace()


def _load_inline_library(path: str) -> Any:
    from opmarket.registry._native import load_library  # _native imports this module

    return load_library(path)


# opmarket.sdk.build.load_inline registers what it compiles through the run time's load_library.
install_library_loader(_load_inline_library)
