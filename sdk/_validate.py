"""The rules every OpDef must satisfy (TensorFlow's ValidateOpDef), all problems at once."""

from __future__ import annotations

import re
from typing import Any

from opmarket.sdk._dtypes import DType, dtype_from_spec_name
from opmarket.sdk._opdef import ArgDef, AttrDef, AttrType, OpDef
from opmarket.sdk._values import (
    ATTR_BASE_TYPES,
    FuncValue,
    TaggedValue,
    TensorShape,
    TensorValue,
)

__all__ = ["check_attr_value", "is_valid_op_name", "opdef_problems", "validate_opdef"]

_OP_NAME = re.compile(r"[A-Z][A-Za-z0-9_]*(?:>[A-Z][A-Za-z0-9_]*)*")

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "int": (int,),
    "float": (float, int),
    "bool": (bool,),
    "type": (DType, int),
    "shape": (TensorShape,),
    "tensor": (TensorValue,),
    "func": (FuncValue,),
}


def is_valid_op_name(name: str) -> bool:
    """CamelCase, optionally after ``Namespace>`` prefixes; names starting ``_`` are internal."""
    return name.startswith("_") or _OP_NAME.fullmatch(name) is not None


def _type_problem(value: Any, attr_type: str) -> str | None:
    """What is wrong with ``value`` as an ``attr_type`` value (TensorFlow's AttrValueHasType)."""
    base, is_list = AttrType.parse(attr_type)
    if isinstance(value, TaggedValue):  # read from a file holding another kind of value
        if value.type == "none":
            return f"the value is missing (expected {attr_type})"
        return f"holds a {value.type} value where {attr_type} is expected"
    items = value if is_list else (value,)
    if is_list and not isinstance(value, tuple):
        return f"expected a list of {base}, got {value!r}"
    for item in items:
        ok = isinstance(item, _PY_TYPES[base]) and not (
            base in ("int", "float") and isinstance(item, bool)
        )
        if not ok:
            return f"expected {base}, got {item!r}"
        if base == "type":
            if item not in DType._value2member_map_:
                return f"{item} is not a valid dtype number"
            dt = DType(item)
            if dt.is_ref:
                return f"a type value may not be a reference type ({dt.spec_name})"
            if dt is DType.INVALID:
                return "a type value may not be DT_INVALID"
    return None


def check_attr_value(value: Any, attr: AttrDef) -> str | None:
    """Why ``value`` is not acceptable for ``attr`` (type, minimum, allowed values), or None."""
    problem = _type_problem(value, attr.type)
    if problem is not None:
        return f"attr {attr.name!r}: {problem}"
    if attr.has_minimum:
        if attr.type == "int":
            if value < attr.minimum:
                return f"attr {attr.name!r} is {value}, below its minimum of {attr.minimum}"
        elif len(value) < attr.minimum:
            return (
                f"attr {attr.name!r} has {len(value)} element(s), fewer than its minimum "
                f"of {attr.minimum}"
            )
    if attr.allowed_values is not None:
        if attr.base_type not in ("type", "string"):
            return f"attr {attr.name!r}: allowed values are not supported for type {attr.type}"
        items = value if attr.is_list else (value,)
        for item in items:
            if item not in attr.allowed_values:
                shown = ", ".join(_show(v) for v in attr.allowed_values)
                return f"attr {attr.name!r} may not be {_show(item)}; allowed: {shown}"
    return None


def _show(v: Any) -> str:
    if isinstance(v, DType):
        return v.spec_name
    return repr(v)


