"""Packages whose public names are imported on first use (PEP 562), so that importing the
package, or one module of it, does not import every module behind its ``__all__``.

Each package writes its public names once, in a map from module to names; ``__all__``, the
lazy ``__getattr__`` and ``__dir__`` all come from that map (tests/test_exports.py checks it
against the names the package imports for type checkers)."""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

__all__ = ["Moved", "all_order", "lazy_exports"]


class Moved(NamedTuple):
    """An old public name that now lives elsewhere: reading it warns (DeprecationWarning)
    that it goes in release ``removal`` and says what to use instead."""

    target: str  # "module:name" (or a name of the same package)
    removal: str  # the release without the old name, e.g. "1.0"


def all_order(name: str) -> tuple[int, str]:
    """ruff's isort-style order for ``__all__`` (RUF022): CONSTANTS, then Classes, then the
    rest, each group by code point (``DType`` before ``Deprecation``)."""
    if len(name) > 1 and name.isupper():
        return 0, name
    return (1 if name[0].isupper() else 2), name


def lazy_exports(
    package: str,
    exports: Mapping[str, Sequence[str]],
    deprecated: Mapping[str, Moved] | None = None,
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package``: ``exports`` maps each
    module to the public names it defines; a name is imported when first read, then kept.
    ``deprecated`` maps old public names to where they went."""
    modules = {name: module for module, names in exports.items() for name in names}
    if len(modules) != sum(map(len, exports.values())):
        raise ValueError(f"{package}: a public name is listed under two modules")
    old_names = dict(deprecated or {})

    def getattr_(name: str) -> Any:
        if name in old_names:
            moved = old_names[name]
            home, _, attr = moved.target.rpartition(":")
            new = f"{home or package}.{attr}"
            warnings.warn(
                f"{package}.{name} is deprecated and goes in opmarket {moved.removal}; use {new}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(home) if home else sys.modules[package], attr)
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def dir_() -> list[str]:
        return sorted({*vars(sys.modules[package]), *modules})

    return sorted(modules, key=all_order), getattr_, dir_
