"""The generated Python function of an op (``opmarket.ops.<op>``) and its docstring.

The per-call path is generated code: one dict lookup keyed by the input dtypes, the attr
values with their types and the device scope finds a prepared entry; everything else goes
through the dispatcher's ``slow_call``.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from opmarket.registry._binding import show_attr
from opmarket.registry._device import device_scope
from opmarket.registry._keys import typed
from opmarket.registry._signature import inferred_attrs
from opmarket.sdk import ArgDef, AttrDef, DType, OpDef
from opmarket.sdk._opdef import py_name

if TYPE_CHECKING:
    from opmarket.registry._dispatch import Dispatcher

__all__ = ["docstring", "make_wrapper", "python_call"]

_MISS = object()  # the generated wrapper's "not prepared for these shapes"


def _parameters(
    op: OpDef, keyword_attrs: Sequence[AttrDef]
) -> tuple[list[str], list[tuple[AttrDef, str]]]:
    """The wrapper's parameter names: the inputs', then each keyword attr's."""
    taken: set[str] = set()
    ins = [py_name(a.name, taken) for a in op.inputs]
    return ins, [(a, py_name(a.name, taken)) for a in keyword_attrs]


def python_call(op: OpDef) -> str:
    """The generated function's signature as a person reads it, defaults included:
    ``clip(x, *, clip_min=0.0, clip_max=6.0)``."""
    inferred = inferred_attrs(op)
    ins, attrs = _parameters(op, [a for a in op.attrs if a.name not in inferred])
    params = [*ins, *(["*"] if attrs else [])]
    params += [py if a.default is None else f"{py}={show_attr(a.default)}" for a, py in attrs]
    return f"{op.python_name}({', '.join(params)})"


def make_wrapper(d: Dispatcher) -> Callable[..., Any]:
    """Generate the op's Python function: inputs positional, non-inferred attrs keyword-only
    with their defaults, the fast path inline."""
    op = d.op_def
    ins, attrs = _parameters(op, d.keyword_attrs)
    env: dict[str, Any] = {
        "_cache": d.cache.data,
        "_slow": d.slow_call,
        "_nd": np.ndarray,
        "_dev": device_scope.get,
        "_typed": typed,
        "_miss": _MISS,
    }
    params = list(ins)
    if attrs:
        params.append("*")
    for i, (a, py) in enumerate(attrs):
        if a.default is None:
            params.append(py)
        else:
            env[f"_d{i}"] = a.default
            params.append(f"{py}=_d{i}")
    in_tuple = "".join(f"{x}, " for x in ins)
    attr_dict = "{" + ", ".join(f"{a.name!r}: {py}" for a, py in attrs) + "}"
    simple = not any(a.is_list for a in op.inputs)
    # Defined under a fixed name and renamed after: an op's Python name may be a keyword
    # (TensorFlow's Assert and If are assert and if).
    lines = [f"def _wrapper({', '.join(params)}):"]
    if simple:
        # The key holds each attr's type beside its value (a list attr's items too, as a
        # tuple): slow_call files the entry under exactly this key.
        key = "".join(f"{x}.dtype, " for x in ins) + "".join(
            f"_typed({py}), " if a.is_list else f"{py}.__class__, {py}, " for a, py in attrs
        )
        shape = (
            f"{ins[0]}.shape"
            if d.single_input
            else "(" + "".join(f"{x}.shape, " for x in ins) + ")"
        )
        single_out = len(op.outputs) == 1 and not op.outputs[0].is_list
        lines += [
            "    _k = None",
            "    try:",
            f"        _k = ({key}_dev())",
            "        _e = _cache[_k]",
            "    except (KeyError, AttributeError, TypeError):",
            f"        return _slow(({in_tuple}), {attr_dict}, _k)",
            f"    _s = {shape}",
            "    _l = _e.lock",
            "    if _l is not None:",  # a lifecycle kernel: check and compute under its lock
            "        with _l:",
            f"            _o = _e.fn({', '.join(ins)}) if _s == _e.shapes else _miss",
            "        if _o is _miss:",
            f"            return _e.run(({in_tuple}), _s)",
            "    elif _s != _e.shapes:",
            f"        return _e.run(({in_tuple}), _s)",
        ]
        # An attr named as a Python keyword (``class``) reaches the kernel through ``**``.
        plain = [f"{a.name}={py}" for a, py in attrs if not keyword.iskeyword(a.name)]
        spelled = ", ".join(f"{a.name!r}: {py}" for a, py in attrs if keyword.iskeyword(a.name))
        pass_attrs = ", ".join([*ins, *plain, *([f"**{{{spelled}}}"] if spelled else [])])
        lines += [
            "    else:",
            "        _m = _e.mode",
            "        if _m == 1:",
            f"            _o = _e.fn({pass_attrs})",
            "        elif _m == 2:",
            f"            _o = _e.fn({', '.join(ins)})",
            "        else:",
            f"            _o = _e.fn({''.join(f'{x}, ' for x in ins)}**_e.kw)",
        ]
        if single_out:
            lines += [
                "    if _o.__class__ is not _nd or _o.dtype is not _e.odt:",
                "        return _e.finish(_o)",
                "    return _o",
            ]
        else:
            lines.append("    return _e.finish(_o)")
    else:
        lines.append(f"    return _slow(({in_tuple}), {attr_dict})")
    exec("\n".join(lines), env)  # generated from the OpDef; names are sanitized above
    fn: Callable[..., Any] = env["_wrapper"]
    fn.__name__ = op.python_name
    fn.__doc__ = docstring(op, d)
    fn.__module__ = "opmarket.ops"
    fn.__qualname__ = op.python_name
    fn.__annotations__ = {}
    fn.__opmarket_op__ = op.name  # type: ignore[attr-defined]  # for introspection
    inspect.signature(fn)  # fail here, not at a user's call, if the signature is broken
    return fn


