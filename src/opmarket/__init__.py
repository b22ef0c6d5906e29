"""opmarket: op/kernel plugins, their run time, compatibility checks and marketplace.

Importing opmarket imports nothing heavy and loads no plugin; looking an op up in
``opmarket.ops`` loads the installed plugins that declare it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

__all__ = [
    "device",
    "hookimpl",
    "kernel",
    "load_library",
    "load_plugins",
    "op",
    "ops",
    "register",
]

if TYPE_CHECKING:
    from opmarket.registry._device import device
    from opmarket.registry._namespace import OpsNamespace
    from opmarket.registry._native import load_library
    from opmarket.registry._runtime import load_plugins, register
    from opmarket.sdk import op
    from opmarket.sdk._hookspecs import hookimpl
    from opmarket.sdk._kernel import kernel

    ops: OpsNamespace

# name -> (module, attribute); resolved on first access, then kept in this module.
_LAZY = {
    "device": ("opmarket.registry._device", "device"),
    "hookimpl": ("opmarket.sdk._hookspecs", "hookimpl"),
    "kernel": ("opmarket.sdk._kernel", "kernel"),
    "load_library": ("opmarket.registry._native", "load_library"),
    "load_plugins": ("opmarket.registry._runtime", "load_plugins"),
    "op": ("opmarket.sdk._builder", "op"),
    "register": ("opmarket.registry._runtime", "register"),
}


def __getattr__(name: str) -> Any:
    import importlib  # lazy by design: import opmarket stays light

    if name == "ops":
        # One namespace object for the process; it follows registry swaps by itself.
        from opmarket.registry._runtime import ops_namespace  # lazy

        ns = ops_namespace()
        globals()["ops"] = ns
        return ns
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'opmarket' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), "ops", *_LAZY])
