"""MedianPool's CUDA 13 kernel: the GPU companion of opmarket-median-pool.

The base plugin declares ``Opm>MedianPool`` and its CPU kernels; this distribution registers
a GPU kernel for that op: one CUDA thread per output element, each selecting its window's
median (``median_pool.cu``, built by nvcc into ``libopm_median_pool_cuda13.so``, which links
the CUDA runtime of the ``nvidia-cuda-runtime`` wheel). :func:`register` registers it only
where the library loads and its runtime sees a GPU; :func:`gpu_status` says why not. The
kernel's device entry (``opm_median_pool_device``) is what the framework bridges call on their
own GPU tensors.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from opmarket_median_pool import geometry  # the base plugin's checks and window numbers

from opmarket.sdk import hookimpl, kernel
from opmarket.sdk.build import CudaLibrary, device_entry, load_cuda_library

__all__ = ["LIBRARY", "geometry", "gpu", "gpu_status", "kernels", "register"]

OP = "Opm>MedianPool"
#: The CUDA library, beside this file.
LIBRARY = "libopm_median_pool_cuda13.so"
# MedianPoolDtype in median_pool.cu.
_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}

# The C interface of MedianPool's library (0, or 1 with a message in the error buffer).
_FUNCTIONS = {
    "opm_median_pool": (
        ctypes.c_int,
        [
            ctypes.c_int,  # dtype code
            ctypes.c_void_p,  # input
            ctypes.c_void_p,  # output
            ctypes.POINTER(ctypes.c_int64),  # the 12 numbers of geometry()
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


@device_entry("opm_median_pool_device", gpu)  # the bridges' door: their GPU buffers and stream
@kernel(OP, device="GPU", constraints={"T": [np.float32, np.float64]})
def median_pool_gpu(
    input: np.ndarray[Any, Any], *, ksize: Sequence[int], strides: Sequence[int], padding: str
) -> np.ndarray[Any, Any]:
    """Copies the input to the GPU, runs one thread per output element, copies back."""
    lib = gpu()
    if not lib.available or lib.handle is None:
        raise RuntimeError(f"MedianPool's GPU kernel cannot run here: {lib.status}")
    x = np.ascontiguousarray(input)
    g = geometry(x.shape, ksize, strides, padding)
    out = np.empty((g[0], g[8], g[9], g[3]), x.dtype)
    dims = (ctypes.c_int64 * 12)(*g)
    err = ctypes.create_string_buffer(512)
    if lib.handle.opm_median_pool(
        _CODES[x.dtype], x.ctypes.data, out.ctypes.data, dims, err, len(err)
    ):
        raise RuntimeError(f"MedianPool on the GPU failed: {err.value.decode(errors='replace')}")
    return out


def kernels() -> list[Any]:
    """The GPU kernels this companion declares (registered only where they can run)."""
    return [median_pool_gpu]


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """MedianPool's GPU kernel, where the CUDA runtime loads and sees a GPU."""
    if gpu().available:
        register(*kernels())
