"""The shim's callback interface as ctypes sees it (``_shim.cc``): TensorFlow's status
codes it sets, the callbacks' C types, and the tensor a callback reads and fills; and the
attrs a shape callback takes from the wrapper adding the node (:class:`shape_hint`)."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping
from typing import Any

__all__ = [
    "COMPUTE_CB",
    "CREATE_CB",
    "DELETE_CB",
    "MAX_DIMS",
    "SHAPE_CB",
    "TF_INTERNAL",
    "TF_INVALID_ARGUMENT",
    "TF_NOT_FOUND",
    "TF_OK",
    "TensorInfo",
    "hinted",
    "shape_hint",
]

#: The most dimensions a tensor crossing the callbacks has (the shim's OPM_TF_MAX_DIMS).
MAX_DIMS = 16
TF_OK = 0
TF_INVALID_ARGUMENT = 3
TF_NOT_FOUND = 5
TF_INTERNAL = 13

SHAPE_CB = ctypes.CFUNCTYPE(None, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
CREATE_CB = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p)
COMPUTE_CB = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)
DELETE_CB = ctypes.CFUNCTYPE(None, ctypes.c_int64)


class TensorInfo(ctypes.Structure):
    """A tensor as the shim hands it to a callback (the shim's ``opm_tf_tensor_info``)."""

    _fields_ = [
        ("dtype", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("dims", ctypes.c_int64 * MAX_DIMS),
        ("data", ctypes.c_void_p),
        ("nbytes", ctypes.c_uint64),
        ("tensor", ctypes.c_void_p),
    ]


_pending = threading.local()


class shape_hint:  # noqa: N801 (a context manager used like a function)
    """While a wrapper adds a node, the attrs TensorFlow's C shape API cannot read (ints,
    lists, strings) come from here: ``with shape_hint(op_name, attrs): add the node``."""

    def __init__(self, op: str, attrs: Mapping[str, Any]) -> None:
        self.item = (op, attrs)

    def __enter__(self) -> None:
        stack = getattr(_pending, "stack", None)
        if stack is None:
            stack = _pending.stack = []
        stack.append(self.item)

    def __exit__(self, *exc: object) -> None:
        _pending.stack.pop()


def hinted(op: str) -> Mapping[str, Any]:
    """The attrs the innermost :class:`shape_hint` gives for ``op`` (none when it is of
    another op, or there is none)."""
    stack = getattr(_pending, "stack", None)
    return stack[-1][1] if stack and stack[-1][0] == op else {}
