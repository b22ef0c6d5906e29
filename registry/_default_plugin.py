"""The built-in ops' kernels, shape functions and gradients, registered as a plugin is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from opmarket.registry._builtins import BUILTIN_OPS
from opmarket.sdk import TensorValue
from opmarket.sdk._gradients import GradientOp, not_differentiable, register_gradient
from opmarket.sdk._hookspecs import hookimpl
from opmarket.sdk._kernel import kernel
from opmarket.sdk._shape_inference import (
    InferenceContext,
    merge_all_inputs,
    shape_fn,
    unchanged,
)

__all__ = ["register"]


@kernel("Identity")
def identity(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return x


@kernel("AddN")
def add_n(items: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    out = np.array(items[0], copy=True)
    for x in items[1:]:
        out += x
    return out


@kernel("Const")
def const(*, value: TensorValue) -> np.ndarray[Any, Any]:
    return value.to_numpy()


@kernel("NoOp")
def no_op() -> None:
    return None


@shape_fn("Const")
def const_shape(c: InferenceContext) -> None:
    value: TensorValue = c.get_attr("value")
    dims = value.shape.dims if value.shape is not None else ()
    c.set_output(0, None if dims is None else tuple(None if d < 0 else d for d in dims))


@shape_fn("Placeholder")
def placeholder_shape(c: InferenceContext) -> None:
    dims = c.get_attr("shape").dims
    c.set_output(0, None if dims is None else tuple(None if d < 0 else d for d in dims))


@register_gradient("Identity")
def identity_grad(op: GradientOp, grad: Any) -> Any:
    return grad


@register_gradient("AddN")
def add_n_grad(op: GradientOp, grad: Any) -> Any:
    return [[grad] * len(op.inputs[0])]


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """The built-in ops and what runs them."""
    register(
        *BUILTIN_OPS.values(),
        identity,
        add_n,
        const,
        no_op,
        shape_fn("Identity", unchanged),
        shape_fn("AddN", merge_all_inputs),
        const_shape,
        placeholder_shape,
        identity_grad,
        add_n_grad,
        not_differentiable("Placeholder"),
        not_differentiable("Const"),
        not_differentiable("NoOp"),
    )
