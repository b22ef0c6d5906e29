"""Plugin discovery and loading: entry points in the group ``opmarket``, each isolated.

An entry point names a module (``opmarket_zero_out``), whose ``register`` hook hands over
what the plugin declares, or a C-ABI shared library in a package
(``opmarket_bitcast:libopm_bitcast.so``), which is loaded with ``opmarket.load_library``'s
loader; that package's own ``register`` hook, if it has one, adds Python parts (reference,
input generator, gradient).

``OPMARKET_DISABLE_PLUGINS=1`` turns discovery off; ``OPMARKET_PLUGINS=a,b`` keeps only the
named entry points. Finding plugins imports nothing (``_discovery``); loading imports each
plugin, registers it with pluggy and runs its ``register`` hook. A plugin that fails to
import or register is recorded with its distribution, version and error, and the others
still load.
"""

from __future__ import annotations

import enum
import importlib
import importlib.util
import os
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy

from opmarket.registry._capi import load_declarations
from opmarket.registry._discovery import EntryPointRecord, normalize_name, scan
from opmarket.registry._errors import LibraryError
from opmarket.registry._registry import Registry, flatten
from opmarket.sdk import KernelDef, OpDef, _hookspecs
from opmarket.sdk._kernel import KernelSpec

__all__ = [
    "PluginInfo",
    "PluginStatus",
    "collect",
    "discover",
    "is_library_entry",
    "library_path",
    "load_into",
    "load_plugins_from",
    "plugin_declarations",
    "plugin_manager",
    "plugins_disabled",
    "selected",
]


class PluginStatus(enum.StrEnum):
    """What became of a plugin: not loaded yet, loaded, or failed (``error`` says why)."""

    PENDING = "pending"
    LOADED = "loaded"
    FAILED = "failed"


@dataclass(slots=True)
class PluginInfo:
    """One entry point of the group ``opmarket`` and what became of it."""

    name: str
    distribution: str = ""
    version: str = ""
    module: str = ""
    status: PluginStatus = PluginStatus.PENDING
    error: str = ""
    ops: tuple[str, ...] = ()
    kernels: tuple[KernelDef, ...] = ()
    items: list[Any] = field(default_factory=list, repr=False)

    @property
    def source(self) -> str:
        """The plugin's source in the registry and messages: ``plugin NAME (DIST VERSION)``."""
        dist = f" ({self.distribution} {self.version})" if self.distribution else ""
        return f"plugin {self.name}{dist}"


def plugins_disabled() -> bool:
    return os.environ.get("OPMARKET_DISABLE_PLUGINS", "").strip().lower() in ("1", "true", "yes")


def selected(names: Sequence[str] | None = None) -> set[str] | None:
    """The entry point names to keep: ``names``, else ``OPMARKET_PLUGINS``; None for all."""
    only = ",".join(names) if names is not None else os.environ.get("OPMARKET_PLUGINS", "")
    if names is None and not only.strip():
        return None
    return {n.strip() for n in only.split(",") if n.strip()}


def discover(names: Sequence[str] | None = None) -> list[EntryPointRecord]:
    """The entry points to load, after ``OPMARKET_DISABLE_PLUGINS`` and ``OPMARKET_PLUGINS``
    (``names``, when given, chooses the entry points instead of the environment)."""
    if names is None and plugins_disabled():
        return []
    wanted = selected(names)
    entries = [e for e in scan().entries if wanted is None or e.name in wanted]
    return sorted(entries, key=lambda e: e.name)


def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(_hookspecs.PROJECT)
    pm.add_hookspecs(_hookspecs)
    return pm


def _call(hook: Callable[..., Any]) -> list[Any]:
    items: list[Any] = []
    hook(register=lambda *args: items.extend(args))
    return items


#: File name endings of shared libraries an entry point may name.
LIBRARY_SUFFIXES = (".so", ".dylib", ".dll")


def is_library_entry(value: str) -> bool:
    """Whether an entry point value names a shared library: ``package:libname.so``."""
    return value.partition(":")[2].strip().endswith(LIBRARY_SUFFIXES)


