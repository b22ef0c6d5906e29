"""Bitcast, TensorFlow's op, as a C-ABI plugin: the op, its shape function and its kernel are
in ``libopm_bitcast.so`` (plain C against ``opmarket/c_api.h``), which the entry point names
and opmarket loads; this module adds only the numpy reference and the input generator.

Nothing here is tied to a Python version: the library links neither Python nor a C++
runtime, and this module is plain Python.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from opmarket.sdk import DType, hookimpl, input_generator, reference

__all__ = ["register"]

OP = "Opm>Bitcast"
# The types numpy holds, as the kernel's type constraints list them.
TYPES = (
    DType.BFLOAT16,
    DType.HALF,
    DType.FLOAT,
    DType.DOUBLE,
    DType.INT64,
    DType.INT32,
    DType.UINT8,
    DType.UINT16,
    DType.UINT32,
    DType.UINT64,
    DType.INT8,
    DType.INT16,
    DType.COMPLEX64,
    DType.COMPLEX128,
)


@reference(OP)
def bitcast_reference(x: np.ndarray[Any, Any], type: DType) -> Any:  # the attr's name
    """numpy's ``view``, with TensorFlow's shapes: a last dim appended or removed."""
    want = type.numpy
    assert want is not None
    if want.itemsize < x.dtype.itemsize:
        return (
            np.ascontiguousarray(x)
            .view(want)
            .reshape((*x.shape, x.dtype.itemsize // want.itemsize))
        )
    if want.itemsize > x.dtype.itemsize:
        return np.ascontiguousarray(x).view(want).reshape(x.shape[:-1])
    return np.ascontiguousarray(x).view(want)


@input_generator(OP)
def bitcast_inputs(rng: np.random.Generator, types: dict[str, DType]) -> Any:
    t, out = types["T"], types["type"]
    npdt, want = t.numpy, out.numpy
    assert npdt is not None and want is not None
    shape = [int(n) for n in rng.integers(1, 5, size=int(rng.integers(0, 3)))]
    if want.itemsize > npdt.itemsize:
        shape.append(want.itemsize // npdt.itemsize)
    # Bytes below 0x40 keep every float's exponent short of all ones: no NaN, whose
    # comparison would fail however equal the bits are.
    raw = rng.integers(0, 64, size=int(np.prod(shape)) * npdt.itemsize, dtype=np.uint8)
    return [raw.view(npdt).reshape(shape)], {"type": out}


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """The Python parts; the op and kernel come from the library the entry point names."""
    register(bitcast_reference, bitcast_inputs)
