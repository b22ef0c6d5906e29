"""The first-party calls the bridges must match ``opmarket.ops`` on. The tests that need the
first-party plugins say so with ``tests.first_party.needs_first_party`` (they skip, naming
the missing plugins, where scripts/setup has not installed them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

_Array = np.ndarray[Any, Any]


@dataclass(frozen=True)
class Case:
    """One call: the op's full name, numpy inputs, attrs (a dtype attr as a numpy dtype),
    and the kernel label asked for."""

    id: str
    op: str
    inputs: Callable[[], list[_Array]]
    attrs: dict[str, Any] = field(default_factory=dict)
    label: str = ""


def _image() -> list[_Array]:
    rng = np.random.default_rng(0)
    return [rng.integers(-20, 20, (2, 7, 9, 3)).astype(np.float32) / 4]


CASES = [
    Case(
        "zero_out",
        "Opm>ZeroOut",
        lambda: [np.array([5, 4, 3, 2], np.float32)],
        {"preserve_index": 2},
    ),
    Case(
        "zero_out_c_abi",
        "Opm>ZeroOut",
        lambda: [np.array([5, 4, 3, 2], np.float32)],
        {"preserve_index": 1},
        label="c_abi",
    ),
    Case(
        "zero_out_c_abi_int32",
        "Opm>ZeroOut",
        lambda: [np.array([7, 8, 9], np.int32)],
        {},
        label="c_abi",
    ),
    Case("time_two", "Opm>TimeTwo", lambda: [np.arange(-3, 9, dtype=np.float32).reshape(3, 4)]),
    Case("atan", "Opm>Atan", lambda: [np.linspace(-4, 4, 9, dtype=np.float32)]),
    Case(
        "median_pool",
        "Opm>MedianPool",
        _image,
        {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"},
    ),
    Case(
        "bitcast_same_size",
        "Opm>Bitcast",
        lambda: [np.array([1.5, -2.0], np.float32)],
        {"type": np.dtype(np.int32)},
    ),
    Case(
        "bitcast_smaller",
        "Opm>Bitcast",
        lambda: [np.array([1.5, -2.0], np.float32)],
        {"type": np.dtype(np.uint8)},
    ),
    Case(
        "do_custom_call",
        "Opm>DoCustomCall",
        lambda: [np.arange(1, 5, dtype=np.float32), np.linspace(0, 1, 11, dtype=np.float32)],
    ),
]


def expected(case: Case) -> _Array:
    """What ``opmarket.ops`` gives (the labelled kernel through the registry's dispatcher)."""
    from opmarket.registry import get_registry

    return (
        get_registry()
        .dispatcher(case.op)
        .call(
            case.inputs(),
            case.attrs,  # type: ignore[no-any-return]
            label=case.label,
        )
    )
