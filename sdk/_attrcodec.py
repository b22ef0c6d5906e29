"""Attr values as JSON, the one encoding opmarket writes them in: canonical op-sets (attr
defaults, allowed values) and saved graphs (node attrs, each with its type) alike.

A value is written for its attr type (``value_to_json("float", nan)`` is ``"nan"``); where the
type is not known from an OpDef, the value travels with it as ``{"type": ..., "value": ...}``
(``tagged_to_json``), as a func attr's attrs do. docs/formats.md describes the encoding.
"""

from __future__ import annotations

import base64
import math
from collections.abc import Sequence
from typing import Any

from opmarket.sdk._dtypes import DType, dtype_from_spec_name
from opmarket.sdk._errors import OpmarketError
from opmarket.sdk._opdef import AttrType
from opmarket.sdk._values import (
    TENSOR_VALUE_FIELDS,
    FuncValue,
    TaggedValue,
    TensorShape,
    TensorValue,
    normalize_double,
    normalize_float,
)

__all__ = [
    "BadJsonError",
    "attr_type_of",
    "check_keys",
    "expect",
    "read_bool",
    "read_dtype",
    "read_int",
    "read_list",
    "read_str",
    "tagged_from_json",
    "tagged_to_json",
    "value_from_json",
    "value_to_json",
]


class BadJsonError(OpmarketError, ValueError):
    """Malformed JSON for a value: ``where`` it is and what is wrong."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


# ---------------------------------------------------------------- values to JSON


def _float_to_json(v: float) -> float | str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _shape_to_json(s: TensorShape) -> Any:
    if s.names:
        return {"dims": None if s.dims is None else list(s.dims), "names": list(s.names)}
    return None if s.dims is None else list(s.dims)


def _tensor_to_json(t: TensorValue) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dtype": t.dtype.spec_name if isinstance(t.dtype, DType) else int(t.dtype)
    }
    if t.shape is not None:
        out["shape"] = _shape_to_json(t.shape)
    if t.version_number:
        out["version_number"] = t.version_number
    if t.content:
        out["tensor_content"] = base64.b64encode(t.content).decode("ascii")
    if t.extra:
        out["extra"] = base64.b64encode(t.extra).decode("ascii")
    for name, vals in t.values:
        if name in ("float_val", "scomplex_val", "double_val", "dcomplex_val"):
            out[name] = [_float_to_json(v) for v in vals]
        else:
            out[name] = list(vals)
    return out


def value_to_json(attr_type: str, value: Any) -> Any:
    """An attr value of ``attr_type`` in its canonical JSON form."""
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        return [value_to_json(base, v) for v in value]
    if attr_type == "float":
        return _float_to_json(value)
    if attr_type == "type":
        return value.spec_name if isinstance(value, DType) else int(value)
    if attr_type == "shape":
        return _shape_to_json(value)
    if attr_type == "tensor":
        return _tensor_to_json(value)
    if attr_type == "func":
        return {
            "name": value.name,
            "attr": {
                k: {"type": t.type, "value": value_to_json(t.type, t.value)} for k, t in value.attrs
            },
        }
    return value


# ---------------------------------------------------------------- JSON to values


def expect(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise BadJsonError(where, message)


def check_keys(obj: Any, where: str, allowed: Sequence[str], required: Sequence[str] = ()) -> None:
    expect(isinstance(obj, dict), where, f"expected an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(allowed))
    expect(not unknown, where, f"unknown key(s) {', '.join(map(repr, unknown))}")
    missing = [k for k in required if k not in obj]
    expect(not missing, where, f"missing key(s) {', '.join(map(repr, missing))}")


def read_str(v: Any, where: str) -> str:
    expect(isinstance(v, str), where, f"expected a string, got {v!r}")
    return str(v)


def read_int(v: Any, where: str) -> int:
    expect(isinstance(v, int) and not isinstance(v, bool), where, f"expected an integer, got {v!r}")
    return int(v)


def read_bool(v: Any, where: str) -> bool:
    expect(isinstance(v, bool), where, f"expected true or false, got {v!r}")
    return bool(v)


def read_list(v: Any, where: str) -> list[Any]:
    expect(isinstance(v, list), where, f"expected a list, got {v!r}")
    return list(v)


def read_dtype(v: Any, where: str) -> DType:
    name = read_str(v, where)
    dt = dtype_from_spec_name(name)
    expect(dt is not None, where, f"unknown dtype {name!r}")
    assert dt is not None
    return dt


def read_double(v: Any, where: str) -> float:
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return normalize_double(float(v))
    expect(
        isinstance(v, (int, float)) and not isinstance(v, bool),
        where,
        f"expected a number, got {v!r}",
    )
    return normalize_double(float(v))


def read_float(v: Any, where: str) -> float:
    """A float attr value: stored as float32, as TensorFlow's AttrValue does."""
    return normalize_float(read_double(v, where))


