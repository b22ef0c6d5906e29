"""What a framework bridge needs from opmarket, whatever the framework: the ops to bridge,
built-in ops the framework already has, attr values from framework values (one way to read
a dtype, one way to read a shape), the grouping of flat tensors into the op's arguments, and
the choice and order of kernels to register (native before Python).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opmarket._bridge import _registry
from opmarket._bridge._shapes import num_outputs, output_shapes
from opmarket.sdk import (
    DType,
    InvalidArgumentError,
    KernelSpec,
    OpDef,
    OpmarketError,
    TensorShape,
    as_dtype,
    check_attr_value,
)

__all__ = [
    "NATIVE_PRIORITY_BOOST",
    "BridgeError",
    "KernelPlan",
    "bridged_ops",
    "flatten_outputs",
    "group_inputs",
    "group_outputs",
    "is_native",
    "kernel_plan",
    "normalize_attr",
    "normalize_dtype",
    "normalize_shape",
    "num_outputs",
    "output_shapes",
]

#: Added to a native kernel's priority inside a framework, so that it wins over a Python
#: kernel of the same op, device and types.
NATIVE_PRIORITY_BOOST = 1000


class BridgeError(OpmarketError, RuntimeError):
    """A framework bridge cannot do what was asked: a clash with the framework's own ops,
    a shim that does not build, a kernel the framework cannot host."""


def bridged_ops() -> tuple[list[OpDef], list[OpDef]]:
    """(plugin ops, built-in ops) of the process registry after loading every plugin: the
    ops a bridge must register, and those it maps to the framework's own."""
    _registry.load_all()
    own: list[OpDef] = []
    builtin: list[OpDef] = []
    for op_def in _registry.registry():
        (builtin if _registry.builtin(op_def.name) else own).append(op_def)
    return own, builtin


def normalize_dtype(value: Any) -> DType:
    """A DType from a DType, a numpy dtype or scalar type (``jnp.float32`` too), a name
    (``"int32"``, ``"DT_INT32"``), a DataType number, or a framework dtype object that has
    ``as_datatype_enum`` (TensorFlow's); a bridge whose framework has dtypes of its own
    (torch) maps them to numpy's first."""
    if isinstance(value, DType):
        return value
    enum = getattr(value, "as_datatype_enum", None)
    if isinstance(enum, int):
        return DType(enum)
    if isinstance(value, np.integer):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return DType(value)
        except ValueError:
            raise InvalidArgumentError(f"unknown DataType number {value!r}") from None
    try:
        return as_dtype(value)
    except OpmarketError as exc:
        raise InvalidArgumentError(str(exc)) from None


def normalize_attr(op: OpDef, name: str, value: Any) -> Any:
    """``value`` for attr ``name`` of ``op`` in opmarket's form (dtypes as DType, lists as
    lists), checked against the attr's type, minimum and allowed values; InvalidArgumentError
    quoting the op, the attr and the value otherwise."""
    attr = op.attr(name)
    if attr is None:
        known = ", ".join(a.name for a in op.attrs) or "none"
        raise InvalidArgumentError(f"{op.name}: unknown attr {name!r} (its attrs: {known})")
    base = attr.base_type
    items = list(value) if attr.is_list and isinstance(value, list | tuple) else None

    def one(v: Any) -> Any:
        if base == "type":
            return normalize_dtype(v)
        if base == "shape":
            return normalize_shape(v)
        if base == "string" and isinstance(v, bytes):
            return v.decode("utf-8", "surrogateescape")
        return v

    if base in ("tensor", "func"):  # numpy arrays and functions: checked by the kernel
        return value
    value = tuple(one(v) for v in items) if items is not None else one(value)
    problem = check_attr_value(value, attr)
    if problem is not None:
        raise InvalidArgumentError(f"{op.name}: {problem}")
    return list(value) if isinstance(value, tuple) else value


