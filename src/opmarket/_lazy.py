"""Packages whose public names are imported on first use (PEP 562), so that importing the
package, or one module of it, does not import every module behind its ``__all__``."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, modules: Mapping[str, str], deprecated: Mapping[str, str] | None = None
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``modules`` maps each public name to
    the module that defines it; a name is imported when first read, then kept. ``deprecated``
    maps old public names to their new ones: reading one warns (DeprecationWarning)."""
    old_names = dict(deprecated or {})

    def getattr_(name: str) -> Any:
        if name in old_names:
            new = old_names[name]
            warnings.warn(
                f"{package}.{name} is deprecated; use {package}.{new}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(sys.modules[package], new)
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *modules})

    return getattr_, dir_
