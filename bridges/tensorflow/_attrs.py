"""Attr values between opmarket and TensorFlow, and the comparison of an opmarket op with
TensorFlow's op of the same name."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from opmarket._bridge import normalize_dtype, normalize_shape
from opmarket.sdk import AttrDef, DType, FuncValue, OpDef, TensorShape, proto_field_for

__all__ = [
    "disagreement",
    "from_attr_value",
    "from_get_attr",
    "node_def_attrs",
    "signature",
    "to_tf",
]


def _base_from_proto(base: str, v: Any) -> Any:
    if base == "string":
        return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
    if base == "int":
        return int(v)
    if base == "float":
        return float(v)
    if base == "bool":
        return bool(v)
    if base == "type":
        return DType(int(v))
    if base == "shape":
        if v.unknown_rank:
            return TensorShape(None)
        return TensorShape(tuple(int(d.size) for d in v.dim))
    if base == "tensor":
        from tensorflow.python.framework import tensor_util

        return tensor_util.MakeNdarray(v)
    if base == "func":
        return FuncValue(v.name)
    raise ValueError(f"attr type {base!r} is not bridged")


def from_attr_value(attr: AttrDef, value: Any) -> Any:
    """A TensorFlow ``AttrValue`` proto as the Python value opmarket uses for ``attr``."""
    base = attr.base_type
    if attr.is_list:
        items = getattr(value.list, proto_field_for(base))
        return [_base_from_proto(base, v) for v in items]
    return _base_from_proto(base, getattr(value, proto_field_for(base)))


def _from_python(base: str, v: Any) -> Any:
    if base == "type":
        return normalize_dtype(v)
    if base == "string":
        return v.decode("utf-8", "surrogateescape") if isinstance(v, bytes) else str(v)
    if base in ("shape", "tensor", "func") and hasattr(v, "SerializeToString"):
        return _base_from_proto(base, v)
    if base == "shape":
        return normalize_shape(v)
    return v


def from_get_attr(attr: AttrDef, value: Any) -> Any:
    """What TensorFlow's ``op.get_attr(name)`` returns, as opmarket's value for ``attr``."""
    if attr.is_list:
        return [_from_python(attr.base_type, v) for v in value]
    return _from_python(attr.base_type, value)


def node_def_attrs(op: OpDef, serialized: bytes) -> dict[str, Any]:
    """The op's attrs of a serialized NodeDef, as opmarket values (internal ``_`` attrs and
    attrs the op does not declare are left out)."""
    from tensorflow.core.framework import node_def_pb2

    node = node_def_pb2.NodeDef.FromString(serialized)
    attrs: dict[str, Any] = {}
    for a in op.attrs:
        if a.name in node.attr:
            attrs[a.name] = from_attr_value(a, node.attr[a.name])
    return attrs


def _to_tf_base(base: str, v: Any) -> Any:
    if base == "type":
        return int(v.value) if isinstance(v, DType) else int(v)
    if base == "shape":
        import tensorflow as tf

        dims = v.dims if isinstance(v, TensorShape) else v
        if dims is None:
            return tf.TensorShape(None)
        return tf.TensorShape([None if d is None or d < 0 else int(d) for d in dims])
    if base == "tensor":
        from tensorflow.python.framework import tensor_util

        return tensor_util.make_tensor_proto(np.asarray(v))
    if base == "func":
        raise ValueError("func attrs are not bridged to TensorFlow")
    return v


def to_tf(attr: AttrDef, value: Any) -> Any:
    """An opmarket attr value as TensorFlow's op builders and eager execution take it."""
    base = attr.base_type
    if attr.is_list:
        return [_to_tf_base(base, v) for v in value]
    return _to_tf_base(base, value)


def _arg_key(arg: Any) -> tuple[Any, ...]:
    return (
        arg.name,
        int(arg.type),
        arg.type_attr,
        arg.number_attr,
        arg.type_list_attr,
        bool(arg.is_ref),
    )


def signature(op: OpDef) -> tuple[Any, ...]:
    """What must be equal for two registrations of an op to be one op (docs aside)."""
    return (
        op.name,
        tuple(_arg_key(a) for a in op.inputs),
        tuple(_arg_key(a) for a in op.outputs),
        tuple(
            (
                a.name,
                a.type,
                a.has_minimum,
                a.minimum,
                None if a.allowed_values is None else tuple(map(str, a.allowed_values)),
            )
            for a in op.attrs
        ),
    )


def disagreement(op: OpDef, theirs: Any) -> str:
    """Why opmarket's ``op`` is not TensorFlow's op ``theirs`` (an OpDef proto); "" when
    every input, output and attr agrees, TensorFlow allowing at least opmarket's types."""
    problems = []
    ours_in = [_arg_key(a) for a in op.inputs]
    their_in = [
        (a.name, int(a.type), a.type_attr, a.number_attr, a.type_list_attr, bool(a.is_ref))
        for a in theirs.input_arg
    ]
    if ours_in != their_in:
        problems.append(f"inputs differ: opmarket {ours_in}, TensorFlow {their_in}")
    ours_out = [_arg_key(a) for a in op.outputs]
    their_out = [
        (a.name, int(a.type), a.type_attr, a.number_attr, a.type_list_attr, bool(a.is_ref))
        for a in theirs.output_arg
    ]
    if ours_out != their_out:
        problems.append(f"outputs differ: opmarket {ours_out}, TensorFlow {their_out}")
    their_attrs: Mapping[str, Any] = {a.name: a for a in theirs.attr}
    for a in op.attrs:
        t = their_attrs.get(a.name)
        if t is None:
            problems.append(f"TensorFlow's has no attr {a.name!r}")
            continue
        if t.type != a.type:
            problems.append(f"attr {a.name!r} is {a.type} here, {t.type} in TensorFlow")
            continue
        if a.base_type == "type" and t.HasField("allowed_values"):
            allowed = {int(x) for x in t.allowed_values.list.type}
            ours = (
                {int(d.value) for d in (a.allowed_values or DType) if isinstance(d, DType)}
                if a.allowed_values is not None
                else None
            )
            if ours is None or not ours <= allowed:
                problems.append(f"attr {a.name!r} allows types TensorFlow's does not")
    extra = sorted(set(their_attrs) - {a.name for a in op.attrs})
    required = [n for n in extra if not their_attrs[n].HasField("default_value")]
    if required:
        problems.append(f"TensorFlow's requires attrs opmarket's lacks: {', '.join(required)}")
    return "; ".join(problems)
