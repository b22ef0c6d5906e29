"""``opmarket.registry.prepare``: the one prepared-call path that ``opmarket.ops`` and every
framework bridge share (registry/_prepare.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import KernelError, KernelNotFoundError, Registry, prepare
from opmarket.sdk import DType, InvalidArgumentError, Kernel, OpDef, kernel, op


def _scale(registry: Registry, events: list[str]) -> None:
    scale = op("Opm>Scale").input("x: float").output("y: float").attr("factor: float").build()

    @kernel("Opm>Scale")
    class ScaleKernel(Kernel):
        def __init__(self, attrs: Any, options: bytes = b"") -> None:
            super().__init__(attrs, options)
            events.append(f"init {attrs['factor']}")

        def prepare(self, x: Any) -> None:
            events.append(f"prepare {x.shape}")

        def compute(self, x: Any) -> Any:
            return x * np.float32(self.attrs["factor"])

        def close(self) -> None:
            events.append("close")

    registry.register(scale, ScaleKernel)


def test_a_prepared_call_shares_its_lifecycle_kernel_with_opmarket_ops(
    registry: Registry,
) -> None:
    events: list[str] = []
    _scale(registry, events)
    x = np.ones(3, np.float32)
    assert opmarket.ops.scale(x, factor=2.0).tolist() == [2, 2, 2]
    call = prepare("Opm>Scale", {"factor": 2.0}, "CPU")
    assert call(x).tolist() == [2, 2, 2]
    assert call(np.ones(4, np.float32)).tolist() == [2, 2, 2, 2]
    assert call(np.ones(4, np.float32)).tolist() == [2, 2, 2, 2]
    # one kernel, prepared once per new shape, whoever calls it
    assert events == ["init 2.0", "prepare (3,)", "prepare (4,)"]
    assert prepare(registry.op_def("Opm>Scale"), {"factor": 2.0}, "CPU")(x).tolist() == [2] * 3
    assert events[1:].count("init 2.0") == 0


def test_a_prepared_call_returns_what_opmarket_ops_returns(zero_out: OpDef) -> None:
    x = np.array([5, 4, 3], np.int32)
    call = prepare("Opm>ZeroOut", {"T": DType.INT32, "preserve_index": 1})
    assert call(x).tolist() == opmarket.ops.zero_out(x, preserve_index=1).tolist()
    assert call.kernel.op == "Opm>ZeroOut"


def test_a_prepared_call_checks_the_kernel_output(registry: Registry) -> None:
    bad = op("Opm>Bad").input("x: float").output("y: float").build()
    registry.register(bad, kernel("Opm>Bad")(lambda x: x.astype(np.float64)))
    with pytest.raises(KernelError, match="returned float64 for output 'y'"):
        prepare("Opm>Bad", {}, "CPU")(np.ones(2, np.float32))


def test_missing_attrs_are_named(zero_out: OpDef) -> None:
    with pytest.raises(InvalidArgumentError, match="attrs T are missing"):
        prepare("Opm>ZeroOut", {"preserve_index": 0})


def test_no_kernel_for_the_device_lists_the_registered_ones(zero_out: OpDef) -> None:
    with pytest.raises(KernelNotFoundError, match="no kernel for Opm>ZeroOut on GPU"):
        prepare("Opm>ZeroOut", {"T": DType.INT32, "preserve_index": 0}, "GPU")


def test_attrs_nothing_makes_hashable_leave_no_kernel_open(registry: Registry) -> None:
    events: list[str] = []
    scale = op("Opm>Scale").input("x: float").output("y: float").attr("factor: float").build()
    unhashable = op("Opm>Odd").input("x: float").output("y: float").attr("t: tensor").build()

    @kernel("Opm>Odd")
    class OddKernel(Kernel):
        def __init__(self, attrs: Any, options: bytes = b"") -> None:
            super().__init__(attrs, options)
            events.append("init")

        def compute(self, x: Any) -> Any:
            events.append("compute")
            return x

        def close(self) -> None:
            events.append("close")

    registry.register(scale)
    registry.register(unhashable, OddKernel)
    call = prepare("Opm>Odd", {"t": np.zeros(2)}, "CPU")
    assert call(np.ones(2, np.float32)).tolist() == [1, 1]
    # every kernel made is closed: the one made at prepare, and the one each call makes
    assert events == ["init", "close", "init", "compute", "close"]
