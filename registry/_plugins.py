"""Plugin discovery: entry points in the group ``opmarket``, loaded once, each isolated.

``OPMARKET_DISABLE_PLUGINS=1`` turns discovery off; ``OPMARKET_PLUGINS=a,b`` loads only the
named entry points. A plugin that fails to import or register is recorded with its
distribution, version and error, and the others still load.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy
from opmarket.registry._registry import Registry, flatten
from opmarket.sdk import OpDef, _hookspecs

__all__ = ["PluginInfo", "discover", "load_into"]


@dataclass(slots=True)
class PluginInfo:
    """One entry point of the group ``opmarket`` and what became of it."""

    name: str
    distribution: str = ""
    version: str = ""
    module: str = ""
    status: str = "pending"  # loaded, failed, skipped
    error: str = ""
    ops: tuple[str, ...] = ()
    items: list[Any] = field(default_factory=list, repr=False)

    @property
    def source(self) -> str:
        dist = f" ({self.distribution} {self.version})" if self.distribution else ""
        return f"plugin {self.name}{dist}"


def plugins_disabled() -> bool:
    return os.environ.get("OPMARKET_DISABLE_PLUGINS", "").strip().lower() in ("1", "true", "yes")


def discover(names: list[str] | None = None) -> list[EntryPoint]:
    """The entry points to load, after ``OPMARKET_DISABLE_PLUGINS`` and ``OPMARKET_PLUGINS``
    (``names``, when given, chooses the entry points instead of the environment)."""
    if names is None and plugins_disabled():
        return []
    eps = list(entry_points(group=_hookspecs.PROJECT))
    only = ",".join(names) if names is not None else os.environ.get("OPMARKET_PLUGINS", "")
    if only.strip():
        wanted = {n.strip() for n in only.split(",") if n.strip()}
        eps = [ep for ep in eps if ep.name in wanted]
    return sorted(eps, key=lambda ep: ep.name)


def plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(_hookspecs.PROJECT)
    pm.add_hookspecs(_hookspecs)
    return pm


def _collect(hook: Callable[..., Any]) -> list[Any]:
    items: list[Any] = []
    hook(register=lambda *args: items.extend(args))
    return items


def load_into(registry: Registry, eps: list[EntryPoint]) -> list[PluginInfo]:
    """Import each plugin, collect what it registers, register ops first (so kernels may
    name another plugin's op), then the rest; a failing plugin is rolled back."""
    pm = plugin_manager()
    infos: list[PluginInfo] = []
    for ep in eps:
        dist = ep.dist
        info = PluginInfo(ep.name, dist.metadata["Name"] if dist else "",
                          dist.version if dist else "", ep.value)
        infos.append(info)
        try:
            module = ep.load()
            pm.register(module, name=ep.name)
            impls = [i for i in pm.hook.register.get_hookimpls() if i.plugin_name == ep.name]
            for impl in impls:
                info.items.extend(flatten(_collect(impl.function)))
        except Exception as exc:
            info.status, info.error = "failed", _describe(exc)
    for info in infos:
        if info.status != "pending":
            continue
        try:
            registry.register(*(i for i in info.items if isinstance(i, OpDef)), source=info.source)
        except Exception as exc:
            info.status, info.error = "failed", _describe(exc)
            registry.unregister_source(info.source)
    for info in infos:
        if info.status != "pending":
            continue
        try:
            registry.register(*(i for i in info.items if not isinstance(i, OpDef)),
                              source=info.source)
            info.status = "loaded"
            info.ops = tuple(sorted(i.name for i in info.items if isinstance(i, OpDef)))
        except Exception as exc:
            info.status, info.error = "failed", _describe(exc)
            registry.unregister_source(info.source)
    for info in infos:
        info.items = []
    return infos


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text
