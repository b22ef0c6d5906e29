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
from opmarket.tensorflow._callbacks import shape_hint
from opmarket.tensorflow._generated import fast_path, generable, generated, plain_outputs
from opmarket.tensorflow._register import ensure_op

__all__ = ["call_op", "tf_op", "tf_ops", "wrapper"]

_wrappers: dict[tuple[str, int], Callable[..., Any]] = {}
#: What a wrapper keeps per call signature: a call of the inputs, or the fast path's call.
_Kept = Any


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
    """An eager call bound once for a call signature: the op TensorFlow runs (``op`` or,
    for a kernel label, the label's op), the attrs as TensorFlow's ``execute`` takes them
    (every one, and those the inputs do not infer) and how many outputs come back."""

    op: OpDef
    tf_name: str
    attrs: dict[str, Any]
    flat_attrs: tuple[Any, ...]
    given_attrs: tuple[Any, ...]
    num_outputs: int
    single: bool

    def run(self, flat: Sequence[Any], name: str | None = None) -> Any:
        from tensorflow.python.eager import context, execute

        outs = execute.execute(
            self.tf_name,
            self.num_outputs,
            inputs=flat,
            attrs=self.flat_attrs,
            ctx=context.context(),
            name=name,
        )
        if execute.must_record_gradient():
            execute.record_gradient(self.tf_name, flat, self.flat_attrs, outs)
        return outs[0] if self.single else group_outputs(self.op, self.attrs, outs)

    def fast(self, names: Sequence[str]) -> tuple[Any, ...] | None:
        """The call as TensorFlow's generated op wrappers make it (``TFE_Py_FastPathExecute``
        with the inputs and the attrs not inferred from them, ``names``; it infers the type
        attrs from the tensors and records the gradient), for eager tensors of any dtype:
        the op TensorFlow runs, what makes the result of the fast path's (None: it is the
        result), then each attr's value. None where this TensorFlow has no fast path, the
        outputs are not plain tensors (a list output comes back nested) or ``names`` are
        not the attrs given."""
        pairs = dict(zip(self.given_attrs[::2], self.given_attrs[1::2], strict=True))
        if fast_path() is None or not plain_outputs(self.op) or set(names) != set(pairs):
            return None

        def grouped(out: Any) -> Any:
            return group_outputs(self.op, self.attrs, out)

        post = None if self.single else grouped
        return (self.tf_name, post, *[pairs[n] for n in names])


def _to_tensor() -> Callable[[Any], Any]:
    import tensorflow as tf

    return tf.convert_to_tensor  # type: ignore[no-any-return]  # TensorFlow is untyped


def _keep(
    entry: _Eager,
    inputs: Sequence[Any],
    flat: Sequence[Any],
    keep: Callable[[_Kept], None],
    fast_attrs: Sequence[str] | None,
) -> None:
    """Hand ``keep`` the eager call for later calls of this signature, if each input went
    in as it came (an eager tensor) or as numpy's conversion of it (an array the binding
    kept the dtype of); else nothing. A wrapper that makes the fast path's call with the
    attrs ``fast_attrs`` keys an eager tensor by its class alone: it keeps that call (which
    depends on no dtype) for eager tensors, or a call of numpy arrays only (keyed by their
    dtypes), nothing else."""
    from tensorflow.python.framework.ops import EagerTensor

    convert = []
    for x, f in zip(inputs, flat, strict=True):
        if x.__class__ is EagerTensor and f is x:
            convert.append(False)
        elif x.__class__ is np.ndarray and f.dtype.as_numpy_dtype == x.dtype:
            convert.append(True)
        else:
            return
    if fast_attrs is not None:
        if not any(convert):
            fast = entry.fast(fast_attrs)
            if fast is not None:
                keep(fast)
            return
        if not all(convert):  # the fast path would convert an array to the type's default
            return
    if not any(convert):
        keep(lambda xs: entry.run(list(xs)))
    else:
        to_tensor = _to_tensor()
        keep(
            lambda xs: entry.run(
                [to_tensor(x) if c else x for x, c in zip(xs, convert, strict=True)]
            )
        )


