"""The TensorFlow wrappers' eager calls as generated code (as ``opmarket.ops`` makes its own
wrappers): a repeated call looks its kept call up by the inputs' classes and dtypes and the
attrs, and runs it, through TensorFlow's fast path of eager execution where it has one."""

from __future__ import annotations

import functools
import inspect
import keyword
from collections.abc import Callable
from typing import Any

from opmarket.sdk import OpDef
from opmarket.sdk.torch_schema import Param

__all__ = ["fast_path", "generable", "generated", "plain_outputs"]


@functools.cache
def fast_path() -> tuple[Any, type[Exception], type[Exception], Any] | None:
    """TensorFlow's fast path of eager execution: the function, its two exceptions and what
    turns the first into TensorFlow's error; None where a release lacks one of them."""
    try:
        from tensorflow.python import pywrap_tfe
        from tensorflow.python.eager import core

        return (
            pywrap_tfe.TFE_Py_FastPathExecute,
            core._NotOkStatusException,
            core._FallbackException,
            core._status_to_exception,
        )
    except (ImportError, AttributeError):
        return None


def _frozen(value: Any) -> Any:
    """A list attr's value in a call key: its class beside it, and each item's."""
    cls = value.__class__
    if cls is list or cls is tuple:  # map(type) runs in C, where a generator runs Python
        return (cls, tuple(value), tuple(map(type, value)))
    return (cls, value)


def plain_outputs(op: OpDef) -> bool:
    """Whether ``op`` has outputs and none is a list (the fast path nests a list output)."""
    return bool(op.outputs) and not any(a.is_list for a in op.outputs)


def generable(op: OpDef, sig: inspect.Signature) -> bool:
    """Whether ``op``'s wrapper can be generated code: no list inputs, and parameter names
    that Python takes and that the generated code's own (``_k``, ...) cannot clash with."""
    return not any(a.is_list for a in op.inputs) and all(
        n.isidentifier() and not keyword.iskeyword(n) and not n.startswith("_")
        for n in sig.parameters
    )


def generated(
    op: OpDef,
    sig: inspect.Signature,
    names: tuple[list[str], list[Param]],
    extra: list[str],
    *,
    calls: tuple[Callable[..., Any], Callable[..., Any]],
    fast: Any,
    by_class: bool,
) -> Callable[..., Any] | None:
    """The wrapper as generated code, as ``opmarket.ops`` makes its own: an eager call looks
    its kept call up in ``fast`` under the inputs' classes and dtypes (``by_class``: an
    eager tensor's class alone, its kept call being the fast path's) and the attrs with
    their classes (a list's items' too), and runs it; anything else goes to ``slow(inputs,
    attrs, label, name, key)``; a failing fast call is bound by ``check(inputs, attrs)``,
    which raises opmarket's error where opmarket refuses the call. None for an op with list
    inputs or a name a Python parameter cannot have (the wrapper then binds every call)."""
    slow, check = calls
    from tensorflow.python.eager import context
    from tensorflow.python.framework.ops import EagerTensor

    if not generable(op, sig):
        return None
    execute_fast, not_ok, fallback, to_exception = fast_path() or (None, (), (), None)
    env: dict[str, Any] = {
        "_fast": fast,
        "_slow": slow,
        "_cm": context,
        "_frozen": _frozen,
        "_check": check,
        "_et": EagerTensor,
        "_fpe": execute_fast,
        "_notok": not_ok,
        "_fallback": fallback,
        "_error": to_exception,
    }
    params = []
    for i, p in enumerate(sig.parameters.values()):
        if p.kind is inspect.Parameter.KEYWORD_ONLY and "*" not in params:
            params.append("*")
        if p.default is inspect.Parameter.empty:
            params.append(p.name)
        else:
            env[f"_d{i}"] = p.default
            params.append(f"{p.name}=_d{i}")
    ins, attrs = names  # the parameters' names (``sdk.py_name``), each attr's own beside it
    in_tuple = "".join(f"{x}, " for x in ins)
    # With the fast path, an eager tensor by its class alone (it infers the type attrs from
    # the tensor); else by its dtype number, which hashes in C where a DType hashes in Python.
    dtype = "_et" if by_class else "{x}._datatype_enum()"
    key = "".join(
        f"{dtype.format(x=x)} if {x}.__class__ is _et else ({x}.__class__, {x}.dtype), "
        for x in ins
    )
    key += "".join(
        f"_frozen({a.name}), " if a.attr.is_list else f"{a.name}.__class__, {a.name}, "
        for a in attrs
    )
    label = "label" if "label" in extra else '""'
    name = "name" if "name" in extra else "None"
    attr_dict = "{" + ", ".join(f"{a.attr.name!r}: {a.name}" for a in attrs) + "}"
    args = ", ".join([*ins, *(f"{a.attr.name!r}, _e[{2 + i}]" for i, a in enumerate(attrs))])
    # The context as TensorFlow's own generated wrappers read it, where it is as theirs is.
    ctx, eager = "_cm.context()", "_c.executing_eagerly()"
    if hasattr(context, "_context") and hasattr(context.context(), "_thread_local_data"):
        ctx, eager = "_cm._context or _cm.context()", "_c._thread_local_data.is_eager"
    lines = [
        f"def {op.python_name}({', '.join(params)}):",
        f"    _c = {ctx}",
        f"    if {name} is not None or not {eager}:",
        f"        return _slow(({in_tuple}), {attr_dict}, {label}, {name}, None)",
        "    _k = None",
        "    try:",
        f"        _k = ({key}{label})",
        "        _e = _fast[_k]",
        "    except (KeyError, AttributeError, TypeError):",
        f"        return _slow(({in_tuple}), {attr_dict}, {label}, None, _k)",
        "    if _e.__class__ is not tuple:",
        f"        return _e(({in_tuple}))",
        "    try:",
        f"        _o = _fpe(_c, _e[0], None, {args})",
        "    except _notok as _x:",  # opmarket's own message for a dtype it refuses
        f"        _check(({in_tuple}), {attr_dict})",
        "        raise _error(_x) from None",
        "    except _fallback:",  # what the fast path leaves to Python (op callbacks)
        f"        return _slow(({in_tuple}), {attr_dict}, {label}, None, None)",
        "    return _o if _e[1] is None else _e[1](_o)",
    ]
    exec("\n".join(lines), env)  # generated from the OpDef; names are checked above
    fn: Callable[..., Any] = env[op.python_name]
    return fn