def read_shape(v: Any, where: str) -> TensorShape:
    names: tuple[str, ...] = ()
    if isinstance(v, dict):
        check_keys(v, where, ("dims", "names"), ("dims", "names"))
        names = tuple(read_str(n, where) for n in read_list(v["names"], where))
        v = v["dims"]
    if v is None:
        return TensorShape(None, names)
    dims = tuple(read_int(d, where) for d in read_list(v, where))
    expect(not names or len(names) == len(dims), where, "one name per dim")
    return TensorShape(dims, names)


def read_tensor(v: Any, where: str) -> TensorValue:
    check_keys(
        v,
        where,
        ("dtype", "shape", "version_number", "tensor_content", "extra", *TENSOR_VALUE_FIELDS),
        ("dtype",),
    )
    values: list[tuple[str, tuple[Any, ...]]] = []
    for name in TENSOR_VALUE_FIELDS:
        if name not in v:
            continue
        items = read_list(v[name], f"{where}.{name}")
        conv: list[Any]
        if name in ("float_val", "scomplex_val"):
            conv = [read_float(x, f"{where}.{name}") for x in items]
        elif name in ("double_val", "dcomplex_val"):
            conv = [read_double(x, f"{where}.{name}") for x in items]
        elif name == "string_val":
            conv = [read_str(x, f"{where}.{name}") for x in items]
        elif name == "bool_val":
            conv = [read_bool(x, f"{where}.{name}") for x in items]
        else:
            conv = [read_int(x, f"{where}.{name}") for x in items]
        values.append((name, tuple(conv)))
    try:
        content = base64.b64decode(read_str(v.get("tensor_content", ""), where), validate=True)
        extra = base64.b64decode(read_str(v.get("extra", ""), where), validate=True)
    except ValueError:
        raise BadJsonError(where, "tensor_content and extra must be base64") from None
    raw_dtype = v["dtype"]
    return TensorValue(
        dtype=read_int(raw_dtype, where)
        if isinstance(raw_dtype, int)
        else read_dtype(raw_dtype, where),
        shape=read_shape(v["shape"], f"{where}.shape") if "shape" in v else None,
        values=tuple(values),
        content=content,
        version_number=read_int(v.get("version_number", 0), where),
        extra=extra,
    )


def value_from_json(attr_type: str, v: Any, where: str = "value") -> Any:
    """Read the canonical JSON form of an ``attr_type`` value; raises ValueError if malformed."""
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        return tuple(
            value_from_json(base, x, f"{where}[{i}]") for i, x in enumerate(read_list(v, where))
        )
    if attr_type == "string":
        return read_str(v, where)
    if attr_type == "int":
        return read_int(v, where)
    if attr_type == "float":
        return read_float(v, where)
    if attr_type == "bool":
        return read_bool(v, where)
    if attr_type == "type":
        return read_dtype(v, where)
    if attr_type == "shape":
        return read_shape(v, where)
    if attr_type == "tensor":
        return read_tensor(v, where)
    if attr_type == "func":
        check_keys(v, where, ("name", "attr"), ("name",))
        attrs = v.get("attr", {})
        expect(isinstance(attrs, dict), where, "attr must be an object")
        tagged = []
        for key in sorted(attrs):
            item = attrs[key]
            check_keys(item, f"{where}.attr.{key}", ("type", "value"), ("type", "value"))
            t = read_str(item["type"], where)
            tagged.append((key, TaggedValue(t, value_from_json(t, item["value"], where))))
        return FuncValue(read_str(v["name"], where), tuple(tagged))
    if attr_type == "placeholder":
        return read_str(v, where)
    if attr_type == "none":
        expect(v is None, where, "a 'none' value must be null")
        return None
    raise BadJsonError(where, f"unknown attr type {attr_type!r}")


_KINDS: tuple[tuple[type, str], ...] = (
    (bool, "bool"),
    (DType, "type"),
    (int, "int"),
    (float, "float"),
    (str, "string"),
    (TensorShape, "shape"),
    (TensorValue, "tensor"),
    (FuncValue, "func"),
)


def attr_type_of(value: Any) -> str:
    """The attr type a Python attr value has (``list(int)`` for a tuple of ints); a tuple
    takes its first item's type (an empty one is ``list(int)``, which reads back the same)."""
    if isinstance(value, tuple):
        return f"list({attr_type_of(value[0]) if value else 'int'})"
    found = next((name for cls, name in _KINDS if isinstance(value, cls)), None)
    if found is None:
        raise TypeError(f"cannot save attr value {value!r} as JSON")
    return found


def tagged_to_json(value: Any) -> dict[str, Any]:
    """``{"type": T, "value": ...}``: a value with its type, for where no OpDef says it."""
    if isinstance(value, TaggedValue):
        return {"type": value.type, "value": value_to_json(value.type, value.value)}
    attr_type = attr_type_of(value)
    return {"type": attr_type, "value": value_to_json(attr_type, value)}


def tagged_from_json(v: Any, where: str = "value") -> Any:
    """Read what :func:`tagged_to_json` writes; BadJsonError (a ValueError) if malformed."""
    check_keys(v, where, ("type", "value"), ("type", "value"))
    return value_from_json(read_str(v["type"], where), v["value"], where)
