"""PyTorch operator schemas generated from OpDefs, as text (no torch needed: ``compat-check``
compares them too), and the framework parameters they are made of.

Inputs are ``Tensor`` arguments; a type attr inferred from the inputs is not an argument
(the tensors' dtypes dispatch); a type attr that cannot be inferred is a keyword-only
``ScalarType`` (optional, None meaning its default, when it has one); every other attr is a
keyword-only argument with its default. A labelled kernel (``c_abi``) is an overload of
the same schema (``opm::zero_out.c_abi``), not an argument. Parameter names follow
``opmarket.ops``: inputs positional, attrs keyword-only, a name that is a Python keyword or
starts with ``_`` made usable.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from opmarket.sdk._opdef import AttrDef, OpDef, py_name, snake_case

__all__ = [
    "FRAMEWORK_OWN_OPS",
    "Param",
    "ParamKind",
    "backward_schema",
    "forward_schema",
    "framework_namespace",
    "parameters",
    "torch_schemas",
    "unsupported",
]

#: opmarket's built-in graph ops (``opmarket.registry.BUILTIN_OPS``): every framework has its
#: own, so no bridge registers them (tests/bridges/test_bridge.py keeps the two equal).
FRAMEWORK_OWN_OPS = frozenset({"AddN", "Const", "Identity", "NoOp", "Placeholder"})

# Attr types a framework parameter can carry; others (tensor, func, list(type), ...) make
# the op unavailable in the frameworks, with the reason.
_ATTR_TYPES = {
    "int",
    "float",
    "bool",
    "string",
    "type",
    "shape",
    "list(int)",
    "list(float)",
    "list(bool)",
    "list(string)",
    "list(shape)",
}


class ParamKind(enum.Enum):
    """What a keyword parameter of a bridged op carries."""

    DTYPE = "dtype"  #: a type attr not inferred from the inputs
    ATTR = "attr"  #: any other attr


@dataclass(frozen=True, slots=True)
class Param:
    """A keyword-only parameter: its Python name, the attr, and what it carries."""

    name: str
    attr: AttrDef
    kind: ParamKind

    @property
    def required(self) -> bool:
        """True when the attr has no default."""
        return self.attr.default is None


def parameters(op: OpDef) -> tuple[list[str], list[Param]]:
    """The op's input names and its keyword-only parameters (attrs the inputs do not infer),
    named as ``opmarket.ops.<op>`` names them."""
    inferred: set[str] = set()
    for arg in op.inputs:
        inferred.update(n for n in (arg.type_attr, arg.number_attr, arg.type_list_attr) if n)
    taken: set[str] = set()
    inputs = [py_name(a.name, taken) for a in op.inputs]
    params = [
        Param(
            py_name(a.name, taken),
            a,
            ParamKind.DTYPE if a.type == "type" else ParamKind.ATTR,
        )
        for a in op.attrs
        if a.name not in inferred
    ]
    return inputs, params


def framework_namespace(op: OpDef) -> str:
    """The op's namespace in lower snake case (``opm``), ``opmarket`` for an op without one:
    ``torch.ops.<namespace>``."""
    if not op.namespace:
        return "opmarket"
    return "_".join(snake_case(p) for p in op.namespace.split(">"))


def unsupported(op: OpDef) -> str | None:
    """Why a framework cannot carry the op (list arguments, attrs no framework parameter
    holds), or None when it can."""
    lists = [a.name for a in (*op.inputs, *op.outputs) if a.is_list]
    if lists:
        return f"list arguments ({', '.join(lists)})"
    odd = [f"{p.name}: {p.attr.type}" for p in parameters(op)[1] if p.attr.type not in _ATTR_TYPES]
    if odd:
        return f"attrs of types the bridges do not carry ({', '.join(odd)})"
    return None


_SCALARS = {"int": "int", "float": "float", "bool": "bool", "string": "str"}


def _literal(value: Any, base: str) -> str | None:
    """``value`` as a schema default of type ``base``; None if a schema cannot spell it."""
    if base == "bool":
        return "True" if value else "False"
    if base == "int":
        return str(int(value))
    if base == "float":
        return repr(float(value)) if math.isfinite(value) else None
    if base == "string":
        return json.dumps(value) if isinstance(value, str) and value.isascii() else None
    return None


def _param(p: Param) -> str:
    attr = p.attr
    if p.kind is ParamKind.DTYPE:
        return f"ScalarType {p.name}" if p.required else f"ScalarType? {p.name}=None"
    base = attr.type[5:-1] if attr.is_list else attr.type
    if base == "shape":  # dims, -1 for an unknown one; None: the default
        kind = "int[][]" if attr.is_list else "int[]"
        return f"{kind} {p.name}" if p.required else f"{kind}? {p.name}=None"
    kind = _SCALARS[base] + ("[]" if attr.is_list else "")
    if p.required:
        return f"{kind} {p.name}"
    default = attr.default
    if attr.is_list:
        items = [_literal(v, base) for v in default]  # type: ignore[union-attr]
        if base in ("int", "float", "bool") and all(i is not None for i in items):
            return f"{kind} {p.name}=[{', '.join(str(i) for i in items)}]"
    else:
        text = _literal(default, base)
        if text is not None:
            return f"{kind} {p.name}={text}"
    return f"{kind}? {p.name}=None"  # None: opmarket's default


def forward_schema(op: OpDef) -> str:
    """``(Tensor to_zero, *, int preserve_index=0) -> Tensor``."""
    inputs, params = parameters(op)
    args = [f"Tensor {n}" for n in inputs]
    kwargs = [_param(p) for p in params]
    outs = ["Tensor"] * len(op.outputs)
    ret = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"({', '.join([*args, *(['*', *kwargs] if kwargs else [])])}) -> {ret}"


def backward_schema(op: OpDef) -> str:
    """The gradient op's: inputs, outputs and output gradients in, one gradient per input
    out (zeros where the op's gradient gives none)."""
    inputs, params = parameters(op)
    args = [f"Tensor {n}" for n in inputs]
    args += [f"Tensor out_{i}" for i in range(len(op.outputs))]
    args += [f"Tensor grad_{i}" for i in range(len(op.outputs))]
    kwargs = [_param(p) for p in params]
    return f"({', '.join([*args, *(['*', *kwargs] if kwargs else [])])}) -> Tensor[]"


def torch_schemas(op_def: OpDef, labels: Iterable[str] = ()) -> list[str]:
    """The full schemas ``import opmarket.torch`` registers for the op: its default
    overload and one overload per kernel label (``opm::zero_out.c_abi(...)``); none for an
    op the bridge cannot carry or a built-in graph op."""
    if op_def.name in FRAMEWORK_OWN_OPS or unsupported(op_def):
        return []
    tail = forward_schema(op_def)
    name = f"{framework_namespace(op_def)}::{op_def.python_name}"
    overloads = sorted({x for x in labels if x and x.isidentifier() and x != "default"})
    return [f"{name}{tail}", *(f"{name}.{x}{tail}" for x in overloads)]
