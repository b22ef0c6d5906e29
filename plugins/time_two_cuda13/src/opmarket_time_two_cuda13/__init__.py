"""TimeTwo's CUDA 13 kernel: the GPU companion of opmarket-time-two.

The base plugin declares ``Opm>TimeTwo`` and its CPU kernels; this distribution registers
the GPU kernel for that op. Its library (``libopm_time_two_cuda13.so``, built by nvcc from
``time_two.cu``) links the CUDA runtime of the ``nvidia-cuda-runtime`` wheel, a dependency.
:func:`register` registers the GPU kernel only where the library loads and its runtime sees
a GPU; elsewhere the plugin loads, registers nothing, and :func:`gpu_status` says why. The kernel's
device entry (``opm_time_two_device``) is what the framework bridges call on their own GPU
tensors.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from opmarket.sdk import hookimpl, kernel
from opmarket.sdk.build import CudaLibrary, device_entry, load_cuda_library

__all__ = ["LIBRARY", "gpu", "gpu_status", "kernels", "register"]

OP = "Opm>TimeTwo"
#: The CUDA library, beside this file.
LIBRARY = "libopm_time_two_cuda13.so"
TYPES = [np.float32, np.float64, np.int32, np.int64]
# TimeTwoDtype in time_two.cu.
_CODES = {np.dtype(t): code for code, t in enumerate(TYPES)}

# The C interface of TimeTwo's library (0, or 1 with a message in the error buffer).
_FUNCTIONS = {
    "opm_time_two": (
        ctypes.c_int,
        [
            ctypes.c_int,  # dtype code
            ctypes.c_void_p,  # input
            ctypes.c_void_p,  # output
            ctypes.c_int64,  # size
            ctypes.c_char_p,  # error message
            ctypes.c_int,  # its capacity
        ],
    )
}


@functools.cache
def gpu() -> CudaLibrary:
    """The CUDA library as loaded here (once): its handle, GPUs seen, and status."""
    return load_cuda_library(
        Path(__file__).with_name(LIBRARY), runtime_major=13, functions=_FUNCTIONS
    )


def gpu_status() -> str:
    """Whether the GPU kernel registers here, and if not, why."""
    return gpu().status


@device_entry("opm_time_two_device", gpu)  # the bridges' door: their GPU buffers and stream
@kernel(OP, device="GPU", constraints={"T": TYPES})
def time_two_gpu(input: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """ExampleFunctor<GPUDevice, T>: copies the input to the GPU, runs, copies back."""
    lib = gpu()
    if not lib.available or lib.handle is None:
        raise RuntimeError(f"TimeTwo's GPU kernel cannot run here: {lib.status}")
    x = np.ascontiguousarray(input)
    out = np.empty_like(x)
    err = ctypes.create_string_buffer(512)
    if lib.handle.opm_time_two(
        _CODES[x.dtype], x.ctypes.data, out.ctypes.data, x.size, err, len(err)
    ):
        raise RuntimeError(f"TimeTwo on the GPU failed: {err.value.decode(errors='replace')}")
    return out


def kernels() -> list[Any]:
    """The GPU kernels this companion declares (registered only where they can run)."""
    return [time_two_gpu]


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """TimeTwo's GPU kernel, where the CUDA runtime loads and sees a GPU."""
    if gpu().available:
        register(*kernels())
