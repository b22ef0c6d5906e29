"""TimeTwo: the ExampleFunctor of TensorFlow's "Adding a new op" guide (out = 2 * in), with a
CPU kernel and a CUDA kernel in one wheel.

The op and its CPU kernels come from the pybind11 library (``time_two.cc``). The CUDA kernel
lives in a separate library (``libopm_time_two_gpu.so``, built from ``time_two_gpu.cu`` where
nvcc was found at build time) with a C interface; :func:`register` registers its GPU kernel
only when that library loads (the CUDA runtime is present) and sees a GPU, so the plugin
works the same everywhere else. :func:`gpu_status` says which case this is.
"""

from __future__ import annotations

import ctypes
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from opmarket.sdk import (
    DType,
    GradientOp,
    hookimpl,
    input_generator,
    kernel,
    library_declarations,
    reference,
    register_gradient,
    shape_fn,
    unchanged,
)
from opmarket_time_two import _time_two

__all__ = ["GPU_LIBRARY", "gpu_status", "register"]

OP = "Opm>TimeTwo"
#: The CUDA kernel's library, beside this file when the wheel was built with nvcc.
GPU_LIBRARY = "libopm_time_two_gpu.so"
TYPES = [np.float32, np.float64, np.int32, np.int64]
# TimeTwoDtype in time_two.h.
_CODES = {np.dtype(t): code for code, t in enumerate(TYPES)}

_gpu: tuple[ctypes.CDLL | None, str] | None = None


def _runtime_dirs() -> list[Path]:
    """Where a CUDA runtime may be when the dynamic linker does not find it by itself."""
    dirs = [
        Path(home, sub)
        for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda")
        if home
        for sub in ("lib64", "lib")
    ]
    # pip's nvidia-cuda-runtime wheels.
    dirs += [Path(p, "nvidia", "cuda_runtime", "lib") for p in sys.path if p]
    return [d for d in dirs if d.is_dir()]


def _load_gpu() -> tuple[ctypes.CDLL | None, str]:
    path = Path(__file__).with_name(GPU_LIBRARY)
    if not path.is_file():
        return None, "no GPU kernel in this wheel (it was built without nvcc)"
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as first:
        # Load the CUDA runtime from a known place first, globally, then try again.
        for directory in _runtime_dirs():
            for runtime in sorted(directory.glob("libcudart.so*"), reverse=True):
                try:
                    ctypes.CDLL(str(runtime), mode=ctypes.RTLD_GLOBAL)
                    break
                except OSError:
                    continue
        try:
            lib = ctypes.CDLL(str(path))
        except OSError:
            return None, f"no CUDA runtime: {first}"
    lib.opm_time_two_device_count.restype = ctypes.c_int
    lib.opm_time_two_device_count.argtypes = []
    count = lib.opm_time_two_device_count()
    if count <= 0:
        return None, "the CUDA runtime sees no GPU"
    lib.opm_time_two.restype = ctypes.c_int
    lib.opm_time_two.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_char_p,
        ctypes.c_int,
    ]
    return lib, f"GPU kernel available: {count} GPU(s)"


def _gpu_library() -> tuple[ctypes.CDLL | None, str]:
    global _gpu
    if _gpu is None:
        _gpu = _load_gpu()
    return _gpu


def gpu_status() -> str:
    """Whether the GPU kernel registers here, and if not, why (loads the CUDA library once)."""
    return _gpu_library()[1]


@kernel(OP, device="GPU", constraints={"T": TYPES})
def time_two_gpu(input: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """ExampleFunctor<GPUDevice, T>: copies the input to the GPU, runs, copies back."""
    lib = _gpu_library()[0]
    if lib is None:
        raise RuntimeError(f"TimeTwo's GPU kernel is not available: {gpu_status()}")
    x = np.ascontiguousarray(input)
    out = np.empty_like(x)
    err = ctypes.create_string_buffer(512)
    if lib.opm_time_two(_CODES[x.dtype], x.ctypes.data, out.ctypes.data, x.size, err, len(err)):
        raise RuntimeError(f"TimeTwo on the GPU failed: {err.value.decode(errors='replace')}")
    return out


@register_gradient(OP)
def time_two_grad(op: GradientOp, grad: np.ndarray[Any, Any]) -> list[Any]:
    return [grad * 2]


@reference(OP)
def time_two_reference(input: np.ndarray[Any, Any]) -> Any:
    return (input * 2).astype(input.dtype)


@input_generator(OP)
def time_two_inputs(rng: np.random.Generator, types: dict[str, DType]) -> Any:
    npdt = types["T"].numpy
    assert npdt is not None
    shape = tuple(int(d) for d in rng.integers(0, 7, int(rng.integers(0, 4))))
    if npdt.kind == "i":
        info = np.iinfo(npdt)  # the whole range: 2 * x wraps around as numpy's does
        x = rng.integers(info.min, info.max, shape, dtype=npdt, endpoint=True)
    else:
        x = (rng.standard_normal(shape) * 1e3).astype(npdt)
    return [x], {}


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """TimeTwo, its CPU kernels, and its GPU kernel where a GPU and the CUDA runtime are."""
    items: list[Any] = [
        *library_declarations(_time_two),
        shape_fn(OP, unchanged),
        time_two_grad,
        time_two_reference,
        time_two_inputs,
    ]
    if _gpu_library()[0] is not None:
        items.append(time_two_gpu)
    register(*items)
