"""A framework's tensor memory as a numpy array without a copy: what a Python-path kernel
reads. The view is read-only (a kernel must not write into a framework's input) and valid
only while the framework holds the buffer: a bridge runs the kernel and copies its outputs
out before it lets the buffer go."""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["readonly_array"]


def readonly_array(address: int | None, shape: Sequence[int], dtype: Any) -> np.ndarray[Any, Any]:
    """A read-only view of the ``shape`` and ``dtype`` array at ``address`` (C order)."""
    npdt = np.dtype(dtype)
    dims = tuple(int(d) for d in shape)
    count = math.prod(dims)
    if count == 0 or not address:
        array = np.empty(dims, npdt)
    else:
        raw = (ctypes.c_char * (count * npdt.itemsize)).from_address(address)
        array = np.frombuffer(raw, dtype=npdt, count=count).reshape(dims)
    array.flags.writeable = False
    return array
