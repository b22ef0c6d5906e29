"""The one bounded-cache policy of opmarket's run time: a dict emptied when it is full.

What these caches hold (prepared calls, parsed schema arguments, framework runners) is cheap
to make again and usually few; a program that makes thousands is churning through attr
values, where no eviction order would keep the right ones. So the policy is the simplest
that bounds memory: when a new key finds the cache full, everything goes. Lookups read
:attr:`BoundedCache.data`, a plain dict, so a hit costs one dict lookup (the generated op
wrappers look up there directly); ``functools.lru_cache`` caches a function's results, not
entries stored on a condition and closed on eviction, and ``cachetools``' caches pay a
Python-level call on every hit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

__all__ = ["BoundedCache"]

K = TypeVar("K")
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """At most ``maxsize`` entries in :attr:`data`; storing a new key in a full cache first
    calls ``on_full`` (default: empty it), which must leave room, e.g. by emptying it after
    closing what it held."""

    __slots__ = ("data", "maxsize", "on_full")

    def __init__(self, maxsize: int, on_full: Callable[[], None] | None = None) -> None:
        if maxsize < 1:
            raise ValueError(f"a bounded cache holds at least one entry, not {maxsize}")
        self.data: dict[K, V] = {}
        self.maxsize = maxsize
        self.on_full = on_full

    def __len__(self) -> int:
        return len(self.data)

    def get(self, key: K) -> V | None:
        """The entry for ``key``, or None."""
        return self.data.get(key)

    def put(self, key: K, value: V) -> None:
        """Store ``value`` under ``key``, making room first when a new key finds it full."""
        data = self.data
        if len(data) >= self.maxsize and key not in data:
            if self.on_full is None:
                data.clear()
            else:
                self.on_full()
                if len(data) >= self.maxsize:
                    raise RuntimeError("the bounded cache's on_full left it full")
        data[key] = value

    def clear(self) -> None:
        """Drop every entry (the dict stays the same object: lookups hold it)."""
        self.data.clear()
