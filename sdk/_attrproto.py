"""Attr values between the Python model and TensorFlow's AttrValue protobuf."""

from __future__ import annotations

from typing import Any

from opmarket.sdk._dtypes import DType
from opmarket.sdk._errors import InvalidArgumentError
from opmarket.sdk._opdef import AttrType
from opmarket.sdk._tfproto import FULL_TYPE_IDS, messages
from opmarket.sdk._values import (
    TENSOR_VALUE_FIELDS,
    AttrValue,
    FullType,
    FuncValue,
    TaggedValue,
    TensorShape,
    TensorValue,
    normalize_double,
    normalize_float,
)

__all__ = [
    "full_type_from_proto",
    "full_type_to_proto",
    "proto_field_for",
    "shape_from_proto",
    "shape_to_proto",
    "tagged_from_proto",
    "value_from_proto",
    "value_to_proto",
]

# attr base type -> AttrValue field
_FIELD = {
    "string": "s",
    "int": "i",
    "float": "f",
    "bool": "b",
    "type": "type",
    "shape": "shape",
    "tensor": "tensor",
    "func": "func",
}
_TYPE_OF_FIELD = {v: k for k, v in _FIELD.items()}
_FULL_TYPE_NAMES = {v: k for k, v in FULL_TYPE_IDS.items()}


def proto_field_for(base_type: str) -> str:
    """The AttrValue field that holds a value of ``base_type`` (``i`` for ``int``)."""
    return _FIELD[base_type]


def _decode(b: bytes) -> str:
    # AttrValue strings are bytes; surrogateescape keeps non-UTF-8 bytes round-trippable.
    return b.decode("utf-8", "surrogateescape")


def _encode(s: str) -> bytes:
    return s.encode("utf-8", "surrogateescape")


def shape_from_proto(p: Any) -> TensorShape:
    names = tuple(d.name for d in p.dim) if any(d.name for d in p.dim) else ()
    if p.unknown_rank:
        return TensorShape(None)
    return TensorShape(tuple(int(d.size) for d in p.dim), names)


def shape_to_proto(shape: TensorShape, out: Any) -> None:
    out.SetInParent()
    if shape.dims is None:
        out.unknown_rank = True
    else:
        for i, d in enumerate(shape.dims):
            dim = out.dim.add(size=d)
            if shape.names and shape.names[i]:
                dim.name = shape.names[i]


def _tensor_from_proto(p: Any) -> TensorValue:
    values: list[tuple[str, tuple[Any, ...]]] = []
    for name in TENSOR_VALUE_FIELDS:
        vals = getattr(p, name)
        if len(vals):
            if name == "string_val":
                values.append((name, tuple(_decode(v) for v in vals)))
            elif name in ("float_val", "scomplex_val"):
                values.append((name, tuple(normalize_float(v) for v in vals)))
            elif name in ("double_val", "dcomplex_val"):
                values.append((name, tuple(normalize_double(v) for v in vals)))
            else:
                values.append((name, tuple(vals)))
    rest = type(p)()
    for name in _TENSOR_EXTRA_FIELDS:
        if name == "float8_val":
            if p.float8_val:
                rest.float8_val = p.float8_val
        else:
            getattr(rest, name).extend(getattr(p, name))
    return TensorValue(
        extra=rest.SerializeToString(deterministic=True),
        dtype=DType(p.dtype) if p.dtype in DType._value2member_map_ else int(p.dtype),
        shape=shape_from_proto(p.tensor_shape) if p.HasField("tensor_shape") else None,
        values=tuple(values),
        content=bytes(p.tensor_content),
        version_number=int(p.version_number),
    )


def _tensor_to_proto(t: TensorValue, out: Any) -> None:
    out.SetInParent()
    out.dtype = int(t.dtype)
    if t.shape is not None:
        shape_to_proto(t.shape, out.tensor_shape)
    if t.version_number:
        out.version_number = t.version_number
    if t.content:
        out.tensor_content = t.content
    if t.extra:
        out.MergeFromString(t.extra)
    for name, vals in t.values:
        field = getattr(out, name)
        field.extend(_encode(v) for v in vals) if name == "string_val" else field.extend(vals)


_TENSOR_EXTRA_FIELDS = ("resource_handle_val", "variant_val", "float8_val")


def _func_from_proto(p: Any) -> FuncValue:
    attrs = tuple(sorted((k, tagged_from_proto(v)) for k, v in p.attr.items()))
    return FuncValue(name=p.name, attrs=attrs)


