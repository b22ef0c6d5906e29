"""PyTorch operator schemas generated from OpDefs, as text (no torch needed: ``compat-check``
compares them too).

Inputs are ``Tensor`` arguments; a type attr inferred from the inputs is not an argument
(the tensors' dtypes dispatch); a type attr that cannot be inferred is a keyword-only
``ScalarType`` (optional, None meaning its default, when it has one); every other attr is a
keyword-only argument with its default. A labelled kernel (``c_abi``) is an overload of
the same schema (``opm::zero_out.c_abi``), not an argument.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from opmarket._bridge._ops import BridgeOp, Param, ParamKind
from opmarket._bridge._registry import builtin
from opmarket.sdk import OpDef

__all__ = ["backward_schema", "forward_schema", "torch_schemas"]

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


def _kwargs(op: BridgeOp) -> list[str]:
    return [_param(p) for p in op.params]


def forward_schema(op: BridgeOp) -> str:
    """``(Tensor to_zero, *, int preserve_index=0) -> Tensor``."""
    args = [f"Tensor {n}" for n in op.input_names]
    kwargs = _kwargs(op)
    outs = ["Tensor"] * len(op.op_def.outputs)
    ret = outs[0] if len(outs) == 1 else f"({', '.join(outs)})"
    return f"({', '.join([*args, *(['*', *kwargs] if kwargs else [])])}) -> {ret}"


def backward_schema(op: BridgeOp) -> str:
    """The gradient op's: inputs, outputs and output gradients in, one gradient per input
    out (zeros where the op's gradient gives none)."""
    args = [f"Tensor {n}" for n in op.input_names]
    args += [f"Tensor out_{i}" for i in range(len(op.op_def.outputs))]
    args += [f"Tensor grad_{i}" for i in range(len(op.op_def.outputs))]
    kwargs = _kwargs(op)
    return f"({', '.join([*args, *(['*', *kwargs] if kwargs else [])])}) -> Tensor[]"


def torch_schemas(op_def: OpDef, labels: Iterable[str] = ()) -> list[str]:
    """The full schemas ``import opmarket.torch`` registers for the op: its default
    overload and one overload per kernel label (``opm::zero_out.c_abi(...)``); none for an
    op the bridge cannot carry or a built-in graph op."""
    op = BridgeOp(op_def)
    if op.unsupported or builtin(op.name):
        return []
    tail = forward_schema(op)
    name = f"{op.namespace}::{op.python_name}"
    overloads = sorted({x for x in labels if x and x.isidentifier() and x != "default"})
    return [f"{name}{tail}", *(f"{name}.{x}{tail}" for x in overloads)]
