"""``opmarket.tensorflow.ops``: a TensorFlow wrapper per opmarket op, with the call shape of
``opmarket.ops`` (inputs positional, attrs keyword-only, inferred attrs left out) plus
TensorFlow's ``name=`` and a kernel ``label=``."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from opmarket._bridge import (
    BridgeNamespace,
    bind_inputs,
    group_outputs,
    normalize_attr,
    normalize_dtype,
    num_outputs,
    op_def,
)
from opmarket.sdk import InvalidArgumentError, NotFoundError, OpDef
from opmarket.sdk.torch_schema import parameters
from opmarket.tensorflow import _attrs
from opmarket.tensorflow._register import ensure_op, shape_hint

__all__ = ["call_op", "tf_op", "tf_ops", "wrapper"]

_wrappers: dict[tuple[str, int], Callable[..., Any]] = {}


def _stand_in(op: OpDef, arg: str, tensor: Any) -> np.ndarray[Any, Any]:
    """An empty array of a tensor's dtype: what the shared binding reads the dtype from."""
    dtype = normalize_dtype(tensor.dtype)
    npdt = dtype.numpy
    if npdt is None or normalize_dtype(npdt) is not dtype:
        raise InvalidArgumentError(
            f"{op.name}: input {arg!r} is a {dtype.spec_name} tensor, which opmarket's "
            "ops do not take from TensorFlow"
        )
    return np.empty(0, npdt)


def _bind(
    op: OpDef, inputs: Sequence[Any], given: Mapping[str, Any], *, derived: bool = False
) -> tuple[list[Any], dict[str, Any], set[str]]:
    """(flat input tensors, every attr in opmarket's form, names of inferred attrs), by
    ``opmarket.ops``' own binding (``opmarket._bridge.bind_inputs``) on the tensors' dtypes;
    a Python value or numpy array becomes a tensor of the type that binding gives it. A
    ``derived`` op (a gradient op, not in opmarket's registry) takes its forward op's tensors
    and every attr as they are."""
    import tensorflow as tf

    attrs = {k: normalize_attr(op, k, v) for k, v in given.items()}
    params = {p.attr.name for p in parameters(op)[1]}
    inferred = {a.name for a in op.attrs} - params
    if derived:
        return [tf.convert_to_tensor(v) for v in inputs], attrs, inferred
    tensors: list[list[Any]] = []
    values: list[Any] = []
    for arg, value in zip(op.inputs, inputs, strict=True):
        items = list(value) if arg.is_list else [value]
        # a variable, or another tensor-like: its value, read on the tape
        ts = [tf.convert_to_tensor(v) if tf.is_tensor(v) else None for v in items]
        stand = [
            v if t is None else _stand_in(op, arg.name, t) for t, v in zip(ts, items, strict=True)
        ]
        tensors.append(ts)
        values.append(stand if arg.is_list else stand[0])
    bound, attrs = bind_inputs(op, values, attrs)
    flat: list[Any] = []
    for ts, arrays in zip(tensors, bound, strict=True):
        items = arrays if isinstance(arrays, list) else [arrays]
        flat += [
            tf.convert_to_tensor(a) if t is None else t for t, a in zip(ts, items, strict=True)
        ]
    return flat, attrs, inferred


def _node_name(op: OpDef) -> str:
    return op.short_name or "op"