def _func_to_proto(f: FuncValue, out: Any) -> None:
    out.SetInParent()
    out.name = f.name
    for key, tagged in f.attrs:
        out.attr[key].CopyFrom(value_to_proto(tagged.type, tagged.value))


def _scalar_from(base: str, v: Any) -> Any:
    if base == "string":
        return _decode(v)
    if base == "int":
        return int(v)
    if base == "float":
        return normalize_float(v)
    if base == "bool":
        return bool(v)
    if base == "type":
        return DType(v) if v in DType._value2member_map_ else int(v)
    if base == "shape":
        return shape_from_proto(v)
    if base == "tensor":
        return _tensor_from_proto(v)
    if base == "func":
        return _func_from_proto(v)
    raise InvalidArgumentError(f"unknown attr type {base!r}")


def value_from_proto(attr_type: str, p: Any) -> AttrValue:
    """The Python value of AttrValue ``p`` read as ``attr_type`` (``int``, ``list(shape)``, ...).

    A ``type`` value outside the DataType enum comes back as a plain int for the validator.
    """
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        return tuple(_scalar_from(base, v) for v in getattr(p.list, _FIELD[base]))
    return _scalar_from(attr_type, getattr(p, _FIELD[attr_type]))


def _scalar_to(base: str, v: Any, container: Any, field: str, repeated: bool) -> None:
    if base in ("shape", "tensor", "func"):
        target = getattr(container, field).add() if repeated else getattr(container, field)
        if base == "shape":
            shape_to_proto(v, target)
        elif base == "tensor":
            _tensor_to_proto(v, target)
        else:
            _func_to_proto(v, target)
        return
    raw: Any = _encode(v) if base == "string" else int(v) if base == "type" else v
    if repeated:
        getattr(container, field).append(raw)
    else:
        setattr(container, field, raw)


def value_to_proto(attr_type: str, value: AttrValue) -> Any:
    """A new AttrValue message holding ``value`` as ``attr_type``."""
    out = messages()["AttrValue"]()
    if attr_type == "none":
        return out
    if attr_type == "placeholder":
        out.placeholder = value
        return out
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        out.list.SetInParent()
        for v in value:
            _scalar_to(base, v, out.list, _FIELD[base], repeated=True)
    else:
        _scalar_to(attr_type, value, out, _FIELD[attr_type], repeated=False)
    return out


def tagged_from_proto(p: Any) -> TaggedValue:
    """A self-describing AttrValue (as found inside a func value) to a TaggedValue."""
    which = p.WhichOneof("value")
    if which is None:
        return TaggedValue("none", None)
    if which == "list":
        for field, base in _TYPE_OF_FIELD.items():
            if len(getattr(p.list, field)):
                return TaggedValue(f"list({base})", value_from_proto(f"list({base})", p))
        return TaggedValue("list(int)", ())
    if which == "placeholder":
        return TaggedValue("placeholder", p.placeholder)
    base = _TYPE_OF_FIELD[which]
    return TaggedValue(base, value_from_proto(base, p))


def full_type_from_proto(p: Any) -> FullType:
    which = p.WhichOneof("attr")
    return FullType(
        type_id=_FULL_TYPE_NAMES.get(p.type_id, str(p.type_id)),
        args=tuple(full_type_from_proto(a) for a in p.args),
        s=p.s if which == "s" else None,
        i=int(p.i) if which == "i" else None,
    )


def full_type_to_proto(ft: FullType, out: Any) -> None:
    out.SetInParent()
    out.type_id = FULL_TYPE_IDS[ft.type_id] if ft.type_id in FULL_TYPE_IDS else int(ft.type_id)
    for a in ft.args:
        full_type_to_proto(a, out.args.add())
    if ft.s is not None:
        out.s = ft.s
    if ft.i is not None:
        out.i = ft.i


def format_value(attr_type: str, value: AttrValue) -> str:
    """``value`` in the text a spec default or TensorFlow's text format would use."""
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        return "[" + ", ".join(format_value(base, v) for v in value) + "]"
    from google.protobuf import text_format  # only here: its import costs most users time

    p = value_to_proto(attr_type, value)
    text = text_format.MessageToString(p, as_one_line=True)
    field = _FIELD[attr_type]
    prefix = f"{field}: " if attr_type not in ("shape", "tensor", "func") else f"{field} "
    text = text.removeprefix(prefix).strip()
    return text
