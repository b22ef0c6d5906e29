"""LiteRT's custom-op example, ``Atan``, as an opmarket plugin.

The seed (LiteRT's "Custom operators") builds y = atan(x + offset) with a trainable offset,
converts it with ``allow_custom_ops`` and registers ``Atan`` through the C API's
init/prepare/invoke/free methods. Here the same op is a lifecycle kernel: created once per
attr set with its options bytes (init), ``prepare`` on new input shapes sets the output
shape (LiteRT's ResizeTensor), ``compute`` is invoke and ``close`` is free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from opmarket.sdk import (
    DType,
    GradientOp,
    InvalidArgumentError,
    Kernel,
    hookimpl,
    input_generator,
    kernel,
    op,
    reference,
    register_gradient,
    shape_fn,
    unchanged,
)

__all__ = ["ATAN", "AtanKernel", "atan_grad", "atan_inputs", "atan_reference", "register"]

_Array = np.ndarray[Any, Any]

ATAN = (
    op("Opm>Atan")
    .input("x: T")
    .output("y: T")
    .attr("T: {half, float, double} = DT_FLOAT")
    .doc(
        "Element-wise arc tangent, LiteRT's Atan custom op.\n\n"
        "x: the input, any shape.\ny: atan(x), the shape of x."
    )
    .build()
)

#: The options the kernel is registered with, as LiteRT hands a custom op its options:
#: a map of parameter names to values (JSON here, a flexbuffer there).
OPTIONS = json.dumps({"compute_dtype": "float64"}).encode()


@kernel("Opm>Atan", constraints={"T": ["half", "float", "double"]}, options=OPTIONS)
class AtanKernel(Kernel):
    """Init parses the options, prepare sizes the output, compute (invoke) fills it."""

    def __init__(self, attrs: Mapping[str, Any], options: bytes = b"") -> None:
        super().__init__(attrs, options)
        try:
            params = json.loads(options or b"{}")
        except ValueError:
            raise InvalidArgumentError(f"Atan: options are not a JSON map: {options!r}") from None
        unknown = sorted(set(params) - {"compute_dtype"})
        if unknown:
            raise InvalidArgumentError(f"Atan: unknown options {unknown}")
        self.compute_dtype = np.dtype(params.get("compute_dtype", "float64"))
        self.output_shape: tuple[int, ...] | None = None

    def prepare(self, *inputs: Any) -> None:
        # LiteRT's AtanPrepare: one input, one output of the input's shape.
        if len(inputs) != 1:
            raise InvalidArgumentError(f"Atan takes 1 input, got {len(inputs)}")
        self.output_shape = tuple(np.shape(inputs[0]))

    def compute(self, *inputs: Any) -> _Array:
        (x,) = inputs
        assert self.output_shape is not None, "prepare() runs before compute()"
        out = np.empty(self.output_shape, dtype=x.dtype)
        out[...] = np.arctan(x.astype(self.compute_dtype, copy=False))
        return out


atan_shape = shape_fn("Opm>Atan", unchanged)


@register_gradient("Opm>Atan")
def atan_grad(op: GradientOp, grad: _Array) -> list[_Array]:
    """d/dx atan(x) = 1 / (1 + x^2)."""
    (x,) = op.inputs
    return [(grad / (1 + np.square(x))).astype(x.dtype)]


@reference("Opm>Atan")
def atan_reference(x: _Array) -> _Array:
    return np.arctan(x.astype(np.float64)).astype(x.dtype)


@input_generator("Opm>Atan")
def atan_inputs(
    rng: np.random.Generator, types: Mapping[str, DType]
) -> tuple[list[_Array], dict[str, Any]]:
    shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(0, 3))))
    x = rng.standard_normal(shape) * 4
    return [np.asarray(x).astype(types["T"].numpy)], {}


@hookimpl
def register(register: Any) -> None:
    """Hand the op, its kernel, shape function, gradient, reference and generator over."""
    register(ATAN, AtanKernel, atan_shape, atan_grad, atan_reference, atan_inputs)
