"""What an op's arguments are once its attrs are known: counts and dtypes per argument."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opmarket.sdk import ArgDef, DType, OpDef

__all__ = ["arg_dtypes", "args_dtypes", "attrs_with_defaults", "inferred_attrs"]


def arg_dtypes(arg: ArgDef, attrs: Mapping[str, Any]) -> tuple[DType, ...] | None:
    """The dtypes of the tensors ``arg`` stands for under ``attrs``, or None if unknowable."""
    if arg.type_list_attr:
        types = attrs.get(arg.type_list_attr)
        if not isinstance(types, tuple) or not all(isinstance(t, DType) for t in types):
            return None
        return types
    if arg.type_attr:
        dtype = attrs.get(arg.type_attr)
        if not isinstance(dtype, DType):
            return None
    else:
        dtype = arg.type
    if arg.number_attr:
        n = attrs.get(arg.number_attr)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            return None
        return (dtype,) * n
    return (dtype,)


def args_dtypes(args: tuple[ArgDef, ...], attrs: Mapping[str, Any]) -> list[DType] | None:
    """The flat dtypes of all of ``args`` in order, or None if some cannot be known."""
    out: list[DType] = []
    for arg in args:
        types = arg_dtypes(arg, attrs)
        if types is None:
            return None
        out.extend(types)
    return out


def attrs_with_defaults(op: OpDef, attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` plus the default of every attr of ``op`` not given."""
    out = dict(attrs)
    for a in op.attrs:
        if a.name not in out and a.default is not None:
            out[a.name] = a.default
    return out


def inferred_attrs(op: OpDef) -> frozenset[str]:
    """Attrs a caller never passes: they follow from the inputs (TensorFlow's inferred attrs)."""
    out: set[str] = set()
    for arg in op.inputs:
        for name in (arg.type_attr, arg.number_attr, arg.type_list_attr):
            if name:
                out.add(name)
    return frozenset(out)
