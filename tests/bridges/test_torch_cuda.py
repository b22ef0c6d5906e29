"""opmarket.torch's CUDA path on this machine's torch: where torch has no CUDA device (the CPU
build the tests install), no CUDA kernel is registered and ``native_reason`` says why; the
shim, built with its CUDA code in, still loads and binds no CUDA function, and refuses a
CUDA registration in C. The plan a CUDA registration takes (each dtype's GPU kernel and its
device entry) is checked with the GPU companion's real kernel, registered by hand here since
it registers itself only where a GPU is visible. What needs a GPU runs in scripts/gpu-check.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import opmarket  # noqa: E402
import opmarket.torch as ot  # noqa: E402
from opmarket._bridge import bridge_op  # noqa: E402
from opmarket.registry import isolated_registry  # noqa: E402
from opmarket.sdk import kernel  # noqa: E402
from opmarket.torch import _native  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402
from tests.test_gpu_companions import needs_companions  # noqa: E402

pytestmark = needs_first_party
no_cuda = pytest.mark.skipif(
    torch.cuda.is_available(), reason="torch has a CUDA device: scripts/gpu-check runs the path"
)
CPU_BUILD = f"no CUDA device in torch (torch {torch.__version__}, a CPU build)"
#: What a build says without a device: a CPU build, or a CUDA build on a machine with no GPU
#: (torch 2.14+cu130 in scripts/check-frameworks).
NO_DEVICE = (
    f"no CUDA device in torch (torch {torch.__version__}, CUDA {torch.version.cuda} build)"
    if torch.version.cuda
    else CPU_BUILD
)


@no_cuda
@pytest.mark.parametrize("device", ["CUDA", "GPU", "cuda"])
def test_without_a_cuda_device_the_cuda_path_is_python_and_says_why(device: str) -> None:
    for name in ("Opm>TimeTwo", "Opm>ZeroOut"):
        assert ot.native_reason(name, device=device) == NO_DEVICE
        assert ot.native_path(name, device=device) == "python"
        # the CPU path is unchanged beside it
        assert ot.native_reason(name) == ""
        assert ot.native_path(name, device="CPU") == "native"
    assert ot.native_path("Opm>TimeTwo", device="TPU") == "python"
    assert ot.native_reason("Opm>TimeTwo", device="TPU") == (
        "no native kernels on device 'TPU' (native: CPU, CUDA)"
    )


@no_cuda
def test_the_shim_binds_torch_s_cuda_functions_only_where_the_build_has_them() -> None:
    """A CPU build of torch: the shim loads, finds no CUDA library and refuses a CUDA
    registration with that reason. A CUDA build without a GPU (torch 2.14+cu130 in
    scripts/check-frameworks): it binds every CUDA function and torch takes the CUDA
    dispatch-key kernel, which no call reaches without a device."""
    import torch

    lib = _native.shim()
    assert lib is not None, _native._state.get("why")
    lib.opm_torch_bind_cuda.restype = ctypes.c_int32
    missing = ctypes.create_string_buffer(256)
    bound = lib.opm_torch_bind_cuda(missing, ctypes.c_uint64(len(missing)))
    # A registration through the real plan reaches the shim's check, or torch.
    with isolated_registry(plugins=["time_two"]):
        op = bridge_op("Opm>TimeTwo")
        plan = {"sources": [], "dtype_args": [], "rows": [([1], 1)]}
        why = _native._register(op, "time_two_probe", plan, "opm_torch_register_cuda")
    if torch.version.cuda is None:
        assert bound == -1
        assert why == "torch has no CUDA library loaded (a CPU build)"
    else:
        assert (bound, missing.value) == (0, b"")
        assert why == ""


@needs_companions
def test_a_cuda_plan_takes_each_dtype_s_device_entry() -> None:
    import opmarket_median_pool_cuda13
    import opmarket_time_two_cuda13

    with isolated_registry(plugins=["time_two", "median_pool"]):
        op = bridge_op("Opm>TimeTwo")
        assert _native._plan(op, "", "GPU")[0] == (
            "it has no GPU kernel (a GPU companion registers one where a GPU is visible)"
        )
        # the companions' kernels, as they register where a GPU is visible
        opmarket.register(*opmarket_time_two_cuda13.kernels())
        opmarket.register(*opmarket_median_pool_cuda13.kernels())
        why, plan = _native._plan(op, "", "GPU")
        assert why == ""
        entry = opmarket_time_two_cuda13.gpu().handle.opm_time_two_device
        address = ctypes.cast(entry, ctypes.c_void_p).value
        # float, double, int32, int64: one row each, all the one entry
        assert sorted(plan["rows"]) == [([d], address) for d in (1, 2, 3, 9)]
        pool = bridge_op("Opm>MedianPool")
        why, plan = _native._plan(pool, "", "GPU")
        assert why == ""
        assert [name for name, _, _ in plan["sources"]] == ["T", "ksize", "strides", "padding"]
        assert {a for _, a in plan["rows"]} == {
            ctypes.cast(
                opmarket_median_pool_cuda13.gpu().handle.opm_median_pool_device, ctypes.c_void_p
            ).value
        }


def test_a_gpu_kernel_without_a_device_entry_stays_on_python_and_says_why() -> None:
    with isolated_registry(plugins=["time_two"]):

        @kernel("Opm>TimeTwo", device="GPU", constraints={"T": [np.float32]})
        def host_only(input: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
            return input * 2

        opmarket.register(host_only)
        why, _ = _native._plan(bridge_op("Opm>TimeTwo"), "", "GPU")
    assert why.startswith("its GPU kernel ") and "host_only names no device entry" in why
