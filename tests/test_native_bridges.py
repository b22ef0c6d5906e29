"""The first-party C++ kernels (opmarket/kernel.h: time_two, zero_out, median_pool) in
TensorFlow and JAX after the header gave them C-ABI entries: time_two and zero_out take the
native path (XLA FFI, TensorFlow's C kernel API) and agree with opmarket.ops; median_pool,
whose list attrs today's bridges cannot hand to a C kernel, still runs, through Python."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import get_registry
from opmarket.registry._capi_bridge import native_door

jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")
oj = pytest.importorskip("opmarket.jax")
otf = pytest.importorskip("opmarket.tensorflow")

POOL: dict[str, Any] = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}


@pytest.fixture(autouse=True)
def _plugins() -> None:
    reg = get_registry()
    for op in ("Opm>TimeTwo", "Opm>ZeroOut", "Opm>MedianPool"):
        if reg.op_def(op) is None:
            pytest.skip(f"{op}'s plugin is not installed (scripts/setup installs it)")


def test_jax_takes_the_ffi_path_for_time_two_and_zero_out() -> None:
    assert oj.native_path("Opm>TimeTwo", T=np.float32) == "ffi"
    assert oj.native_path("Opm>TimeTwo", T=np.int64) == "ffi"
    assert oj.native_path("Opm>ZeroOut", T=np.int32) == "ffi"  # the C++ kernel, no label
    assert oj.native_path("Opm>MedianPool", T=np.float32, **POOL) == "callback"


def test_jax_results_agree_with_opmarket_ops() -> None:
    x = np.linspace(-4, 4, 8, dtype=np.float32)
    np.testing.assert_array_equal(jax.jit(oj.ops.time_two)(x), opmarket.ops.time_two(x))
    i = np.array([2**31 - 1, -5, 7], np.int32)  # wraps around, as numpy's 2 * x does
    np.testing.assert_array_equal(jax.jit(oj.ops.time_two)(i), opmarket.ops.time_two(i))
    z = np.arange(1, 9, dtype=np.int32)
    zero = jax.jit(lambda v: oj.ops.zero_out(v, preserve_index=5))
    np.testing.assert_array_equal(zero(z), opmarket.ops.zero_out(z, preserve_index=5))
    img = np.random.default_rng(1).random((1, 32, 24, 1), dtype=np.float32)
    pool = jax.jit(lambda v: oj.ops.median_pool(v, **POOL))
    np.testing.assert_array_equal(pool(img), opmarket.ops.median_pool(img, **POOL))


def _tf_priorities(op: str) -> set[int]:
    from tensorflow.python.framework import kernels

    found = kernels.get_registered_kernels_for_op(op).kernel
    return {k.priority for k in found if not k.label}


def test_tensorflow_registers_the_c_entries_natively() -> None:
    from opmarket.tensorflow._plumbing import NATIVE_PRIORITY_BOOST

    # A native kernel's priority carries the boost; a Python one's does not.
    assert _tf_priorities("Opm>TimeTwo") == {NATIVE_PRIORITY_BOOST}
    assert _tf_priorities("Opm>ZeroOut") == {NATIVE_PRIORITY_BOOST}
    assert _tf_priorities("Opm>MedianPool") == {0}


def test_tensorflow_results_agree_with_opmarket_ops() -> None:
    x = np.linspace(-4, 4, 8, dtype=np.float32)
    np.testing.assert_array_equal(otf.ops.time_two(x), opmarket.ops.time_two(x))
    np.testing.assert_array_equal(tf.function(otf.ops.time_two)(x), opmarket.ops.time_two(x))
    z = np.arange(1, 9, dtype=np.int32)
    np.testing.assert_array_equal(
        otf.ops.zero_out(z, preserve_index=2), opmarket.ops.zero_out(z, preserve_index=2)
    )
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="out of range"):
        otf.ops.zero_out(z, preserve_index=20)
    img = np.random.default_rng(2).random((1, 20, 17, 1), dtype=np.float32)
    np.testing.assert_array_equal(
        otf.ops.median_pool(img, **POOL), opmarket.ops.median_pool(img, **POOL)
    )


def test_each_kernel_says_which_door_and_why() -> None:
    reg = get_registry()
    doors = {
        (k.op, k.label): native_door(k)
        for op in ("Opm>TimeTwo", "Opm>MedianPool")
        for k in reg.kernels(op)
        if k.device == "CPU"
    }
    assert all(d.native for (op, _), d in doors.items() if op == "Opm>TimeTwo")
    assert all(
        not d.native and "list attrs" in d.reason
        for (op, _), d in doors.items()
        if op == "Opm>MedianPool"
    )
