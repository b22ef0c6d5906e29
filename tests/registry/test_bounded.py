"""The bounded-cache policy: emptied when a new key finds it full, and what uses it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import Registry
from opmarket.registry._bounded import BoundedCache
from opmarket.registry._dispatch import _MAX_ENTRIES
from opmarket.sdk import Kernel, kernel, op


def test_a_new_key_in_a_full_cache_empties_it_first() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 3)  # a key it holds: replaced, nothing dropped
    assert cache.data == {"a": 3, "b": 2}
    lookups = cache.data  # what a generated wrapper holds
    cache.put("c", 4)
    assert cache.data == {"c": 4} and cache.data is lookups
    assert cache.get("c") == 4 and cache.get("a") is None and len(cache) == 1


def test_on_full_decides_how_room_is_made() -> None:
    dropped: list[dict[str, int]] = []
    cache: BoundedCache[str, int] = BoundedCache(1)

    def close_all() -> None:
        dropped.append(dict(cache.data))
        cache.clear()

    cache.on_full = close_all
    cache.put("a", 1)
    cache.put("b", 2)
    assert dropped == [{"a": 1}] and cache.data == {"b": 2}
    cache.on_full = lambda: None  # leaves no room: a bug, not a cache that grows forever
    with pytest.raises(RuntimeError, match="on_full left it full"):
        cache.put("c", 3)
    with pytest.raises(ValueError, match="at least one entry, not 0"):
        BoundedCache(0)


def test_dispatch_closes_what_it_drops_and_stays_bounded(registry: Registry) -> None:
    opened: list[float] = []
    closed: list[float] = []
    scale = op("Opm>Scale").input("x: float").output("y: float").attr("factor: float").build()

    @kernel("Opm>Scale")
    class ScaleKernel(Kernel):
        def __init__(self, attrs: Any, options: bytes = b"") -> None:
            super().__init__(attrs, options)
            opened.append(attrs["factor"])

        def compute(self, x: Any) -> Any:
            return x * np.float32(self.attrs["factor"])

        def close(self) -> None:
            closed.append(self.attrs["factor"])

    registry.register(scale, ScaleKernel)
    x = np.ones(2, np.float32)
    for i in range(_MAX_ENTRIES + 10):
        assert opmarket.ops.scale(x, factor=float(i)).tolist() == [i, i]
    dispatcher = registry.dispatcher("Opm>Scale")
    assert len(dispatcher.graph_cache) == 10 and len(dispatcher.cache) == 10
    # The first full round was closed, each kernel once; the ten after it are open.
    assert sorted(closed) == [float(i) for i in range(_MAX_ENTRIES)]
    assert len(opened) == _MAX_ENTRIES + 10
