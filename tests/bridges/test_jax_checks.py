"""JAX's own checks on opmarket.jax: ``jax.export`` of the ops that run as XLA FFI custom
calls, ``jax.vmap`` over several ``in_axes`` against a Python loop, and
``jax.test_util.check_grads``.

Origins (jax-ml/jax): ``tests/export_test.py`` (export, ``serialize``, ``deserialize``,
``Exported.call``; the refusal of custom calls without a compatibility guarantee, lifted
per target by ``DisabledSafetyCheck.custom_call``; ``host_callbacks`` refused),
``tests/ffi_test.py`` (an FFI call under ``vmap`` with ``vmap_method="sequential"``,
compared with a loop) and ``tests/batching_test.py`` (``in_axes`` as an int, ``None`` and
per-argument tuples), and ``jax.test_util.check_grads`` as JAX's tests call it (order 1,
``modes=("fwd", "rev")``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import export  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import opmarket  # noqa: E402 (after the skip)
import opmarket.jax as oj  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party

RNG = np.random.default_rng(22)
POOL = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"}
_IMAGE = RNG.permutation(1 * 5 * 4 * 2).reshape(1, 5, 4, 2).astype(np.float32) / 8  # no ties

# --- jax.export ----------------------------------------------------------------------------

# (id, function, inputs): the first-party ops whose kernels run as the opmarket_capi FFI call.
FFI_CASES: list[tuple[str, Callable[..., Any], list[np.ndarray[Any, Any]]]] = [
    ("zero_out", lambda x: oj.ops.zero_out(x, preserve_index=2), [np.arange(1, 6, dtype=np.int32)]),
    (
        "zero_out_c_abi",
        lambda x: oj.ops.zero_out(x, preserve_index=1, _kernel="c_abi"),
        [np.float32([3, 4, 5])],
    ),
    ("time_two", oj.ops.time_two, [RNG.standard_normal((2, 3)).astype(np.float32)]),
    ("median_pool", lambda x: oj.ops.median_pool(x, **POOL), [_IMAGE]),
    ("bitcast", lambda x: oj.ops.bitcast(x, type=jnp.uint8), [np.float32([1.5, -2.0])]),
]
FFI_IDS = [c[0] for c in FFI_CASES]
_UNSTABLE_OK = [export.DisabledSafetyCheck.custom_call("opmarket_capi")]


@pytest.mark.parametrize(("name", "fn", "inputs"), FFI_CASES, ids=FFI_IDS)
def test_export_serialize_deserialize_call(
    name: str, fn: Callable[..., Any], inputs: list[np.ndarray[Any, Any]]
) -> None:
    """export_test.py's round trip: export, serialize to bytes, deserialize, call; the
    result is the jitted function's, bit for bit. opmarket's custom call has no
    compatibility guarantee across releases (docs/frameworks.md), so the export names it
    in ``disabled_checks`` as JAX asks of any such target."""
    want = np.asarray(jax.jit(fn)(*inputs))
    exported = export.export(jax.jit(fn), disabled_checks=_UNSTABLE_OK)(*inputs)
    assert "opmarket_capi" in exported.mlir_module()
    blob = exported.serialize()
    assert isinstance(blob, (bytes, bytearray)) and blob
    again = export.deserialize(blob)
    assert again.in_avals == exported.in_avals and again.out_avals == exported.out_avals
    got = np.asarray(again.call(*inputs))
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    # And inside another jitted function, as an exported function is used.
    np.testing.assert_array_equal(jax.jit(again.call)(*inputs), want)


def test_export_without_disabling_the_check_is_refused_naming_the_target() -> None:
    """export_test.py (test_error_wrong_custom_call / custom calls without compatibility
    guarantees): the documented refusal of the opmarket_capi target."""
    with pytest.raises(ValueError, match=r"(?s)compatibility guarantees.*opmarket_capi"):
        export.export(jax.jit(oj.ops.time_two))(np.float32([1, 2]))


@pytest.mark.parametrize(
    "fn",
    [
        oj.ops.atan,  # a numpy kernel: the callback path
        jax.grad(lambda x: oj.ops.time_two(x).sum()),  # an FFI forward, a callback gradient
    ],
    ids=["callback_op", "gradient"],
)
def test_export_of_a_host_callback_is_the_documented_error(fn: Callable[..., Any]) -> None:
    """export_test.py's host-callback refusal, as docs/frameworks.md ("Not supported") says:
    the callback path and every gradient are ``pure_callback``s."""
    with pytest.raises(NotImplementedError, match="serialization of host_callbacks"):
        export.export(jax.jit(fn), disabled_checks=_UNSTABLE_OK)(np.float32([0.5, 2.0]))


# --- jax.vmap --------------------------------------------------------------------------------


def _loop(
    fn: Callable[..., Any], in_axes: Any, args: list[np.ndarray[Any, Any]]
) -> np.ndarray[Any, Any]:
    """What ``vmap(fn, in_axes)(*args)`` must give: ``fn`` on each slice, stacked on 0."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    n = next(a.shape[ax] for a, ax in zip(args, axes, strict=True) if ax is not None)
    outs = [
        np.asarray(
            fn(
                *[
                    a if ax is None else np.take(a, i, axis=ax)
                    for a, ax in zip(args, axes, strict=True)
                ]
            )
        )
        for i in range(n)
    ]
    return np.stack(outs)


