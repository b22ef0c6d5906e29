"""Median pooling over NHWC windows, the seed's example of an op worth a fused native kernel.

``Opm>MedianPool`` takes MaxPool's ``ksize``, ``strides`` and ``padding`` and computes the
median of each window. Its spec and its C++ kernels (float, double; multi-threaded with
``opmarket::shard``, SIMD chosen at run time) come from the compiled library
(``median_pool.cc``); the numpy composition that defines it (sliding windows and
``numpy.median``), its shape function, gradient and input generator are here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from opmarket.sdk import (
    DType,
    GradientOp,
    InferenceContext,
    InvalidArgumentError,
    hookimpl,
    input_generator,
    library_declarations,
    reference,
    register_gradient,
    shape_fn,
)
from opmarket_median_pool import _median_pool

__all__ = [
    "check_attrs",
    "geometry",
    "median_pool_reference",
    "output_size",
    "register",
    "windows",
]

OP = "Opm>MedianPool"


def output_size(
    size: int | None, k: int, stride: int, padding: str, dim: str = "size"
) -> tuple[int | None, int]:
    """MaxPool's output size and padding before, for one spatial dimension (``dim`` names
    it in the error: ``rows``, ``cols``); None in, None out (an unknown size)."""
    if size is None:
        return None, 0
    if padding == "SAME":
        out = -(-size // stride)
        return out, max((out - 1) * stride + k - size, 0) // 2
    num = size - k + stride
    out = num // stride if num >= 0 else -(-num // stride)  # truncated, as TensorFlow's
    if out < 0:
        raise InvalidArgumentError(
            f"Computed output {dim} would be negative: {out} [input {dim}: {size}, "
            f"ksize: {k}, stride: {stride}]"
        )
    return out, 0


def check_attrs(ksize: Sequence[int], strides: Sequence[int], padding: str) -> None:
    """The checks the C++ kernel makes of the attrs (InvalidArgumentError, its messages)."""
    if len(ksize) != 4 or len(strides) != 4:
        raise InvalidArgumentError(
            "Sliding window ksize and stride fields must specify 4 dimensions"
        )
    if ksize[0] != 1 or strides[0] != 1:
        raise InvalidArgumentError("Pooling is not yet supported on the batch dimension.")
    if ksize[3] != 1 or strides[3] != 1:
        raise InvalidArgumentError("MedianPool does not pool over depth.")
    if min(*ksize[1:3], *strides[1:3]) < 1:
        raise InvalidArgumentError(
            f"Sliding window ksize {list(ksize)} and strides {list(strides)} must be positive"
        )
    if padding not in ("SAME", "VALID"):
        raise InvalidArgumentError(f"padding must be 'VALID' or 'SAME', got {padding!r}")


def geometry(
    shape: Sequence[int], ksize: Sequence[int], strides: Sequence[int], padding: str
) -> list[int]:
    """The 12 numbers of a pooling (n, h, w, c, kh, kw, sh, sw, out_h, out_w, top, left) for
    an NHWC ``shape``, checked as the C++ kernel checks them (InvalidArgumentError); the
    GPU companion's kernel takes them as they are."""
    if len(shape) != 4:
        raise InvalidArgumentError(f"MedianPool expects a 4-D NHWC input, got shape {shape}")
    check_attrs(ksize, strides, padding)
    n, h, w, c = shape
    oh, top = output_size(h, ksize[1], strides[1], padding, "rows")
    ow, left = output_size(w, ksize[2], strides[2], padding, "cols")
    assert oh is not None and ow is not None
    return [n, h, w, c, ksize[1], ksize[2], strides[1], strides[2], oh, ow, top, left]


def windows(
    x: np.ndarray[Any, Any], ksize: Sequence[int], strides: Sequence[int], padding: str
) -> tuple[np.ndarray[Any, Any], tuple[int, int]]:
    """The windows as a view ``(n, out_h, out_w, c, kh, kw)`` of the input, padded with NaN
    for SAME (a float64 copy then), and the padding before (rows, cols)."""
    n, h, w, c, kh, kw, sh, sw, oh, ow, top, left = geometry(x.shape, ksize, strides, padding)
    if oh == 0 or ow == 0:
        return np.zeros((n, oh, ow, c, kh, kw), x.dtype), (top, left)
    if padding == "SAME":
        bottom = (oh - 1) * sh + kh - h - top
        right = (ow - 1) * sw + kw - w - left
        x = np.pad(
            x.astype(np.float64),
            ((0, 0), (top, max(bottom, 0)), (left, max(right, 0)), (0, 0)),
            constant_values=np.nan,
        )
    view = sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::sh, ::sw]
    return view[:, :oh, :ow], (top, left)


