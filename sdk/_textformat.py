"""TensorFlow's protobuf text format for OpDef and OpList (``ops.pbtxt``, ops history files)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from google.protobuf import text_format

from opmarket.sdk._attrproto import (
    full_type_from_proto,
    full_type_to_proto,
    tagged_from_proto,
    value_to_proto,
)
from opmarket.sdk._dtypes import DType
from opmarket.sdk._errors import DocumentError
from opmarket.sdk._opdef import ArgDef, AttrDef, Deprecation, OpDef
from opmarket.sdk._pbtxtreader import attr_type_ok, read_oplist, value_for_attr
from opmarket.sdk._tfproto import messages

__all__ = ["opdef_from_proto", "opdef_to_proto", "opdefs_from_pbtxt", "opdefs_to_pbtxt"]

_FLAGS = (
    "is_commutative",
    "is_aggregate",
    "is_stateful",
    "allows_uninitialized_input",
    "is_distributed_communication",
)


# Python's printer writes 1.0 where TensorFlow's C++ printer writes 1; match TensorFlow.
_FLOAT_ZERO_FRACTION = re.compile(
    r"^(\s*(?:f|float_val|double_val|scomplex_val|dcomplex_val): -?[0-9]+)\.0$", re.M
)


def _arg_from_proto(p: Any) -> ArgDef:
    dtype = DType(p.type) if p.type in DType._value2member_map_ else DType.INVALID
    return ArgDef(
        name=p.name,
        type=dtype,
        type_attr=p.type_attr,
        number_attr=p.number_attr,
        type_list_attr=p.type_list_attr,
        is_ref=p.is_ref,
        description=p.description,
        full_type=(
            full_type_from_proto(p.experimental_full_type)
            if p.HasField("experimental_full_type")
            else None
        ),
    )


def _value_from_proto(attr_type: str, p: Any) -> Any:
    """The value of AttrValue ``p`` if it holds an ``attr_type`` value; otherwise what it does
    hold, as a TaggedValue, which validation rejects as TensorFlow's AttrValueHasType does."""
    return value_for_attr(attr_type, tagged_from_proto(p))


def _attr_from_proto(p: Any) -> AttrDef:
    typed = attr_type_ok(p.type)
    list_type = p.type if p.type.startswith("list(") else f"list({p.type})"
    return AttrDef(
        name=p.name,
        type=p.type,
        default=(
            _value_from_proto(p.type, p.default_value)
            if typed and p.HasField("default_value")
            else None
        ),
        allowed_values=(
            _value_from_proto(list_type, p.allowed_values)
            if typed and p.HasField("allowed_values")
            else None
        ),
        has_minimum=p.has_minimum,
        minimum=int(p.minimum),
        description=p.description,
    )


def opdef_from_proto(p: Any) -> OpDef:
    """An OpDef message to the model."""
    return OpDef(
        name=p.name,
        inputs=tuple(_arg_from_proto(a) for a in p.input_arg),
        outputs=tuple(_arg_from_proto(a) for a in p.output_arg),
        attrs=tuple(_attr_from_proto(a) for a in p.attr),
        control_outputs=tuple(p.control_output),
        deprecation=(
            Deprecation(p.deprecation.version, p.deprecation.explanation)
            if p.HasField("deprecation")
            else None
        ),
        summary=p.summary,
        description=p.description,
        **{flag: getattr(p, flag) for flag in _FLAGS},
    )


def _arg_to_proto(arg: ArgDef, out: Any) -> None:
    out.name = arg.name
    if arg.description:
        out.description = arg.description
    if arg.type is not DType.INVALID:
        out.type = int(arg.type)
    if arg.type_attr:
        out.type_attr = arg.type_attr
    if arg.number_attr:
        out.number_attr = arg.number_attr
    if arg.type_list_attr:
        out.type_list_attr = arg.type_list_attr
    if arg.is_ref:
        out.is_ref = True
    if arg.full_type is not None:
        full_type_to_proto(arg.full_type, out.experimental_full_type)


def opdef_to_proto(op: OpDef) -> Any:
    """The model to a new OpDef message."""
    p = messages()["OpDef"]()
    p.name = op.name
    for arg in op.inputs:
        _arg_to_proto(arg, p.input_arg.add())
    for arg in op.outputs:
        _arg_to_proto(arg, p.output_arg.add())
    p.control_output.extend(op.control_outputs)
    for attr in op.attrs:
        a = p.attr.add(name=attr.name, type=attr.type)
        if attr.default is not None:
            a.default_value.CopyFrom(value_to_proto(attr.type, attr.default))
        if attr.description:
            a.description = attr.description
        if attr.has_minimum:
            a.has_minimum = True
        if attr.minimum:
            a.minimum = attr.minimum
        if attr.allowed_values is not None:
            list_type = attr.type if attr.is_list else f"list({attr.type})"
            a.allowed_values.CopyFrom(value_to_proto(list_type, attr.allowed_values))
    if op.deprecation is not None:
        p.deprecation.version = op.deprecation.version
        p.deprecation.explanation = op.deprecation.explanation
    if op.summary:
        p.summary = op.summary
    if op.description:
        p.description = op.description
    for flag in _FLAGS:
        if getattr(op, flag):
            setattr(p, flag, True)
    return p


def opdefs_from_pbtxt(text: str, source: str = "<text>") -> list[OpDef]:
    """Read an OpList (``op { ... }`` repeated, as ops.pbtxt and history files hold) or one
    bare OpDef. Repeated ops are kept, in file order."""
    ops = read_oplist(text)  # the common spelling, about 6x faster than protobuf's parser
    if ops is not None:
        return ops
    return _opdefs_from_pbtxt_protobuf(text, source)


def _opdefs_from_pbtxt_protobuf(text: str, source: str) -> list[OpDef]:
    """opdefs_from_pbtxt with protobuf's own parser: any spelling, and its error messages."""
    msgs = messages()
    oplist = msgs["OpList"]()
    try:
        text_format.Parse(text, oplist)
        protos = list(oplist.op)
    except text_format.ParseError as list_error:
        single = msgs["OpDef"]()
        try:
            text_format.Parse(text, single)
        except text_format.ParseError:
            raise DocumentError(source, f"not TensorFlow text format: {list_error}") from None
        protos = [single]
    try:
        return [opdef_from_proto(p) for p in protos]
    except ValueError as exc:
        raise DocumentError(source, str(exc)) from None


def opdefs_to_pbtxt(ops: Iterable[OpDef]) -> str:
    """An OpList in text format, as TensorFlow writes ops.pbtxt."""
    oplist = messages()["OpList"]()
    for op in ops:
        oplist.op.add().CopyFrom(opdef_to_proto(op))
    return _FLOAT_ZERO_FRACTION.sub(r"\1", str(text_format.MessageToString(oplist)))
