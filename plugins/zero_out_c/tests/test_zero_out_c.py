"""ZeroOut's C-ABI kernel (the C++ layer over the C API) agrees with its pybind11 kernel."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import opmarket
from opmarket.registry import Registry, check_conformance, isolated_registry
from opmarket.registry._capi import CAbiKernel
from opmarket.sdk import InvalidArgumentError


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["zero_out", "zero_out_c"]) as reg:
        yield reg


def test_the_same_op_has_a_pybind11_and_a_c_abi_kernel(registry: Registry) -> None:
    kernels = registry.kernels("Opm>ZeroOut")
    c_abi = [k for k in kernels if k.label == "c_abi"]
    assert len(kernels) == 6 and len(c_abi) == 3
    assert all(isinstance(k.impl, type) and issubclass(k.impl, CAbiKernel) for k in c_abi)
    # Unlabelled calls keep the pybind11 kernel.
    assert opmarket.ops.zero_out(np.array([5, 4, 3], np.int32)).tolist() == [5, 0, 0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32])
@pytest.mark.parametrize("index", [0, 3, 6])
def test_both_kernels_agree(registry: Registry, dtype: type, index: int) -> None:
    x = (np.random.default_rng(index).standard_normal(7) * 100).astype(dtype)
    d = registry.dispatcher("Opm>ZeroOut")
    cpp = d.call([x], {"preserve_index": index})
    c_abi = d.call([x], {"preserve_index": index}, label="c_abi")
    assert c_abi.dtype == cpp.dtype and c_abi.tobytes() == cpp.tobytes()
    report = check_conformance("Opm>ZeroOut", trials=3)
    report.raise_for_failures()
    assert {r.kernel for r in report.results} >= {
        f"libopm_zero_out_c.so.ZeroOutOp<{t}>" for t in ("float", "double", "int32")
    }


def test_both_kernels_refuse_the_same_inputs(registry: Registry) -> None:
    d = registry.dispatcher("Opm>ZeroOut")
    x = np.array([1.0, 2.0], np.float32)
    for label in ("", "c_abi"):
        with pytest.raises(InvalidArgumentError, match="preserve_index out of range: 2"):
            d.call([x], {"preserve_index": 2}, label=label)
        with pytest.raises(InvalidArgumentError, match="Shape must be rank 1"):
            d.call([x.reshape(1, 2)], {"preserve_index": 0}, label=label)
