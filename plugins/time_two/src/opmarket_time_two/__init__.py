"""TimeTwo: the ExampleFunctor of TensorFlow's "Adding a new op" guide (out = 2 * in).

The op and its CPU kernels come from the pybind11 library (``time_two.cc``). The CUDA kernel
is not in this distribution: the GPU companion ``opmarket-time-two-cuda13`` (the extra
``cuda13``: ``pip install 'opmarket-time-two[cuda13]'``) registers it for this op.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from opmarket.sdk import (
    DType,
    GradientOp,
    hookimpl,
    input_generator,
    library_declarations,
    reference,
    register_gradient,
    shape_fn,
    unchanged,
)
from opmarket_time_two import _time_two

__all__ = ["register"]

OP = "Opm>TimeTwo"


@register_gradient(OP)
def time_two_grad(op: GradientOp, grad: np.ndarray[Any, Any]) -> list[Any]:
    return [grad * 2]


@reference(OP)
def time_two_reference(input: np.ndarray[Any, Any]) -> Any:
    return (input * 2).astype(input.dtype)


@input_generator(OP)
def time_two_inputs(rng: np.random.Generator, types: dict[str, DType]) -> Any:
    npdt = types["T"].numpy
    assert npdt is not None
    shape = tuple(int(d) for d in rng.integers(0, 7, int(rng.integers(0, 4))))
    if npdt.kind == "i":
        info = np.iinfo(npdt)  # the whole range: 2 * x wraps around as numpy's does
        x = rng.integers(info.min, info.max, shape, dtype=npdt, endpoint=True)
    else:
        x = (rng.standard_normal(shape) * 1e3).astype(npdt)
    return [x], {}


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """TimeTwo and its CPU kernels (the GPU kernel: the cuda13 companion)."""
    register(
        *library_declarations(_time_two),
        shape_fn(OP, unchanged),
        time_two_grad,
        time_two_reference,
        time_two_inputs,
    )
