"""opmarket.jax's CUDA path on this machine's jaxlib: without a CUDA platform (the CPU jaxlib
the tests install) the GPU path is a host callback and ``native_reason`` says why; the FFI
handler library, built with its CUDA handler in, still loads and serves the CPU target. A
GPU companion's kernel (registered by hand: it registers itself only where a GPU is visible)
maps to its device entry as the ``opmarket_cuda`` call. What needs a GPU runs in
scripts/gpu-check."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import opmarket  # noqa: E402
import opmarket.jax as oj  # noqa: E402
from opmarket._bridge import bridge_op  # noqa: E402
from opmarket.jax import _ffi  # noqa: E402
from opmarket.registry import isolated_registry  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402
from tests.test_gpu_companions import needs_companions  # noqa: E402


def _has_cuda() -> bool:
    try:
        jax.devices("cuda")
    except RuntimeError:
        return False
    return True


pytestmark = [
    needs_first_party,
    pytest.mark.skipif(_has_cuda(), reason="JAX has CUDA: scripts/gpu-check runs the path"),
]


@pytest.mark.parametrize("device", ["GPU", "CUDA"])
def test_without_a_cuda_platform_the_gpu_path_is_a_callback_and_says_why(device: str) -> None:
    why = oj.native_reason("Opm>TimeTwo", device=device, T=np.float32)
    assert why.startswith("JAX has no CUDA platform here (Unknown backend cuda"), why
    assert oj.native_path("Opm>TimeTwo", device=device, T=np.float32) == "callback"
    # the CPU path beside it is unchanged, through the same handler library
    assert oj.native_reason("Opm>TimeTwo", T=np.float32) == ""
    assert oj.native_path("Opm>TimeTwo", T=np.float32) == "ffi"
    x = np.arange(6, dtype=np.float32)
    np.testing.assert_array_equal(jax.jit(oj.ops.time_two)(x), x * 2)
    lib = _ffi.library()
    assert lib is not None and hasattr(lib, "opm_jax_cuda_call")


def test_without_a_cuda_platform_the_gpu_reason_needs_no_attrs() -> None:
    # MedianPool's ksize has no default: the attrs cannot be bound, and need not be, to say
    # that JAX has no CUDA platform (opmarket doctor asks with the type attrs only).
    for attrs in ({}, {"T": np.float32}):
        why = oj.native_reason("Opm>MedianPool", device="GPU", **attrs)
        assert why.startswith("JAX has no CUDA platform here (Unknown backend cuda"), why
        assert oj.native_path("Opm>MedianPool", device="GPU", **attrs) == "callback"


def test_a_device_the_bridge_has_no_native_path_for_says_so() -> None:
    assert oj.native_reason("Opm>TimeTwo", device="TPU", T=np.float32) == (
        "no native kernels on device 'TPU' (native: CPU, GPU)"
    )


@needs_companions
def test_a_gpu_kernel_s_call_is_its_device_entry_on_the_cuda_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import opmarket_median_pool_cuda13

    with isolated_registry(plugins=["median_pool"]):
        op = bridge_op("Opm>MedianPool")
        pool = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}
        bound = op.bind([np.dtype(np.float32)], pool)
        # CUDA is what this machine lacks: past that check, the mapping is what it would be
        monkeypatch.setitem(_ffi._state, "cuda", "")
        assert _ffi._cuda_kernel(op, bound, "") is None
        assert _ffi.native_reason(op, bound, "", "GPU") == (
            "it has no GPU kernel (a GPU companion registers one where a GPU is visible)"
        )
        opmarket.register(*opmarket_median_pool_cuda13.kernels())
        native = _ffi._cuda_kernel(op, bound, "")
    entry = opmarket_median_pool_cuda13.gpu().handle.opm_median_pool_device
    assert native.target == "opmarket_cuda"
    assert native.handle == ctypes.cast(entry, ctypes.c_void_p).value
    names = dict(native.attributes)
    assert list(names["ksize"]) == [1, 3, 3, 1] and names["padding"] == "SAME"