def call_op(
    op: OpDef,
    inputs: Sequence[Any],
    given: Mapping[str, Any],
    *,
    label: str = "",
    name: str | None = None,
    derived: bool = False,
) -> Any:
    """Run or add ``op`` in TensorFlow: eagerly, or as a node of the graph being built
    (``derived``: a gradient op the bridge made, called with its forward op's attrs)."""
    import tensorflow as tf
    from tensorflow.python.eager import context, execute
    from tensorflow.python.framework import op_def_library
    from tensorflow.python.framework import ops as tf_ops

    eager = tf.executing_eagerly()
    if eager and label:
        # Eager execution takes no kernel label: run a one-node function whose node has it.
        return _labelled(op, label, given)(*inputs)
    try:
        ensure_op(op)
        flat, attrs, inferred = _bind(op, inputs, given, derived=derived)
        flat_attrs: list[Any] = []
        for a in op.attrs:
            flat_attrs += [a.name, _attrs.to_tf(a, attrs[a.name])]
        if eager:
            outs = execute.execute(
                op.name,
                sum(num_outputs(op, attrs)),
                inputs=flat,
                attrs=tuple(flat_attrs),
                ctx=context.context(),
                name=name,
            )
            if execute.must_record_gradient():
                execute.record_gradient(op.name, flat, tuple(flat_attrs), outs)
            return group_outputs(op, attrs, outs)
        keywords: dict[str, Any] = {}
        pos = 0
        for arg in op.inputs:
            n = len(list(inputs[op.inputs.index(arg)])) if arg.is_list else 1
            keywords[arg.name] = flat[pos : pos + n] if arg.is_list else flat[pos]
            pos += n
        for a in op.attrs:
            if a.name not in inferred:
                keywords[a.name] = _attrs.to_tf(a, attrs[a.name])
        graph = tf_ops.get_default_graph()
        labels = graph._kernel_label_map({op.name: label}) if label else contextlib.nullcontext()
        with shape_hint(op.name, attrs), labels:
            _, _, node, _ = op_def_library._apply_op_helper(
                op.name, name=name or _node_name(op), **keywords
            )
        outs = list(node.outputs)
        if execute.must_record_gradient():  # a GradientTape inside the function
            execute.record_gradient(op.name, list(node.inputs), tuple(flat_attrs), outs)
        return group_outputs(op, attrs, outs)
    except InvalidArgumentError as exc:
        if eager:
            raise tf.errors.InvalidArgumentError(None, None, str(exc)) from None
        # A plain ValueError while tracing, as TensorFlow's own ops raise (autograph passes
        # it through; an error type of its own would become a StagingError).
        raise ValueError(str(exc)) from None


_labelled_fns: dict[tuple[str, str, str], Any] = {}


def _labelled(op: OpDef, label: str, given: Mapping[str, Any]) -> Any:
    import tensorflow as tf

    key = (op.name, label, repr(sorted(given.items())))
    fn = _labelled_fns.get(key)
    if fn is None:

        def body(*inputs: Any) -> Any:
            return call_op(op, inputs, given, label=label)

        fn = _labelled_fns[key] = tf.function(body, autograph=False)
    return fn


def wrapper(op: OpDef) -> Callable[..., Any]:
    """The TensorFlow wrapper of ``op``: ``fn(*inputs, *, attrs..., label="", name=None)``."""
    key = (op.name, id(op))
    fn = _wrappers.get(key)
    if fn is not None:
        return fn
    inferred = (
        {a.type_attr for a in op.inputs if a.type_attr}
        | {a.number_attr for a in op.inputs if a.number_attr}
        | {a.type_list_attr for a in op.inputs if a.type_list_attr}
    )
    params = [inspect.Parameter(a.name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in op.inputs]
    attr_names = [a.name for a in op.attrs if a.name not in inferred]
    for a in op.attrs:
        if a.name in inferred:
            continue
        default = a.default if a.default is not None else inspect.Parameter.empty
        params.append(inspect.Parameter(a.name, inspect.Parameter.KEYWORD_ONLY, default=default))
    taken = {p.name for p in params}
    extra = [n for n in ("label", "name") if n not in taken]
    params += [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default="" if n == "label" else None)
        for n in extra
    ]
    sig = inspect.Signature(params)

    def run(*args: Any, **kwargs: Any) -> Any:
        bound = sig.bind(*args, **kwargs)
        values = bound.arguments
        given = {n: values[n] for n in attr_names if n in values}
        # Type attrs that inputs infer may still be given (they must then agree).
        return call_op(
            op,
            [values[a.name] for a in op.inputs],
            given,
            label=str(values.get("label", "")) if "label" in extra else "",
            name=values.get("name") if "name" in extra else None,
        )

    def typed(*args: Any, **kwargs: Any) -> Any:
        return run(*args, **kwargs)

    typed.__name__ = op.python_name
    typed.__qualname__ = op.python_name
    typed.__doc__ = (
        f"{op.name} as a TensorFlow op (opmarket.tensorflow).\n\n{op.summary}\n\n{op.description}"
    ).strip()
    typed.__signature__ = sig  # type: ignore[attr-defined]
    _wrappers[key] = typed
    return typed


def tf_op(name: str) -> Callable[..., Any]:
    """The TensorFlow wrapper of the registered op of full name ``name``."""
    found = op_def(name)
    if found is None:
        raise NotFoundError(f"no opmarket op {name!r} is installed")
    return wrapper(found)


def tf_ops() -> BridgeNamespace:
    """Every installed opmarket op as a TensorFlow function, named as in ``opmarket.ops``:
    ``ops.zero_out``, ``ops.opm.zero_out``, ``ops["Opm>ZeroOut"]``."""
    return BridgeNamespace(tf_op, "opmarket.tensorflow.ops")
