"""ZeroOut from TensorFlow's "Adding a new op" guide, with its kernel in C++ (pybind11).

The op's spec and its kernels for float, double and int32 come from the compiled library
(``zero_out.cc``); the shape function, the gradient, the numpy reference and the input
generator are here. Nothing is registered until opmarket calls :func:`register`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from opmarket.sdk import (
    DType,
    GradientOp,
    InferenceContext,
    hookimpl,
    input_generator,
    library_declarations,
    reference,
    register_gradient,
    shape_fn,
)
from opmarket_zero_out import _zero_out

__all__ = ["register"]

OP = "Opm>ZeroOut"


@shape_fn(OP)
def zero_out_shape(c: InferenceContext) -> None:
    # The vector check, at shape inference: the output has the input's shape.
    c.set_output(0, c.with_rank(c.input(0), 1))


@register_gradient(OP)
def zero_out_grad(op: GradientOp, grad: np.ndarray[Any, Any]) -> list[Any]:
    """Only the preserved entry reaches the output: the gradient is one-hot there."""
    (to_zero,) = op.inputs
    index = op.get_attr("preserve_index")
    out = np.zeros_like(to_zero)
    out[index] = grad[index]
    return [out]


@reference(OP)
def zero_out_reference(to_zero: np.ndarray[Any, Any], preserve_index: int = 0) -> Any:
    return np.where(np.arange(to_zero.shape[0]) == preserve_index, to_zero, np.zeros_like(to_zero))


@input_generator(OP)
def zero_out_inputs(rng: np.random.Generator, types: dict[str, DType]) -> Any:
    n = int(rng.integers(1, 50))
    npdt = types["T"].numpy
    assert npdt is not None
    x = (rng.standard_normal(n) * 100).astype(npdt)
    return [x], {"preserve_index": int(rng.integers(0, n))}


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """ZeroOut: the op and its C++ kernels, then what the Python side adds."""
    register(
        *library_declarations(_zero_out),
        zero_out_shape,
        zero_out_grad,
        zero_out_reference,
        zero_out_inputs,
    )