def _check_attr(attr: AttrDef, names: set[str]) -> list[str]:
    out: list[str] = []
    if attr.name in names:
        out.append(f"duplicate name {attr.name!r}")
    names.add(attr.name)
    if dtype_from_spec_name(attr.name) is not None:
        out.append(f"attr {attr.name!r} may not be named like a dtype")
    base, is_list = AttrType.parse(attr.type)
    if base not in ATTR_BASE_TYPES:
        out.append(f"attr {attr.name!r} has unknown type {attr.type!r}")
        return out
    if attr.has_minimum:
        if attr.type != "int" and not is_list:
            out.append(f"attr {attr.name!r} of type {attr.type} may not have a minimum")
        elif is_list and attr.minimum < 0:
            out.append(
                f"attr {attr.name!r} is a list; its minimum must be >= 0, not {attr.minimum}"
            )
    elif attr.minimum != 0:
        out.append(f"attr {attr.name!r} has a minimum of {attr.minimum} without has_minimum")
    if attr.allowed_values is not None:
        problem = _type_problem(attr.allowed_values, f"list({base})")
        if problem is not None:
            out.append(f"attr {attr.name!r}: allowed values: {problem}")
    if attr.default is not None:
        problem = check_attr_value(attr.default, attr)
        if problem is not None:
            out.append(f"default: {problem}")
    return out


def _check_arg(arg: ArgDef, op: OpDef, is_output: bool, names: set[str]) -> list[str]:
    where = f"{'output' if is_output else 'input'} {arg.name!r}"
    out: list[str] = []
    if arg.name in names:
        out.append(f"duplicate name {arg.name!r}")
    names.add(arg.name)
    has_type = arg.type is not DType.INVALID
    if not (has_type or arg.type_attr or arg.type_list_attr):
        out.append(f"{where} has no type")
        return out
    if arg.number_attr:
        number = op.attr(arg.number_attr)
        if number is None:
            out.append(f"{where}: length attr {arg.number_attr!r} does not exist")
        elif number.type != "int":
            out.append(
                f"{where}: length attr {number.name!r} must have type int, not {number.type}"
            )
        elif not number.has_minimum:
            out.append(f"{where}: length attr {number.name!r} must have a minimum")
        elif number.minimum < 0:
            out.append(f"{where}: length attr {number.name!r} must have a minimum >= 0")
        if arg.type_list_attr:
            out.append(f"{where} cannot have both a length attr and a list(type) attr")
        elif has_type + bool(arg.type_attr) != 1:
            out.append(f"{where} must have exactly one of a dtype or a type attr")
    elif has_type + bool(arg.type_attr) + bool(arg.type_list_attr) != 1:
        out.append(f"{where} must have exactly one of a dtype, a type attr or a list(type) attr")
    if arg.type_attr:
        attr = op.attr(arg.type_attr)
        if attr is None:
            out.append(f"{where}: type attr {arg.type_attr!r} does not exist")
        elif attr.type != "type":
            out.append(f"{where}: attr {attr.name!r} used as its type has type {attr.type}")
    elif arg.type_list_attr:
        attr = op.attr(arg.type_list_attr)
        if attr is None:
            out.append(f"{where}: type list attr {arg.type_list_attr!r} does not exist")
        elif attr.type != "list(type)":
            out.append(f"{where}: attr {attr.name!r} used as its types has type {attr.type}")
    elif arg.type.is_ref:
        out.append(
            f"{where}: illegal reference type {arg.type.spec_name}; "
            f"write Ref({arg.type.base.spec_name}) instead"
        )
    return out


def opdef_problems(op: OpDef) -> list[tuple[str, str, str]]:
    """Every way ``op`` breaks the OpDef rules as (kind, name, message); kind is ``op``,
    ``attr``, ``input`` or ``output``, name the attr or argument concerned."""
    out: list[tuple[str, str, str]] = []
    if not is_valid_op_name(op.name):
        out.append(
            (
                "op",
                op.name,
                f"invalid op name {op.name!r}: use CamelCase, optionally after a 'Namespace>' "
                "prefix (e.g. 'Opm>ZeroOut')",
            )
        )
    names: set[str] = set()
    for attr in op.attrs:
        out.extend(("attr", attr.name, m) for m in _check_attr(attr, names))
    for arg in op.inputs:
        out.extend(("input", arg.name, m) for m in _check_arg(arg, op, False, names))
    for arg in op.outputs:
        out.extend(("output", arg.name, m) for m in _check_arg(arg, op, True, names))
    return out


def validate_opdef(op: OpDef) -> list[str]:
    """Every way ``op`` breaks the OpDef rules, as messages; an empty list when it is valid."""
    return [message for _, _, message in opdef_problems(op)]
