"""opmarket gradients as TensorFlow gradients: an op with an opmarket gradient function is
differentiable with ``tf.GradientTape`` and ``tf.gradients``; the gradient function (numpy)
runs through ``tf.numpy_function`` in the backward pass."""

from __future__ import annotations

from typing import Any

import numpy as np

from opmarket.registry import get_registry
from opmarket.sdk import GradientOp, OpDef
from opmarket.tensorflow._attrs import from_get_attr
from opmarket.tensorflow._register import registered

__all__ = ["register_gradients"]

_done: set[str] = set()


def _grad_fn(op_def: OpDef) -> Any:
    def grad(tf_op: Any, *grads: Any) -> Any:
        import tensorflow as tf

        spec = get_registry().gradient(op_def.name)
        assert spec is not None and spec.fn is not None
        fn = spec.fn
        inputs = list(tf_op.inputs)
        outputs = list(tf_op.outputs)
        attrs = {}
        for a in op_def.attrs:
            attrs[a.name] = from_get_attr(a, tf_op.get_attr(a.name))
        n_in, n_out = len(inputs), len(outputs)
        node_name = str(getattr(tf_op, "name", op_def.short_name))
        filled = [tf.zeros_like(o) if g is None else g for o, g in zip(outputs, grads, strict=True)]
        floating = [i for i, x in enumerate(inputs) if x.dtype.is_floating or x.dtype.is_complex]

        def backward(*values: Any) -> list[Any]:
            ins, outs, gs = values[:n_in], values[n_in : n_in + n_out], values[n_in + n_out :]
            gop = GradientOp(op_def, tuple(ins), tuple(outs), attrs, node_name)
            result = fn(gop, *gs)
            items = result if isinstance(result, list | tuple) else [result]
            return [
                np.zeros_like(ins[i])
                if items[i] is None
                else np.asarray(items[i], dtype=ins[i].dtype)
                for i in floating
            ]

        computed = tf.numpy_function(
            backward,
            [*inputs, *outputs, *filled],
            [inputs[i].dtype for i in floating],
            stateful=False,
        )
        if not isinstance(computed, list | tuple):  # one Tout: one tensor, not a list
            computed = [computed]
        out: list[Any] = [None] * n_in
        for i, value in zip(floating, computed, strict=True):
            value.set_shape(inputs[i].shape)
            out[i] = value
        return out

    return grad


def register_gradients() -> None:
    """Give TensorFlow the gradient of every bridged op that has one (once per op)."""
    from tensorflow.python.framework import ops as tf_ops

    reg = get_registry()
    for name, record in registered().items():
        if not record.own or name in _done:
            continue
        spec = reg.gradient(name)
        if spec is None:
            continue
        if spec.fn is None:
            tf_ops.NotDifferentiable(name)
        else:
            tf_ops.RegisterGradient(name)(_grad_fn(record.op_def))
        _done.add(name)