def docstring(op: OpDef, d: Dispatcher) -> str:
    """Summary, description, then Args (inputs and keyword attrs) and Returns."""
    lines = [op.summary or f"The {op.name} op.", ""]
    if op.description:
        lines += [op.description, ""]
    if op.inputs or d.keyword_attrs:
        lines.append("Args:")
    for a in op.inputs:
        lines.append(
            f"    {a.name}: {_arg_type(op, a)}." + (f" {a.description}" if a.description else "")
        )
    for attr in d.keyword_attrs:
        text = f"    {attr.name}: {attr.type}"
        if attr.has_minimum:
            text += f" >= {attr.minimum}"
        if attr.allowed_values is not None:
            text += " in {" + ", ".join(show_attr(v) for v in attr.allowed_values) + "}"
        text += f", default {show_attr(attr.default)}" if attr.default is not None else ", required"
        text += "." + (f" {attr.description}" if attr.description else "")
        lines.append(text)
    if op.outputs:
        lines += ["", "Returns:"]
        lines += [
            f"    {a.name}: {_arg_type(op, a)}." + (f" {a.description}" if a.description else "")
            for a in op.outputs
        ]
    return "\n".join(lines).rstrip() + "\n"


def _arg_type(op: OpDef, a: ArgDef) -> str:
    if a.type_list_attr:
        return f"A list of tensors with types {a.type_list_attr}"
    if a.type is not DType.INVALID:
        kind = f"A tensor of type {a.type.spec_name}"
    else:
        attr = op.attr(a.type_attr)
        allowed = attr.allowed_values if attr else None
        kind = f"A tensor of type {a.type_attr}" + (
            " in {" + ", ".join(show_attr(v) for v in allowed) + "}" if allowed else ""
        )
    if a.number_attr:
        kind = f"A list of {a.number_attr} tensors, each " + kind[2:].replace("tensor of ", "of ")
    return kind
