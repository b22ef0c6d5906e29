"""The installed ZeroOut plugin: its C++ kernels against the reference, checks, gradient."""

from __future__ import annotations

import inspect
from collections.abc import Iterator

import numpy as np
import pytest

import opmarket
from opmarket.registry import (
    Registry,
    check_conformance,
    check_gradient,
    isolated_registry,
    load_library,
)
from opmarket.sdk import InvalidArgumentError


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["zero_out"]) as reg:
        yield reg


def test_done_when_zero_out_runs_through_the_cpp_kernel(registry: Registry) -> None:
    out = opmarket.ops.zero_out(np.array([5, 4, 3], np.int32))
    assert out.dtype == np.int32
    assert out.tolist() == [5, 0, 0]
    kernels = registry.kernels("Opm>ZeroOut")
    assert sorted(k.constraints[0][1][0].spec_name for k in kernels) == ["double", "float", "int32"]
    for k in kernels:
        # Compiled, not Python: the pybind11 function, and a C-ABI entry of the same name.
        assert inspect.isbuiltin(k.impl.fn)  # type: ignore[attr-defined]
        assert k.impl.capi_kernel == k.impl.__name__  # type: ignore[attr-defined]
        assert k.impl.__module__ == "opmarket_zero_out._zero_out"
    assert registry.source("Opm>ZeroOut") == "plugin zero_out (opmarket-zero-out 0.1.0)"


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
def test_preserve_index(registry: Registry, dtype: type) -> None:
    x: np.ndarray = np.array([1, 2, 3, 4], dtype)
    out = opmarket.ops.zero_out(x, preserve_index=2)
    assert out.dtype == dtype
    assert out.tolist() == [0, 0, 3, 0]


def test_every_kernel_matches_the_reference(registry: Registry) -> None:
    report = check_conformance("Opm>ZeroOut", trials=10)
    report.raise_for_failures()
    assert {r.kernel for r in report.results} >= {
        "opmarket_zero_out._zero_out.zero_out_float",
        "opmarket_zero_out._zero_out.zero_out_int32",
    }


@pytest.mark.parametrize(
    ("x", "attrs", "message"),
    [
        (np.ones((2, 2), np.float32), {}, "Shape must be rank 1 but is rank 2"),
        (
            np.ones(3, np.int32),
            {"preserve_index": 3},
            "preserve_index out of range: 3 for a vector of 3 elements",
        ),
        (np.ones(3, np.int32), {"preserve_index": -1}, "preserve_index"),
        (np.ones(3, np.int64), {}, "int64"),
    ],
)
def test_errors_are_invalid_argument(
    registry: Registry, x: np.ndarray, attrs: dict[str, int], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        opmarket.ops.zero_out(x, **attrs)


def test_the_cpp_checks_themselves(registry: Registry) -> None:
    from opmarket_zero_out import _zero_out

    with pytest.raises(
        InvalidArgumentError, match=r"ZeroOut expects a 1-D vector, got shape \[2,2\]"
    ):
        _zero_out.zero_out_float(np.ones((2, 2), np.float32))
    with pytest.raises(InvalidArgumentError, match="Need preserve_index >= 0, got -1"):
        _zero_out.zero_out_int32(np.ones(3, np.int32), preserve_index=-1)


def test_the_gradient_is_one_hot(registry: Registry) -> None:
    x = np.array([1.0, -2.0, 3.0, 0.5])
    assert check_gradient("Opm>ZeroOut", [x], {"preserve_index": 1}) < 1e-6
    assert check_gradient("Opm>ZeroOut", [x], {"preserve_index": 3}) < 1e-6


def test_load_library_as_tf_load_op_library() -> None:
    from opmarket_zero_out import _zero_out

    with isolated_registry() as reg:
        lib = load_library(_zero_out.__file__)
        assert "Opm>ZeroOut" in reg
        assert lib.zero_out(np.array([[1, 2], [3, 4]], np.int32).ravel()).tolist() == [1, 0, 0, 0]
