"""Attr values as Python callers write them, made model values: numpy dtypes and names to
DType, lists to tuples, arrays to TensorValue (JSON is ``opmarket.sdk._attrcodec``'s job)."""

from __future__ import annotations

from typing import Any

import numpy as np

from opmarket.sdk import (
    AttrType,
    DType,
    FuncValue,
    InvalidArgumentError,
    TensorShape,
    TensorValue,
    UnknownDTypeError,
    as_dtype,
)

__all__ = ["coerce_attr", "model_attr_value", "tensor_value"]


def tensor_value(array: Any) -> TensorValue:
    """A numpy array (or anything ``np.asarray`` takes) as a tensor attr value; bytes in a
    string tensor are read as UTF-8 (ValueError if they are not)."""
    arr = np.asarray(array)
    dtype = as_dtype(arr.dtype)
    shape = TensorShape(tuple(int(d) for d in arr.shape))
    if dtype is DType.STRING:
        return TensorValue(dtype, shape, (("string_val", tuple(_text(v) for v in arr.flat)),))
    return TensorValue(dtype, shape, content=np.ascontiguousarray(arr).tobytes())


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError as exc:
            raise InvalidArgumentError(
                f"string tensor element {value!r} is not UTF-8: {exc}"
            ) from None
    return str(value)


def model_attr_value(value: Any) -> Any:
    """A Python attr value as the model holds it: numpy dtypes to DType, lists to tuples,
    numpy scalars to Python ones, arrays to TensorValue."""
    if isinstance(value, (DType, bool, str, TensorShape, TensorValue, FuncValue)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(model_attr_value(v) for v in value)
    if isinstance(value, np.ndarray):
        return tensor_value(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (type, np.dtype)):
        try:
            return as_dtype(value)
        except UnknownDTypeError:
            return value
    return value


def coerce_attr(value: Any, attr_type: str, *, strict: bool = False) -> Any:
    """``value`` read as an ``attr_type`` value, leniently as Python callers write them:
    numpy dtypes and dtype names for ``type``, ints for ``float``, tuples for ``shape``,
    arrays and numbers for ``tensor``, lists for ``list(...)``. A dtype name that names no
    dtype raises UnknownDTypeError when ``strict``, else stays a string for the validator."""
    base = AttrType.parse(attr_type).base
    if base == "tensor" and base == attr_type and not isinstance(value, TensorValue):
        try:
            return tensor_value(value)
        except (UnknownDTypeError, ValueError, TypeError):
            if strict:
                raise
            return value
    value = model_attr_value(value)

    def one(v: Any) -> Any:
        if base == "type" and isinstance(v, str):
            try:
                return as_dtype(v)
            except UnknownDTypeError:
                if strict:
                    raise
                return v
        if base == "float" and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if base == "shape" and isinstance(v, tuple):
            return TensorShape(tuple(-1 if d is None else int(d) for d in v))
        return v

    if base != attr_type and isinstance(value, tuple):
        return tuple(one(v) for v in value)
    return one(value)
