"""Attr values as TensorFlow's checker sees them: equality (AreAttrValuesEqual) and display."""

from __future__ import annotations

import struct
from typing import Any

from opmarket.sdk import AttrType, DType, FuncValue, TaggedValue, TensorShape, TensorValue

__all__ = ["show_value", "values_equal"]


def _float_bits(v: float) -> bytes:
    # AttrValue stores float32; TensorFlow compares serialized bytes, so -0.0 != 0.0 and
    # NaN == NaN (same payload).
    try:
        return struct.pack("<f", v)
    except OverflowError:
        return struct.pack("<d", v)


def _tensor_key(t: TensorValue) -> tuple[Any, ...]:
    # TensorFlow compares tensors by their expanded content, not their proto spelling.
    dims = t.shape.dims if t.shape is not None else ()
    try:
        content: Any = t.to_numpy().tobytes()
    except (ValueError, TypeError, OverflowError):  # values numpy cannot hold: compare as written
        content = (t.values, t.content)
    return (int(t.dtype), dims, content)


def _scalar_equal(base: str, a: Any, b: Any) -> bool:
    if base == "float":
        return _float_bits(a) == _float_bits(b)
    if base == "type":
        return int(a) == int(b)
    if base == "tensor":
        if not isinstance(a, TensorValue) or not isinstance(b, TensorValue):
            return bool(a == b)
        return _tensor_key(a) == _tensor_key(b)
    if base == "func":
        if not isinstance(a, FuncValue) or not isinstance(b, FuncValue):
            return bool(a == b)
        if a.name != b.name or len(a.attrs) != len(b.attrs):
            return False
        other = dict(b.attrs)
        return all(key in other and _tagged_equal(value, other[key]) for key, value in a.attrs)
    return type(a) is type(b) and bool(a == b)


def _tagged_equal(a: TaggedValue, b: TaggedValue) -> bool:
    if a.type != b.type:
        # An empty list reads the same whatever its element type.
        return (
            a.type.startswith("list(")
            and b.type.startswith("list(")
            and not a.value
            and (not b.value)
        )
    return values_equal(a.type, a.value, b.value)


def values_equal(attr_type: str, a: Any, b: Any) -> bool:
    """Whether two values of an ``attr_type`` attr are equal as TensorFlow compares them."""
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        if not isinstance(a, tuple) or not isinstance(b, tuple):
            return bool(a == b)
        if len(a) != len(b):
            return False
        return all(_scalar_equal(base, x, y) for x, y in zip(a, b, strict=True))
    return _scalar_equal(attr_type, a, b)


def _show_scalar(base: str, v: Any) -> str:
    if base == "type":
        return DType(int(v)).spec_name if v in DType._value2member_map_ else f"<dtype {v}>"
    if base == "string":
        return repr(v)
    if base == "bool":
        return "true" if v else "false"
    if base == "shape" and isinstance(v, TensorShape):
        return "<unknown rank>" if v.dims is None else str(v)
    if base == "tensor" and isinstance(v, TensorValue):
        shape = v.shape.dims if v.shape is not None else ()
        return f"<{_show_scalar('type', v.dtype)} tensor of shape {list(shape or ())}>"
    if base == "func" and isinstance(v, FuncValue):
        return f"<func {v.name}>"
    return str(v)


def show_value(attr_type: str, value: Any) -> str:
    """A value as a spec default would spell it: ``float``, ``'SAME'``, ``[1, 2]``."""
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        return "[" + ", ".join(_show_scalar(base, v) for v in value) + "]"
    return _show_scalar(attr_type, value)
