"""Reading attr values of graphs saved in format_version 1 (opmarket 0.1), which spelled
them with one tag each: ``{"dtype": "int32"}``, ``{"shape": [2, -1]}``, ``{"float": "nan"}``,
``{"tensor": {"dtype", "shape", "values"}}``, ``{"func": name, "attrs": {...}}``; plain
JSON for strings, numbers and bools; arrays for lists. Graphs are written in format 2 (each
attr ``{"type", "value"}``, ``opmarket.sdk._attrcodec``); this keeps old files loading."""

from __future__ import annotations

from typing import Any

import numpy as np

from opmarket.registry._attrvalues import tensor_value
from opmarket.sdk import DType, FuncValue, TaggedValue, TensorShape, TensorValue, as_dtype
from opmarket.sdk._attrcodec import attr_type_of

__all__ = ["decode_v1_attr"]


def _tagged(value: Any) -> TaggedValue:
    return TaggedValue(attr_type_of(value), value)


def decode_v1_attr(data: Any) -> Any:
    """A format-1 attr value back to an attr value; ValueError if malformed."""
    if isinstance(data, bool | str | int | float):
        return data
    if isinstance(data, list):
        return tuple(decode_v1_attr(v) for v in data)
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
        pairs = tuple(sorted((k, _tagged(decode_v1_attr(v))) for k, v in attrs.items()))
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
