"""MedianPool's CUDA 13 kernel: the GPU companion of opmarket-median-pool.

The base plugin declares ``Opm>MedianPool`` and its CPU kernels; this distribution registers
a GPU kernel for that op: one CUDA thread per output element, each selecting its window's
median (``median_pool.cu``, built by nvcc into ``libopm_median_pool_cuda13.so``, which links
the CUDA runtime of the ``nvidia-cuda-runtime`` wheel). :func:`register` registers it only
where the library loads and its runtime sees a GPU; :func:`gpu_status` says why not.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from opmarket.sdk import CudaLibrary, InvalidArgumentError, hookimpl, kernel, load_cuda_library

__all__ = ["LIBRARY", "geometry", "gpu", "gpu_status", "kernels", "register"]

OP = "Opm>MedianPool"
#: The CUDA library, beside this file.
LIBRARY = "libopm_median_pool_cuda13.so"
# MedianPoolDtype in median_pool.cu.
_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}

_loaded: CudaLibrary | None = None


def gpu() -> CudaLibrary:
    """The CUDA library as loaded here (once): its handle, GPUs seen, and status."""
    global _loaded
    if _loaded is None:
        lib = load_cuda_library(Path(__file__).with_name(LIBRARY), runtime_major=13)
        if lib.handle is not None:
            fn = lib.handle.opm_median_pool
            fn.restype = ctypes.c_int
            fn.argtypes = [
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.POINTER(ctypes.c_int64),
                ctypes.c_char_p,
                ctypes.c_int,
            ]
        _loaded = lib
    return _loaded


def gpu_status() -> str:
    """Whether the GPU kernel registers here, and if not, why."""
    return gpu().status


def _window(size: int, k: int, stride: int, same: bool, dim: str) -> tuple[int, int]:
    """MaxPool's output size and padding before, for one spatial dimension."""
    if same:
        out = -(-size // stride)
        return out, max((out - 1) * stride + k - size, 0) // 2
    num = size - k + stride
    out = num // stride if num >= 0 else -(-num // stride)  # truncated, as TensorFlow's
    if out < 0:
        raise InvalidArgumentError(
            f"Computed output {dim} would be negative: {out} [input {dim}: {size}, "
            f"ksize: {k}, stride: {stride}]"
        )
    return out, 0


def geometry(
    shape: Sequence[int], ksize: Sequence[int], strides: Sequence[int], padding: str
) -> list[int]:
    """The kernel's 12 numbers (n, h, w, c, kh, kw, sh, sw, out_h, out_w, top, left) for an
    NHWC ``shape``, checked as the CPU kernel checks them (InvalidArgumentError)."""
    if len(shape) != 4:
        raise InvalidArgumentError(f"MedianPool expects a 4-D NHWC input, got shape {shape}")
    if len(ksize) != 4 or len(strides) != 4:
        raise InvalidArgumentError(
            "Sliding window ksize and stride fields must specify 4 dimensions"
        )
    if ksize[0] != 1 or strides[0] != 1:
        raise InvalidArgumentError("Pooling is not yet supported on the batch dimension.")
    if ksize[3] != 1 or strides[3] != 1:
        raise InvalidArgumentError("MedianPool does not pool over depth.")
    if min(*ksize[1:3], *strides[1:3]) < 1:
        raise InvalidArgumentError(
            f"Sliding window ksize {list(ksize)} and strides {list(strides)} must be positive"
        )
    if padding not in ("SAME", "VALID"):
        raise InvalidArgumentError(f"padding must be 'VALID' or 'SAME', got {padding!r}")
    n, h, w, c = shape
    oh, top = _window(h, ksize[1], strides[1], padding == "SAME", "rows")
    ow, left = _window(w, ksize[2], strides[2], padding == "SAME", "cols")
    return [n, h, w, c, ksize[1], ksize[2], strides[1], strides[2], oh, ow, top, left]


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