@reference(OP)
def median_pool_reference(
    input: np.ndarray[Any, Any], ksize: Sequence[int], strides: Sequence[int], padding: str
) -> Any:
    """The numpy composition: every window, then numpy.median of each (for SAME, of its
    in-bounds values: numpy.nanmedian over NaN padding; a NaN of the input still gives NaN)."""
    view, _ = windows(input, ksize, strides, padding)
    if view.size == 0:
        return np.zeros(view.shape[:4], input.dtype)
    if padding == "VALID":
        return np.median(view, axis=(-2, -1)).astype(input.dtype)
    out = np.nanmedian(view, axis=(-2, -1))
    # An input NaN (not padding) makes its windows NaN, as numpy.median does.
    if np.isnan(input).any():
        bad = windows(np.isnan(input).astype(np.float64), ksize, strides, padding)[0]
        out[np.nansum(bad, axis=(-2, -1)) > 0] = np.nan
    return out.astype(input.dtype)


@shape_fn(OP)
def median_pool_shape(c: InferenceContext) -> None:
    shape = c.with_rank(c.input(0), 4)
    ksize, strides, padding = c.get_attr("ksize"), c.get_attr("strides"), c.get_attr("padding")
    check_attrs(ksize, strides, padding)
    if shape is None:
        c.set_output(0, (None, None, None, None))
        return
    n, h, w, ch = shape
    c.set_output(
        0,
        (
            n,
            output_size(h, ksize[1], strides[1], padding, "rows")[0],
            output_size(w, ksize[2], strides[2], padding, "cols")[0],
            ch,
        ),
    )


@register_gradient(OP)
def median_pool_grad(op: GradientOp, grad: np.ndarray[Any, Any]) -> list[Any]:
    """Each window's gradient flows to its median element (half to each of the two middle
    ones for an even count), summed where windows overlap (as MaxPool's grad does)."""
    (x,) = op.inputs
    ksize, strides, padding = op.get_attr("ksize"), op.get_attr("strides"), op.get_attr("padding")
    view, (top, left) = windows(np.asarray(x, np.float64), ksize, strides, padding)
    n, oh, ow, c, kh, kw = view.shape
    flat = view.reshape(n, oh, ow, c, kh * kw)
    order = np.argsort(flat, axis=-1)  # NaN padding sorts last
    count = np.sum(~np.isnan(flat), axis=-1, keepdims=True)
    lo = np.take_along_axis(order, (count - 1) // 2, axis=-1)[..., 0]
    hi = np.take_along_axis(order, count // 2, axis=-1)[..., 0]
    _, h, w, _ = np.shape(x)
    # The gradient of the (padded) array the windows were cut from, cropped to the input.
    padded = np.zeros(
        (n, max(h + top, (oh - 1) * strides[1] + kh), max(w + left, (ow - 1) * strides[2] + kw), c)
    )
    b, oy, ox, ch = np.indices((n, oh, ow, c))
    g = np.asarray(grad, np.float64) * 0.5
    for pick in (lo, hi):
        dy, dx = np.divmod(pick, kw)
        np.add.at(padded, (b, oy * strides[1] + dy, ox * strides[2] + dx, ch), g)
    return [padded[:, top : top + h, left : left + w].astype(np.asarray(x).dtype)]


@input_generator(OP)
def median_pool_inputs(rng: np.random.Generator, types: dict[str, DType]) -> Any:
    npdt = types["T"].numpy
    assert npdt is not None
    kh, kw = (3, 3) if rng.random() < 0.5 else (int(rng.integers(1, 5)), int(rng.integers(1, 5)))
    sh, sw = (1, 1) if rng.random() < 0.5 else (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
    padding = "SAME" if rng.random() < 0.5 else "VALID"
    shape = (
        int(rng.integers(1, 3)),
        int(rng.integers(kh, 20)),
        int(rng.integers(kw, 40)),
        int(rng.integers(1, 4)),
    )
    # Few distinct values: ties and equal middle pairs are common in images.
    x = rng.integers(-20, 20, shape).astype(npdt) / 4
    return [x], {"ksize": [1, kh, kw, 1], "strides": [1, sh, sw, 1], "padding": padding}


@hookimpl
def register(register: Callable[..., Any]) -> None:
    """MedianPool: the op and its C++ kernels, then what the Python side adds."""
    register(
        *library_declarations(_median_pool),
        median_pool_shape,
        median_pool_grad,
        median_pool_reference,
        median_pool_inputs,
    )