B = RNG.standard_normal((3, 4)).astype(np.float32)
C = RNG.standard_normal((3, 7)).astype(np.float32)

# (id, function, in_axes, inputs)
VMAP_CASES: list[tuple[str, Callable[..., Any], Any, list[np.ndarray[Any, Any]]]] = [
    ("time_two_axis0", oj.ops.time_two, 0, [B]),
    ("time_two_axis1", oj.ops.time_two, 1, [B]),
    ("atan_axis1", oj.ops.atan, 1, [B]),
    ("zero_out_axis1", lambda x: oj.ops.zero_out(x, preserve_index=1), 1, [B]),
    ("zero_out_c_abi_axis0", lambda x: oj.ops.zero_out(x, _kernel="c_abi"), 0, [B]),
    ("bitcast_axis1", lambda x: oj.ops.bitcast(x, type=jnp.uint8), 1, [B]),
    ("median_pool_axis0", lambda x: oj.ops.median_pool(x, **POOL), 0, [np.stack([_IMAGE] * 2)]),
    ("do_custom_call_0_0", oj.ops.do_custom_call, (0, 0), [B, C]),
    ("do_custom_call_0_none", oj.ops.do_custom_call, (0, None), [B, C[0]]),
    ("do_custom_call_none_1", oj.ops.do_custom_call, (None, 1), [B[0], C.T]),
    ("do_custom_call_1_0", oj.ops.do_custom_call, (1, 0), [B.T[:, :3], C]),
]


@pytest.mark.parametrize(
    ("name", "fn", "in_axes", "inputs"), VMAP_CASES, ids=[c[0] for c in VMAP_CASES]
)
def test_vmap_in_axes_equals_a_python_loop(
    name: str, fn: Callable[..., Any], in_axes: Any, inputs: list[np.ndarray[Any, Any]]
) -> None:
    """ffi_test.py / batching_test.py: ``vmap`` with ``in_axes`` an int, ``None`` for an
    unbatched argument, or a tuple per argument, eagerly and under ``jit``, equals the op
    on each slice."""
    want = _loop(fn, in_axes, inputs)
    batched = jax.vmap(fn, in_axes=in_axes)
    got = np.asarray(batched(*inputs))
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(jax.jit(batched)(*inputs), want)


def test_vmap_of_vmap_and_out_axes() -> None:
    """batching_test.py's nested vmap with ``out_axes``: each element once, in place."""
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    got = jax.vmap(jax.vmap(oj.ops.time_two, in_axes=1, out_axes=1), in_axes=2, out_axes=0)(x)
    want = np.moveaxis(np.asarray(opmarket.ops.time_two(x)), 2, 0)
    np.testing.assert_array_equal(got, want)


# --- check_grads -------------------------------------------------------------------------------

# (id, function, inputs): every first-party op with a gradient, in float32 as JAX runs it.
GRAD_CASES: list[tuple[str, Callable[..., Any], list[np.ndarray[Any, Any]]]] = [
    ("atan", oj.ops.atan, [RNG.standard_normal(5).astype(np.float32)]),
    ("time_two", oj.ops.time_two, [RNG.standard_normal((2, 3)).astype(np.float32)]),
    ("zero_out", lambda x: oj.ops.zero_out(x, preserve_index=2), [B[0]]),
    ("median_pool", lambda x: oj.ops.median_pool(x, **POOL), [_IMAGE]),
    ("do_custom_call", oj.ops.do_custom_call, [B[0], C[0]]),
]


@pytest.mark.parametrize(("name", "fn", "inputs"), GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_check_grads_order_1_reverse_mode(
    name: str, fn: Callable[..., Any], inputs: list[np.ndarray[Any, Any]]
) -> None:
    """``jax.test_util.check_grads(f, args, order=1, modes=["rev"])``: the VJP the op's
    opmarket gradient gives agrees with finite differences (eagerly and under jit)."""
    check_grads(fn, tuple(inputs), order=1, modes=["rev"])
    check_grads(jax.jit(fn), tuple(inputs), order=1, modes=["rev"])


def test_forward_mode_is_the_documented_error() -> None:
    """``check_grads(..., modes=["fwd"])``: an opmarket op has a VJP (``jax.custom_vjp``),
    not a JVP; forward mode fails with JAX's own message, as docs/frameworks.md says."""
    x = (np.float32([0.5, 2.0]),)
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        check_grads(oj.ops.atan, x, order=1, modes=["fwd"])
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
        jax.jacfwd(oj.ops.time_two)(x[0])
