"""Attr values as readable JSON, the form saved graphs use (documented in docs/runtime.md).

Strings, ints, floats and bools are plain JSON; lists are arrays; the rest is an object with
one tag: ``{"dtype": "int32"}``, ``{"shape": [2, -1]}`` (``null`` for unknown rank),
``{"tensor": {"dtype": "float", "shape": [2], "values": [1.0, 2.0]}}``,
``{"func": "Name", "attrs": {...}}`` and ``{"float": "nan"}`` for non-finite floats.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from opmarket.sdk import (
    AttrType,
    DType,
    FuncValue,
    TaggedValue,
    TensorShape,
    TensorValue,
    UnknownDType,
    as_dtype,
)

__all__ = ["coerce_attr", "decode_attr", "encode_attr", "normalize_attr", "tensor_value"]

_JsonValue = Any


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
            raise ValueError(f"string tensor element {value!r} is not UTF-8: {exc}") from None
    return str(value)


def normalize_attr(value: Any) -> Any:
    """A Python attr value as the model holds it: numpy dtypes to DType, lists to tuples,
    numpy scalars to Python ones, arrays to TensorValue."""
    if isinstance(value, (DType, bool, str, TensorShape, TensorValue, FuncValue)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(normalize_attr(v) for v in value)
    if isinstance(value, np.ndarray):
        return tensor_value(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (type, np.dtype)):
        try:
            return as_dtype(value)
        except UnknownDType:
            return value
    return value


def coerce_attr(value: Any, attr_type: str, *, strict: bool = False) -> Any:
    """``value`` read as an ``attr_type`` value, leniently as Python callers write them:
    numpy dtypes and dtype names for ``type``, ints for ``float``, tuples for ``shape``,
    arrays and numbers for ``tensor``, lists for ``list(...)``. A dtype name that names no
    dtype raises UnknownDType when ``strict``, else stays a string for the validator."""
    base = AttrType.parse(attr_type).base
    if base == "tensor" and base == attr_type and not isinstance(value, TensorValue):
        try:
            return tensor_value(value)
        except (UnknownDType, ValueError, TypeError):
            if strict:
                raise
            return value
    value = normalize_attr(value)

    def one(v: Any) -> Any:
        if base == "type" and isinstance(v, str):
            try:
                return as_dtype(v)
            except UnknownDType:
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


def encode_attr(value: Any) -> _JsonValue:
    """``value`` (a normalized attr value) as JSON-ready data."""
    if isinstance(value, DType):
        return {"dtype": value.spec_name}
    if isinstance(value, bool | str | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"float": str(value)}
    if isinstance(value, tuple):
        return [encode_attr(v) for v in value]
    if isinstance(value, TensorShape):
        return {"shape": None if value.dims is None else list(value.dims)}
    if isinstance(value, TensorValue):
        arr = value.to_numpy()
        values = arr.astype(object).ravel().tolist() if arr.dtype.kind not in "biufc" else (
            arr.ravel().tolist()
        )
        if arr.dtype.kind == "c":
            values = [[v.real, v.imag] for v in values]
        return {"tensor": {"dtype": DType(value.dtype).spec_name, "shape": list(arr.shape),
                           "values": [_plain(v) for v in values]}}
    if isinstance(value, FuncValue):
        return {"func": value.name, "attrs": {k: encode_attr(t.value) for k, t in value.attrs}}
    raise TypeError(f"cannot save attr value {value!r} as JSON")


def _plain(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _tagged(value: Any) -> TaggedValue:
    if isinstance(value, tuple):
        base = _kind(value[0]) if value else "int"
        return TaggedValue(f"list({base})", value)
    return TaggedValue(_kind(value), value)


def _kind(value: Any) -> str:
    kinds: list[tuple[type, str]] = [
        (bool, "bool"), (DType, "type"), (int, "int"), (float, "float"), (str, "string"),
        (TensorShape, "shape"), (TensorValue, "tensor"), (FuncValue, "func"),
    ]  # fmt: skip
    return next((name for t, name in kinds if isinstance(value, t)), "string")


def decode_attr(data: _JsonValue) -> Any:
    """JSON data written by :func:`encode_attr` back to an attr value; ValueError if malformed."""
    if isinstance(data, bool | str | int | float):
        return data
    if isinstance(data, list):
        return tuple(decode_attr(v) for v in data)
    if not isinstance(data, dict):
        raise ValueError(f"cannot read attr value {data!r}")
    keys = set(data) - {"attrs"}
    if len(keys) != 1:
        raise ValueError(f"an attr object needs exactly one tag, got {sorted(data)}")
    (tag,) = keys
    body = data[tag]
    if tag == "dtype":
        if not isinstance(body, str):
            raise ValueError(f"dtype must be a name, got {body!r}")
        return as_dtype(body)
    if tag == "float":
        return float(body)
    if tag == "shape":
        if body is None:
            return TensorShape(None)
        if not isinstance(body, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) for d in body
        ):
            raise ValueError(f"shape must be a list of ints or null, got {body!r}")
        return TensorShape(tuple(body))
    if tag == "tensor":
        return _decode_tensor(body)
    if tag == "func":
        attrs = data.get("attrs", {})
        if not isinstance(body, str) or not isinstance(attrs, dict):
            raise ValueError(f"func needs a name and an attrs object, got {data!r}")
        pairs = tuple(sorted((k, _tagged(decode_attr(v))) for k, v in attrs.items()))
        return FuncValue(body, pairs)
    raise ValueError(f"unknown attr tag {tag!r}")


def _decode_tensor(body: Any) -> TensorValue:
    if not isinstance(body, dict) or not isinstance(body.get("dtype"), str):
        raise ValueError(f"tensor needs a dtype, a shape and values, got {body!r}")
    dtype = as_dtype(body["dtype"])
    shape = body.get("shape", [])
    values = body.get("values", [])
    if not isinstance(shape, list) or not isinstance(values, list):
        raise ValueError("tensor shape and values must be lists")
    npdt = dtype.numpy
    if npdt is None:
        raise ValueError(f"tensor of dtype {dtype} cannot be saved as JSON")
    if npdt.kind == "c":
        values = [complex(r, i) for r, i in values]
    if dtype is DType.STRING:
        return TensorValue(dtype, TensorShape(tuple(shape)), (("string_val", tuple(values)),))
    arr = np.array([float(v) if isinstance(v, str) else v for v in values], dtype=npdt)
    arr = arr.reshape(shape)
    return tensor_value(arr)