def library_path(value: str) -> Path:
    """The file a library entry point names, in its package's folder (found without
    importing the package); LibraryError when the package or the file is missing."""
    module, _, name = (part.strip() for part in value.partition(":"))
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as exc:
        raise LibraryError(
            f"entry point {value!r}: cannot find package {module!r}: {exc}"
        ) from None
    folders = list(spec.submodule_search_locations or ()) if spec is not None else []
    if spec is not None and not folders and spec.origin:
        folders = [os.path.dirname(spec.origin)]
    for folder in folders:
        candidate = Path(folder, name)
        if candidate.is_file():
            return candidate.resolve()
    raise LibraryError(
        f"entry point {value!r}: no library {name!r} in package {module!r} "
        f"(looked in {', '.join(folders) or 'nothing: package not found'})"
    )


def plugin_declarations(
    value: str, *, name: str | None = None, pm: pluggy.PluginManager | None = None
) -> list[Any]:
    """Everything the plugin an entry point ``value`` names hands over, as declarations: for
    ``package:libname.so``, the C-ABI library's, then its package's ``register`` hook's; for
    ``module`` or ``module:attr``, that object's ``register`` hook's (none without one). It
    imports the plugin. The one way a plugin becomes declarations: loading, manifests,
    snapshots and validation all call it. ``name`` is the pluggy name (default ``value``)."""
    pm = pm if pm is not None else plugin_manager()
    name = name if name is not None else value
    module_name, _, attr = (part.strip() for part in value.partition(":"))
    if is_library_entry(value):
        items = load_declarations(library_path(value))
        return items + collect(pm, importlib.import_module(module_name), name)
    obj = importlib.import_module(module_name)
    for part in filter(None, attr.split(".")):
        obj = getattr(obj, part)
    return collect(pm, obj, name)


def collect(pm: pluggy.PluginManager, plugin: Any, name: str) -> list[Any]:
    """Register ``plugin`` with pluggy as ``name`` and return what its ``register`` hook
    hands over, flattened to declarations."""
    pm.register(plugin, name=name)
    items: list[Any] = []
    for impl in pm.hook.register.get_hookimpls():
        if impl.plugin_name == name:
            items.extend(flatten(_call(impl.function)))
    return items


def load_into(registry: Registry, entries: Sequence[EntryPointRecord]) -> list[PluginInfo]:
    """Import each plugin, collect what it registers, register ops first (so kernels may
    name another plugin's op), then the rest; a failing plugin is rolled back."""
    pm = plugin_manager()
    infos: list[PluginInfo] = []
    for entry in entries:
        info = PluginInfo(entry.name, entry.distribution, entry.version, entry.value)
        infos.append(info)
        try:
            info.items = plugin_declarations(entry.value, name=entry.name, pm=pm)
        except Exception as exc:
            info.status, info.error = PluginStatus.FAILED, _describe(exc)
    for info in infos:
        if info.status is not PluginStatus.PENDING:
            continue
        try:
            registry.register(*(i for i in info.items if isinstance(i, OpDef)), source=info.source)
        except Exception as exc:
            info.status, info.error = PluginStatus.FAILED, _describe(exc)
            registry.unregister_source(info.source)
    for info in infos:
        if info.status is not PluginStatus.PENDING:
            continue
        try:
            registry.register(
                *(i for i in info.items if not isinstance(i, OpDef)), source=info.source
            )
            info.status = PluginStatus.LOADED
            info.ops = tuple(sorted(i.name for i in info.items if isinstance(i, OpDef)))
            info.kernels = tuple(i.definition for i in info.items if isinstance(i, KernelSpec))
        except Exception as exc:
            info.status, info.error = PluginStatus.FAILED, _describe(exc)
            registry.unregister_source(info.source)
    for info in infos:
        info.items = []
    return infos


def load_plugins_from(
    paths: Sequence[str], *, registry: Registry, distribution: str | None = None
) -> list[PluginInfo]:
    """Load into ``registry`` the plugins installed in the directories ``paths`` (only
    ``distribution``'s, when given), each isolated as ``load_plugins`` does, whatever the
    environment variables say: what the marketplace's validation does with a wheel
    installed in a folder of its own. The directories must be on ``sys.path``."""
    key = normalize_name(distribution) if distribution is not None else None
    entries = [
        e
        for e in scan(paths, use_cache=False).entries
        if key is None or normalize_name(e.distribution) == key
    ]
    return load_into(registry, sorted(entries, key=lambda e: e.name))


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()
