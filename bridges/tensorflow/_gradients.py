"""opmarket gradients as TensorFlow gradients: an op with an opmarket gradient function is
differentiable with ``tf.GradientTape`` and ``tf.gradients``. The backward pass is a real
TensorFlow op of its own, ``<op>OpmBackward`` (as PyTorch's ``<op>_opm_backward``), whose
CPU kernel calls the opmarket gradient, so saved gradient functions (a SavedModel's train
step) load and run in a new process: no ``tf.numpy_function`` whose Python callback stays
behind."""

from __future__ import annotations

from typing import Any

import numpy as np

from opmarket._bridge import bridge_op, registry
from opmarket.sdk import OpDef, Shape
from opmarket.sdk import op as define_op
from opmarket.tensorflow._attrs import from_get_attr
from opmarket.tensorflow._register import register_derived_op, registered

__all__ = ["backward_op", "register_gradients"]

_done: set[str] = set()


def _type_of(spec: str) -> str:
    return spec.partition(":")[2]


def backward_op(op: OpDef) -> OpDef:
    """The gradient op of ``op``: its inputs, outputs (``out_i``) and output gradients
    (``grad_i``) in, one gradient per input (``d_<input>``, zeros where there is none) out;
    the attrs of ``op``."""
    b = define_op(f"{op.name}OpmBackward")
    for a in op.inputs:
        b.input(a.spec)
    for i, a in enumerate(op.outputs):
        b.input(f"out_{i}:{_type_of(a.spec)}")
    for i, a in enumerate(op.outputs):
        b.input(f"grad_{i}:{_type_of(a.spec)}")
    for a in op.inputs:
        b.output(f"d_{a.name}:{_type_of(a.spec)}")
    for attr in op.attrs:
        b.attr(attr.spec)
    return b.build()


def _register_backward(op_def: OpDef) -> OpDef:
    from tensorflow.python.framework import ops as tf_ops

    backward = backward_op(op_def)
    n_in, n_out = len(op_def.inputs), len(op_def.outputs)
    bridged = bridge_op(op_def.name)

    def shapes(inputs: list[Shape], attrs: dict[str, Any]) -> list[Shape]:
        return inputs[:n_in]

    def run(arrays: list[np.ndarray[Any, Any]], attrs: dict[str, Any]) -> list[Any]:
        xs, outs, gs = arrays[:n_in], arrays[n_in : n_in + n_out], arrays[n_in + n_out :]
        got = bridged.gradient(xs, outs, attrs, gs)
        return [np.zeros_like(x) if g is None else g for x, g in zip(xs, got, strict=True)]

    register_derived_op(backward, shapes, run)
    tf_ops.NotDifferentiable(backward.name)  # opmarket gradients are first order
    return backward


def _grad_fn(op_def: OpDef, backward: OpDef) -> Any:
    def grad(tf_op: Any, *grads: Any) -> Any:
        import tensorflow as tf
        from opmarket.tensorflow._ops import call_op

        inputs = list(tf_op.inputs)
        outputs = list(tf_op.outputs)
        attrs = {a.name: from_get_attr(a, tf_op.get_attr(a.name)) for a in op_def.attrs}
        filled = [tf.zeros_like(o) if g is None else g for o, g in zip(outputs, grads, strict=True)]
        result = call_op(backward, [*inputs, *outputs, *filled], attrs, derived=True)
        computed = list(result) if isinstance(result, tuple) else [result]
        return [
            g if x.dtype.is_floating or x.dtype.is_complex else None
            for x, g in zip(inputs, computed, strict=True)
        ]

    return grad


def register_gradients() -> None:
    """Give TensorFlow the gradient of every bridged op that has one (once per op)."""
    from tensorflow.python.framework import ops as tf_ops

    reg = registry()
    for name, record in registered().items():
        if not record.own or record.derived or name in _done:
            continue
        spec = reg.gradient(name)
        if spec is None:
            continue
        # the op and its labels' eager ops (a label's calls record their gradient under it)
        names = [name, *record.labelled.values()]
        if spec.fn is None:
            for n in names:
                tf_ops.NotDifferentiable(n)
        elif any(a.is_list for a in (*record.op_def.inputs, *record.op_def.outputs)):
            continue  # list arguments: no gradient op of one tensor per input
        else:
            grad = _grad_fn(record.op_def, _register_backward(record.op_def))
            for n in names:
                tf_ops.RegisterGradient(n)(grad)
        _done.add(name)
