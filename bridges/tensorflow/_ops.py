"""``opmarket.tensorflow.ops``: a TensorFlow wrapper per opmarket op, with the call shape of
``opmarket.ops`` (inputs positional, attrs keyword-only, inferred attrs left out) plus
TensorFlow's ``name=`` and a kernel ``label=``."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opmarket._bridge import (
    BoundedCache,
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


@dataclass(frozen=True, slots=True)
class _Eager:
    """An eager call bound once for a call signature: the attrs as TensorFlow's
    ``execute`` takes them and how many outputs come back."""

    op: OpDef
    attrs: dict[str, Any]
    flat_attrs: tuple[Any, ...]
    num_outputs: int
    single: bool

    def run(self, flat: Sequence[Any], name: str | None = None) -> Any:
        from tensorflow.python.eager import context, execute

        outs = execute.execute(
            self.op.name,
            self.num_outputs,
            inputs=flat,
            attrs=self.flat_attrs,
            ctx=context.context(),
            name=name,
        )
        if execute.must_record_gradient():
            execute.record_gradient(self.op.name, flat, self.flat_attrs, outs)
        return outs[0] if self.single else group_outputs(self.op, self.attrs, outs)


def _keep(
    entry: _Eager,
    inputs: Sequence[Any],
    flat: Sequence[Any],
    keep: Callable[[Callable[[Sequence[Any]], Any]], None],
) -> None:
    """Hand ``keep`` the eager call for later calls of this signature, if each input went
    in as it came (an eager tensor) or as numpy's conversion of it (an array the binding
    kept the dtype of); else nothing."""
    import tensorflow as tf
    from tensorflow.python.framework.ops import EagerTensor

    convert = []
    for x, f in zip(inputs, flat, strict=True):
        if x.__class__ is EagerTensor and f is x:
            convert.append(False)
        elif x.__class__ is np.ndarray and f.dtype.as_numpy_dtype == x.dtype:
            convert.append(True)
        else:
            return
    if not any(convert):
        keep(entry.run)
        return
    to_tensor = tf.convert_to_tensor
    keep(lambda xs: entry.run([to_tensor(x) if c else x for x, c in zip(xs, convert, strict=True)]))


def call_op(
    op: OpDef,
    inputs: Sequence[Any],
    given: Mapping[str, Any],
    *,
    label: str = "",
    name: str | None = None,
    derived: bool = False,
    keep: Callable[[Callable[[Sequence[Any]], Any]], None] | None = None,
) -> Any:
    """Run or add ``op`` in TensorFlow: eagerly, or as a node of the graph being built
    (``derived``: a gradient op the bridge made, called with its forward op's attrs).
    ``keep`` is handed an eager call, bound, when nothing in it depends on more than the
    call's signature (eager tensors and numpy arrays taken as they are), for the wrapper
    to reuse on later calls of that signature."""
    import tensorflow as tf
    from tensorflow.python.eager import execute
    from tensorflow.python.framework import op_def_library
    from tensorflow.python.framework import ops as tf_ops

    eager = tf.executing_eagerly()
    if eager and label:
        # Eager execution takes no kernel label: run a one-node function whose node has it.
        fn = _labelled(op, label, given)
        out = fn(*inputs)
        if keep is not None and all(isinstance(x, tf_ops.EagerTensor) for x in inputs):
            keep(lambda xs: fn(*xs))
        return out
    try:
        ensure_op(op)
        flat, attrs, inferred = _bind(op, inputs, given, derived=derived)
        flat_attrs: list[Any] = []
        for a in op.attrs:
            flat_attrs += [a.name, _attrs.to_tf(a, attrs[a.name])]
        if eager:
            counts = num_outputs(op, attrs)
            single = len(counts) == 1 and not op.outputs[0].is_list
            entry = _Eager(op, attrs, tuple(flat_attrs), sum(counts), single)
            if keep is not None:
                _keep(entry, inputs, flat, keep)
            return entry.run(flat, name)
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


#: Calls kept per op at most; a new signature finding them full empties them first (the
#: registry's BoundedCache, the policy of opmarket.ops' prepared calls).
MAX_KEPT = 1024


def _frozen(value: Any) -> Any:
    """A keyword's value in a call key: its class beside it, a list's items' too."""
    if value.__class__ is list or value.__class__ is tuple:
        return (value.__class__, *((v.__class__, v) for v in value))
    return (value.__class__, value)


def _call_key(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an eager call's bound form depends on: each input's class and dtype, and the
    keywords as given."""
    key = tuple([(a.__class__, a.dtype) for a in args])
    return key + tuple([(k, _frozen(v)) for k, v in kwargs.items()]) if kwargs else key


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

    from tensorflow.python.eager import context

    eagerly = context.executing_eagerly
    # Eager calls bound once per signature (the inputs' classes and dtypes, the keywords
    # as given), as opmarket.ops' wrappers keep theirs: a repeated call goes straight to
    # TensorFlow's execute (or, with a label, to its one-node function). Only ops without
    # list inputs.
    fast: BoundedCache[Any, Callable[[Sequence[Any]], Any]] = BoundedCache(MAX_KEPT)
    kept = fast.data  # read directly: a hit costs one dict lookup
    n_in = len(op.inputs) if not any(a.is_list for a in op.inputs) else -1

    def typed(*args: Any, **kwargs: Any) -> Any:
        key = entry = None
        if len(args) == n_in and eagerly():
            try:
                key = _call_key(args, kwargs)
                entry = kept.get(key)
            except (TypeError, AttributeError):  # an unhashable keyword, an input with no dtype
                key = None
            if entry is not None:
                return entry(list(args))
        bound = sig.bind(*args, **kwargs)
        values = bound.arguments
        given = {n: values[n] for n in attr_names if n in values}
        label = str(values.get("label", "")) if "label" in extra else ""
        name = values.get("name") if "name" in extra else None
        keep = None if key is None or name is not None else functools.partial(fast.put, key)
        # Type attrs that inputs infer may still be given (they must then agree).
        return call_op(
            op, [values[a.name] for a in op.inputs], given, label=label, name=name, keep=keep
        )

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
