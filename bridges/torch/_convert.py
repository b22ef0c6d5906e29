"""Tensors and dtypes between torch and numpy, without copies where the memory allows:
a CPU tensor's ``numpy()`` shares its storage, ``torch.from_numpy`` shares the array's.
bfloat16 and the float8 types, which numpy lacks, travel as same-sized integers viewed as
ml_dtypes' types."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np

import torch
from opmarket._bridge import normalize_dtype
from opmarket.sdk import DType, InvalidArgumentError

__all__ = ["DTYPES", "VIA", "VIA_NP", "from_numpy", "numpy_dtype", "opm_dtype", "to_numpy"]

_Array = np.ndarray[Any, Any]

#: torch dtype -> numpy dtype (ml_dtypes' for the types numpy lacks).
DTYPES: dict[torch.dtype, np.dtype[Any]] = {
    torch.float16: np.dtype(np.float16),
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
    torch.int8: np.dtype(np.int8),
    torch.int16: np.dtype(np.int16),
    torch.int32: np.dtype(np.int32),
    torch.int64: np.dtype(np.int64),
    torch.uint8: np.dtype(np.uint8),
    torch.uint16: np.dtype(np.uint16),
    torch.uint32: np.dtype(np.uint32),
    torch.uint64: np.dtype(np.uint64),
    torch.bool: np.dtype(np.bool_),
    torch.complex64: np.dtype(np.complex64),
    torch.complex128: np.dtype(np.complex128),
    torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
    torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
}
_TORCH = {v: k for k, v in DTYPES.items()}
#: Types numpy has no array type of its own for: viewed through an integer of their size.
VIA = {torch.bfloat16: torch.int16, torch.float8_e5m2: torch.int8, torch.float8_e4m3fn: torch.int8}
VIA_NP = {DTYPES[t]: DTYPES[i] for t, i in VIA.items()}


def numpy_dtype(dtype: torch.dtype) -> np.dtype[Any]:
    """The numpy dtype of a torch dtype; InvalidArgumentError for one opmarket has no type for."""
    try:
        return DTYPES[dtype]
    except KeyError:
        raise InvalidArgumentError(f"torch dtype {dtype} has no opmarket type") from None


def opm_dtype(value: Any) -> DType:
    """A dtype attr's value as opmarket's DType: a torch.dtype through its numpy dtype,
    anything else as every bridge reads a dtype (``opmarket._bridge.normalize_dtype``)."""
    if isinstance(value, torch.dtype):
        value = numpy_dtype(value)
    return normalize_dtype(value)


def torch_dtype(dtype: DType) -> torch.dtype:
    """The torch dtype of an opmarket DType."""
    npdt = dtype.numpy
    found = _TORCH.get(npdt) if npdt is not None else None
    if found is None:
        raise InvalidArgumentError(f"opmarket type {dtype.spec_name} has no torch dtype")
    return found


def to_numpy(t: torch.Tensor) -> _Array:
    """A CPU tensor's data as a numpy array sharing its memory (no copy)."""
    if t.requires_grad:
        t = t.detach()
    via = VIA.get(t.dtype)
    if via is not None:
        return t.view(via).numpy().view(DTYPES[t.dtype])
    return t.numpy()


def from_numpy(a: _Array) -> torch.Tensor:
    """A numpy array as a tensor sharing its memory; a copy only of a read-only array
    (torch tensors are always writable) or one with negative strides."""
    if not a.flags.writeable or any(s < 0 for s in a.strides):
        a = a.copy()
    via = VIA_NP.get(a.dtype)
    if via is not None:
        return torch.from_numpy(a.view(via)).view(_TORCH[a.dtype])
    return torch.from_numpy(a)