def normalize_shape(value: Any) -> TensorShape:
    """A shape attr from a framework value: a TensorShape, None (unknown rank), a list or
    tuple of dims, or a framework shape with ``dims`` (TensorFlow's); None or a negative
    dim is an unknown one (-1)."""
    if isinstance(value, TensorShape):
        return value
    dims = getattr(value, "dims", value)
    if dims is None:
        return TensorShape(None)
    sizes = [getattr(d, "value", d) for d in dims]  # TensorFlow's Dimension holds .value
    return TensorShape(tuple(-1 if d is None or int(d) < 0 else int(d) for d in sizes))


def is_native(spec: KernelSpec, *, bridge_version: int = 1) -> bool:
    """Whether a kernel is a C-ABI plugin's that the host can run for a bridge whose shim
    has ``bridge_version`` (its body runs with no Python)."""
    return _registry.native_handle(spec, bridge_version=bridge_version) is not None


@dataclass(frozen=True)
class KernelPlan:
    """One kernel as a framework registers it: the opmarket kernel, the label and priority
    it gets there, and whether it runs natively."""

    spec: KernelSpec
    label: str
    priority: int
    native: bool


def _overlaps(a: KernelSpec, b: KernelSpec) -> bool:
    for attr, types in a.constraints:
        other = b.constraint(attr)
        if other is not None and not set(types) & set(other):
            return False
    return True


def kernel_plan(
    op: str, *, devices: Sequence[str] = ("CPU",), native_ok: bool = True, bridge_version: int = 1
) -> list[KernelPlan]:
    """The kernels to register for ``op`` on ``devices``: every kernel under its own label,
    native ones with NATIVE_PRIORITY_BOOST added; and a labelled native kernel also without
    its label when no unlabelled native kernel overlaps it, so that by default native wins
    over Python. ``native_ok=False`` treats every kernel as a Python one; ``bridge_version``
    is the framework shim's OPMB_BRIDGE_API_VERSION (version 2 reads list attrs)."""
    kernels = [k for k in _registry.registry().kernels(op) if k.device in devices]
    plans: list[KernelPlan] = []
    for k in kernels:
        native = native_ok and is_native(k, bridge_version=bridge_version)
        priority = k.priority + (NATIVE_PRIORITY_BOOST if native else 0)
        plans.append(KernelPlan(k, k.label, priority, native))
    for k in kernels:
        if not (native_ok and is_native(k, bridge_version=bridge_version)) or not k.label:
            continue
        if any(
            p.native and not p.label and p.spec.device == k.device and _overlaps(p.spec, k)
            for p in plans
        ):
            continue
        plans.append(KernelPlan(k, "", k.priority + NATIVE_PRIORITY_BOOST + 1, True))
    return plans


def group_inputs(op: OpDef, attrs: Mapping[str, Any], flat: list[Any]) -> list[Any]:
    """Flat input tensors as the op's arguments: a list argument's tensors as one list."""
    out: list[Any] = []
    pos = 0
    for arg in op.inputs:
        if arg.number_attr or arg.type_list_attr:
            n = int(attrs[arg.number_attr]) if arg.number_attr else len(attrs[arg.type_list_attr])
            out.append(flat[pos : pos + n])
            pos += n
        else:
            out.append(flat[pos])
            pos += 1
    return out


def group_outputs(op: OpDef, attrs: Mapping[str, Any], flat: Sequence[Any]) -> Any:
    """Flat output tensors as the op returns them: one value, a tuple for several outputs
    (a list output's tensors as one list), None for none."""
    grouped: list[Any] = []
    pos = 0
    for arg, n in zip(op.outputs, num_outputs(op, attrs), strict=True):
        grouped.append(list(flat[pos : pos + n]) if arg.is_list else flat[pos])
        pos += n
    if len(grouped) == 1:
        return grouped[0]
    return tuple(grouped) if grouped else None


def flatten_outputs(op: OpDef, result: Any) -> list[Any]:
    """A kernel's result (one value, or a tuple for several outputs) as flat output tensors:
    a list output's tensors one by one."""
    items = list(result) if len(op.outputs) != 1 else [result]
    flat: list[Any] = []
    for arg, item in zip(op.outputs, items, strict=True):
        if arg.number_attr or arg.type_list_attr:
            flat.extend(item)
        else:
            flat.append(item)
    return flat
