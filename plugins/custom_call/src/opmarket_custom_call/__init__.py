"""XLA's custom-call example, ``do_custom_call`` (A[i] = B[i % 128] + C[i]), as a plugin.

The seed hard-codes the sizes 128 and 2048 and suggests passing them instead; here they
travel in the call's opaque bytes (two little-endian uint64: len(B), len(C)), as the GPU
convention must. The result is a tuple of two buffers, (A, scratch): the target writes
B[i % len(B)] into the scratch buffer first and adds C from there, using a tuple output as
temp memory, as the seed's "tuple outputs as temp buffers" describes; callers read element 0.

The op ``Opm>DoCustomCall`` wraps the target so that ``opmarket.ops.do_custom_call(b, c)``,
graphs, gradients and conformance reach it; its kernel calls the target by name through
``opmarket.sdk.custom_call``, as an XLA program calls a registered target.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import numpy as np

from opmarket.sdk import (
    DType,
    GradientOp,
    InferenceContext,
    InvalidArgumentError,
    custom_call,
    custom_call_target,
    hookimpl,
    input_generator,
    kernel,
    op,
    reference,
    register_gradient,
    shape_fn,
)

__all__ = [
    "DO_CUSTOM_CALL",
    "TARGET",
    "do_custom_call",
    "do_custom_call_grad",
    "do_custom_call_inputs",
    "do_custom_call_kernel",
    "do_custom_call_reference",
    "do_custom_call_shape",
    "opaque_sizes",
    "register",
]

_Array = np.ndarray[Any, Any]

#: The custom-call target's name, as XLA_REGISTER_CUSTOM_CALL_TARGET names it.
TARGET = "do_custom_call"
_OPAQUE = struct.Struct("<QQ")

DO_CUSTOM_CALL = (
    op("Opm>DoCustomCall")
    .input("b: float")
    .input("c: float")
    .output("a: float")
    .doc(
        "A[i] = B[i % len(B)] + C[i], XLA's do_custom_call example.\n\n"
        "b: the vector that repeats (length 128 in the seed).\n"
        "c: the vector added (length 2048 in the seed).\n"
        "a: the result, the length of c."
    )
    .build()
)


def opaque_sizes(len_b: int, len_c: int) -> bytes:
    """The opaque bytes the target expects: len(B) and len(C)."""
    return _OPAQUE.pack(len_b, len_c)


@custom_call_target(TARGET, platform="Host")
def do_custom_call(out: tuple[_Array, _Array], ins: list[_Array], opaque: bytes) -> None:
    """The Host target: ``out`` is the tuple (A, scratch), ``ins`` is [B, C]."""
    if len(opaque) != _OPAQUE.size:
        raise InvalidArgumentError(
            f"{TARGET}: opaque must be {_OPAQUE.size} bytes (len(B), len(C)), got {len(opaque)}"
        )
    m, n = _OPAQUE.unpack(opaque)
    b, c = ins
    a, scratch = out
    if m < 1 or b.shape != (m,) or c.shape != (n,) or a.shape != (n,) or scratch.shape != (n,):
        raise InvalidArgumentError(
            f"{TARGET}: buffers do not match the opaque sizes len(B)={m}, len(C)={n}: "
            f"B {b.shape}, C {c.shape}, A {a.shape}, scratch {scratch.shape}"
        )
    np.take(b, np.arange(n) % m, out=scratch)  # the tuple's second buffer as temp memory
    np.add(scratch, c, out=a)


@kernel("Opm>DoCustomCall")
def do_custom_call_kernel(b: _Array, c: _Array) -> _Array:
    """Calls the registered target by name, with the sizes in the opaque bytes."""
    if b.ndim != 1 or c.ndim != 1 or b.shape[0] < 1:
        raise InvalidArgumentError("DoCustomCall expects a non-empty vector b and a vector c")
    n = c.shape[0]
    a, _scratch = custom_call(
        TARGET, [b, c], [((n,), np.float32), ((n,), np.float32)], opaque=opaque_sizes(b.shape[0], n)
    )
    return a  # type: ignore[no-any-return]  # custom_call returns the tuple as Any


@shape_fn("Opm>DoCustomCall")
def do_custom_call_shape(c: InferenceContext) -> None:
    c.with_rank(c.input(0), 1)
    c.set_output(0, c.with_rank(c.input(1), 1))


@register_gradient("Opm>DoCustomCall")
def do_custom_call_grad(op: GradientOp, grad: _Array) -> list[_Array]:
    """dA/dC is the identity; each B[j] reaches every A[i] with i % len(B) == j."""
    b, c = op.inputs
    index = np.arange(c.shape[0]) % b.shape[0]
    grad_b = np.bincount(index, weights=grad, minlength=b.shape[0]).astype(b.dtype)
    return [grad_b, grad.astype(c.dtype)]


@reference("Opm>DoCustomCall")
def do_custom_call_reference(b: _Array, c: _Array) -> _Array:
    return np.asarray(b[np.arange(c.shape[0]) % b.shape[0]] + c, dtype=np.float32)


@input_generator("Opm>DoCustomCall")
def do_custom_call_inputs(
    rng: np.random.Generator, types: Mapping[str, DType]
) -> tuple[list[_Array], dict[str, Any]]:
    m = int(rng.integers(1, 9))
    n = int(rng.integers(0, 40))
    b = rng.standard_normal(m).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    return [b, c], {}


@hookimpl
def register(register: Any) -> None:
    """Hand the target, the op wrapping it and the op's kernel and helpers over."""
    register(
        do_custom_call,
        DO_CUSTOM_CALL,
        do_custom_call_kernel,
        do_custom_call_shape,
        do_custom_call_grad,
        do_custom_call_reference,
        do_custom_call_inputs,
    )
