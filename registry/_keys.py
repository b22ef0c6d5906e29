"""Cache keys of prepared calls: attr values with their types."""

from __future__ import annotations

from typing import Any

__all__ = ["typed"]


def typed(value: Any) -> Any:
    """``value`` with its type, and each item's for a list or tuple: a cache key under which
    ``1``, ``1.0`` and ``True`` differ, as their checks do, and a list can be hashed."""
    cls = value.__class__
    if cls is list or cls is tuple:
        items = tuple(value)
        types = tuple(map(type, items))
        if list in types or tuple in types:
            return (cls, *map(typed, items))
        return (cls, items, types)
    return (cls, value)
