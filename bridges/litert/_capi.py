"""The few functions and types of LiteRT's C API (``libLiteRt.so``, shipped in ai-edge-litert)
that opmarket.litert uses: environments, models, options with custom-op kernels, compiled
models and host-memory tensor buffers. Declared here with ctypes (the wheel ships no
headers); the layouts are LiteRT's ABI-stable ones (LiteRtRankedTensorType is 72 bytes)."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "ELEMENT_TYPES",
    "MAX_RANK",
    "CustomOpKernel",
    "Layout",
    "RankedTensorType",
    "lib",
    "numpy_of",
]

MAX_RANK = 8
CPU = 1  # kLiteRtHwAcceleratorCpu
LOCK_READ, LOCK_WRITE = 0, 1
STATUS_OK, STATUS_INVALID_ARGUMENT, STATUS_RUNTIME_FAILURE = 0, 1, 3


class Layout(ctypes.Structure):
    """LiteRtLayout: rank (7 bits), has_strides (1 bit), dims, strides."""

    _fields_ = [
        ("rank", ctypes.c_uint, 7),
        ("has_strides", ctypes.c_uint, 1),
        ("dimensions", ctypes.c_int32 * MAX_RANK),
        ("strides", ctypes.c_uint32 * MAX_RANK),
    ]


class RankedTensorType(ctypes.Structure):
    """LiteRtRankedTensorType: an element type and a layout."""

    _fields_ = [
        ("element_type", ctypes.c_int),
        ("layout", Layout),
    ]


assert ctypes.sizeof(RankedTensorType) == 72, "LiteRtRankedTensorType is 72 bytes"

INIT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
OUTPUT_LAYOUTS = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.POINTER(Layout),
    ctypes.c_size_t,
    ctypes.POINTER(Layout),
)
RUN = ctypes.CFUNCTYPE(
    ctypes.c_int,
    ctypes.c_void_p,
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.c_size_t,
    ctypes.POINTER(ctypes.c_void_p),
)
DESTROY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class CustomOpKernel(ctypes.Structure):
    """LiteRtCustomOpKernel: Init, GetOutputLayouts, Run, Destroy."""

    _fields_ = [
        ("Init", INIT),
        ("GetOutputLayouts", OUTPUT_LAYOUTS),
        ("Run", RUN),
        ("Destroy", DESTROY),
    ]


#: LiteRtElementType (TfLiteType numbers) to numpy.
ELEMENT_TYPES: dict[int, Any] = {
    1: np.float32,
    2: np.int32,
    3: np.uint8,
    4: np.int64,
    6: np.bool_,
    7: np.int16,
    8: np.complex64,
    9: np.int8,
    10: np.float16,
    11: np.float64,
    12: np.complex128,
    13: np.uint64,
    16: np.uint32,
    17: np.uint16,
}


def numpy_of(element_type: int) -> np.dtype[Any]:
    """The numpy dtype of a LiteRtElementType; ValueError for one numpy lacks."""
    try:
        found: np.dtype[Any] = np.dtype(ELEMENT_TYPES[element_type])
        return found
    except KeyError:
        raise ValueError(f"LiteRT element type {element_type} has no numpy dtype") from None


def element_type_of(dtype: np.dtype[Any]) -> int:
    """The LiteRtElementType of a numpy dtype."""
    for number, np_type in ELEMENT_TYPES.items():
        if np.dtype(np_type) == dtype:
            return number
    raise ValueError(f"numpy dtype {dtype} has no LiteRT element type")


_VOID = ctypes.c_void_p
_SIGNATURES: dict[str, tuple[Any, list[Any]]] = {
    "LiteRtCreateEnvironment": (ctypes.c_int, [ctypes.c_int, _VOID, ctypes.POINTER(_VOID)]),
    "LiteRtDestroyEnvironment": (None, [_VOID]),
    "LiteRtCreateModelFromBuffer": (
        ctypes.c_int,
        [_VOID, _VOID, ctypes.c_size_t, ctypes.POINTER(_VOID)],
    ),
    "LiteRtDestroyModel": (None, [_VOID]),
    "LiteRtCreateOptions": (ctypes.c_int, [ctypes.POINTER(_VOID)]),
    "LiteRtDestroyOptions": (None, [_VOID]),
    "LiteRtSetOptionsHardwareAccelerators": (ctypes.c_int, [_VOID, ctypes.c_int]),
    "LiteRtAddCustomOpKernelOption": (
        ctypes.c_int,
        [_VOID, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(CustomOpKernel), _VOID],
    ),
    "LiteRtCreateCompiledModel": (ctypes.c_int, [_VOID, _VOID, _VOID, ctypes.POINTER(_VOID)]),
    # (compiled model, signature index, number of layouts, layouts, update allocation)
    "LiteRtGetCompiledModelOutputTensorLayouts": (
        ctypes.c_int,
        [_VOID, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(Layout), ctypes.c_bool],
    ),
    "LiteRtDestroyCompiledModel": (None, [_VOID]),
    "LiteRtRunCompiledModel": (
        ctypes.c_int,
        [
            _VOID,
            ctypes.c_size_t,
            ctypes.c_size_t,
            ctypes.POINTER(_VOID),
            ctypes.c_size_t,
            ctypes.POINTER(_VOID),
        ],
    ),
    "LiteRtCreateTensorBufferFromHostMemory": (
        ctypes.c_int,
        [ctypes.POINTER(RankedTensorType), _VOID, ctypes.c_size_t, _VOID, ctypes.POINTER(_VOID)],
    ),
    "LiteRtDestroyTensorBuffer": (None, [_VOID]),
    "LiteRtGetTensorBufferTensorType": (ctypes.c_int, [_VOID, ctypes.POINTER(RankedTensorType)]),
    "LiteRtLockTensorBuffer": (ctypes.c_int, [_VOID, ctypes.POINTER(_VOID), ctypes.c_int]),
    "LiteRtUnlockTensorBuffer": (ctypes.c_int, [_VOID]),
}


@functools.cache
def lib() -> ctypes.CDLL:
    """libLiteRt.so of the installed ai-edge-litert, with the signatures above."""
    import ai_edge_litert

    path = Path(ai_edge_litert.__file__).parent / "libLiteRt.so"
    handle = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return handle