def call_op(
    op: OpDef,
    inputs: Sequence[Any],
    given: Mapping[str, Any],
    *,
    label: str = "",
    name: str | None = None,
    derived: bool = False,
    keep: Callable[[_Kept], None] | None = None,
    fast_attrs: Sequence[str] | None = None,
) -> Any:
    """Run or add ``op`` in TensorFlow: eagerly, or as a node of the graph being built
    (``derived``: a gradient op the bridge made, called with its forward op's attrs).
    ``keep`` is handed an eager call, bound, when nothing in it depends on more than the
    call's signature (eager tensors and numpy arrays taken as they are), for the wrapper
    to reuse on later calls of that signature: the fast path's call (``_Eager.fast``) for
    a wrapper that makes it with the attrs ``fast_attrs``."""
    import tensorflow as tf
    from tensorflow.python.eager import execute
    from tensorflow.python.framework import op_def_library
    from tensorflow.python.framework import ops as tf_ops

    eager = tf.executing_eagerly()
    tf_name = op.name
    if eager and label:
        tf_name = ensure_op(op).labelled.get(label, "")
        if not tf_name:
            # No op of the label's kernels (an unknown label, TensorFlow's own op): run a
            # one-node function whose node has the label.
            fn = _labelled(op, label, given)
            out = fn(*inputs)
            eager_only = all(isinstance(x, tf_ops.EagerTensor) for x in inputs)
            if keep is not None and fast_attrs is None and eager_only:
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
            given_attrs = tuple(
                v
                for k in range(0, len(flat_attrs), 2)
                if flat_attrs[k] not in inferred
                for v in flat_attrs[k : k + 2]
            )
            entry = _Eager(op, tf_name, attrs, tuple(flat_attrs), given_attrs, sum(counts), single)
            if keep is not None:
                _keep(entry, inputs, flat, keep, fast_attrs)
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


def wrapper(op: OpDef) -> Callable[..., Any]:
    """The TensorFlow wrapper of ``op``: ``fn(*inputs, *, attrs..., label="", name=None)``."""
    key = (op.name, id(op))
    fn = _wrappers.get(key)
    if fn is not None:
        return fn
    # Named by the one rule of opmarket.ops and the other bridges (a keyword or a taken name
    # renamed: an attr ``class`` is the parameter ``class_``), mapped back to the attrs.
    names = parameters(op)
    in_names, attr_params = names
    params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in in_names]
    for p in attr_params:
        default = p.attr.default if p.attr.default is not None else inspect.Parameter.empty
        params.append(inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=default))
    attr_of = {p.name: p.attr.name for p in attr_params}
    taken = {p.name for p in params}
    extra = [n for n in ("label", "name") if n not in taken]
    params += [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default="" if n == "label" else None)
        for n in extra
    ]
    sig = inspect.Signature(params)
    # Eager calls bound once per signature (the inputs' classes and dtypes, the attrs), as
    # opmarket.ops' wrappers keep theirs: a repeated call goes straight to TensorFlow's
    # fast path of eager execution, as its own generated op wrappers do (a label runs its
    # label's op).
    kept: BoundedCache[Any, _Kept] = BoundedCache(MAX_KEPT)
    fast = kept.data  # the generated wrapper reads it directly: a hit is one dict lookup
    can_generate = generable(op, sig)
    # The fast path's calls, kept for eager tensors of any dtype, where it can make them.
    by_class = can_generate and fast_path() is not None and plain_outputs(op)
    fast_attrs = list(attr_of.values()) if by_class else None

    def check(inputs: Sequence[Any], given: dict[str, Any]) -> None:
        import tensorflow as tf

        try:
            _bind(op, inputs, given)
        except InvalidArgumentError as exc:
            raise tf.errors.InvalidArgumentError(None, None, str(exc)) from None

    def slow(inputs: Sequence[Any], given: dict[str, Any], label: Any, name: Any, key: Any) -> Any:
        keep = None if key is None else functools.partial(kept.put, key)
        return call_op(
            op, inputs, given, label=str(label), name=name, keep=keep, fast_attrs=fast_attrs
        )

    def typed(*args: Any, **kwargs: Any) -> Any:
        values = sig.bind(*args, **kwargs).arguments
        given = {a: values[n] for n, a in attr_of.items() if n in values}
        label = values.get("label", "") if "label" in extra else ""
        name = values.get("name") if "name" in extra else None
        return slow([values[n] for n in in_names], given, label, name, None)

    made = generated(op, sig, names, extra, calls=(slow, check), fast=fast, by_class=by_class)
    fn = (made if can_generate else None) or typed
    fn.__name__ = op.python_name
    fn.__qualname__ = op.python_name
    fn.__doc__ = (
        f"{op.name} as a TensorFlow op (opmarket.tensorflow).\n\n{op.summary}\n\n{op.description}"
    ).strip()
    fn.__signature__ = sig  # type: ignore[attr-defined]
    _wrappers[key] = fn
    return fn


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
