"""opmarket.jax with the real JAX (CPU): every first-party op under jit, gradients, vmap,
the XLA FFI custom call for C-ABI kernels, errors, zero copy."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import opmarket  # noqa: E402
import opmarket.jax as oj  # noqa: E402
from opmarket.registry import isolated_registry  # noqa: E402
from opmarket.sdk import (  # noqa: E402
    InferenceContext,
    InvalidArgumentError,
    NotFoundError,
    kernel,
    op,
    shape_fn,
    unchanged,
)
from tests.first_party import needs_first_party  # noqa: E402

from .conftest import CASES, Case, expected  # noqa: E402

pytestmark = needs_first_party


def _call(case: Case) -> Any:
    fn = oj.ops[case.op]
    kwargs = dict(case.attrs)
    if case.label:
        kwargs["_kernel"] = case.label
    return fn, kwargs


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_jitted_call_matches_opmarket_ops(case: Case) -> None:
    fn, kwargs = _call(case)
    inputs = [jnp.asarray(x) for x in case.inputs()]
    got = jax.jit(lambda *xs: fn(*xs, **kwargs))(*inputs)
    want = expected(case)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)
    eager = fn(*inputs, **kwargs)
    np.testing.assert_array_equal(np.asarray(eager), want)


def test_dtype_attrs_take_jnp_dtypes_and_names() -> None:
    x = jnp.asarray([1.5, -2.0], jnp.float32)
    want = np.asarray(x).view(np.int32)
    for spelling in (jnp.int32, np.int32, "int32", "DT_INT32"):
        np.testing.assert_array_equal(
            np.asarray(jax.jit(lambda x, s=spelling: oj.ops.bitcast(x, type=s))(x)), want
        )


def test_grad_of_atan_is_one_over_one_plus_x_squared() -> None:
    x = jnp.linspace(-3, 3, 7, dtype=jnp.float32)
    want = 1 / (1 + np.asarray(x) ** 2)
    for grad in (
        jax.grad(lambda x: oj.ops.atan(x).sum()),
        jax.jit(jax.grad(lambda x: oj.ops.atan(x).sum())),
    ):
        np.testing.assert_allclose(np.asarray(grad(x)), want, rtol=1e-6)
    _, vjp = jax.vjp(oj.ops.atan, x)
    np.testing.assert_allclose(np.asarray(vjp(jnp.full_like(x, 2.0))[0]), 2 * want, rtol=1e-6)


def test_grad_through_zero_out_and_do_custom_call() -> None:
    x = jnp.asarray([5.0, 4.0, 3.0])
    g = jax.jit(jax.grad(lambda x: (oj.ops.zero_out(x, preserve_index=1) * 3).sum()))(x)
    np.testing.assert_array_equal(np.asarray(g), [0, 3, 0])
    b, c = jnp.arange(1.0, 4.0), jnp.ones(7)
    gb, gc = jax.grad(lambda b, c: oj.ops.do_custom_call(b, c).sum(), argnums=(0, 1))(b, c)
    np.testing.assert_array_equal(np.asarray(gb), [3, 2, 2])  # 7 outputs over 3 entries
    np.testing.assert_array_equal(np.asarray(gc), np.ones(7))


def test_vmap_runs_the_op_once_per_batch_element() -> None:
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) + 1
    got = jax.jit(jax.vmap(lambda x: oj.ops.zero_out(x, preserve_index=3)))(xs)
    want = np.stack([opmarket.ops.zero_out(np.asarray(x), preserve_index=3) for x in xs])
    np.testing.assert_array_equal(np.asarray(got), want)
    grads = jax.vmap(jax.grad(lambda x: oj.ops.atan(x).sum()))(xs)
    np.testing.assert_allclose(np.asarray(grads), 1 / (1 + np.asarray(xs) ** 2), rtol=1e-6)


def _has_bridge_interface() -> bool:
    import opmarket.registry as reg

    return hasattr(reg, "capi_bridge") and hasattr(reg, "native_kernel_handle")


needs_bridge = pytest.mark.skipif(
    not _has_bridge_interface(), reason="this opmarket's C-ABI host has no bridge interface"
)


@needs_bridge
@pytest.mark.parametrize(
    ("call", "args"),
    [
        (lambda x: oj.ops.zero_out(x, preserve_index=1, _kernel="c_abi"), [np.float32([1, 2, 3])]),
        (lambda x: oj.ops.bitcast(x, type=jnp.uint8), [np.float32([1, 2, 3])]),
    ],
    ids=["zero_out_c_abi", "bitcast"],
)
def test_c_abi_kernels_are_ffi_custom_calls(call: Any, args: list[Any]) -> None:
    text = jax.jit(call).lower(*args).as_text()
    assert "stablehlo.custom_call @opmarket_capi" in text, text
    # The op's attrs travel as typed FFI attributes (T: TensorFlow's DataType number).
    assert "T = 1 : i32" in text
    assert ("preserve_index = 1 : i64" in text) or ("type = 4 : i32" in text), text
    assert "pure_callback" not in text and "python" not in text.lower()
    compiled = jax.jit(call).lower(*args).compile().as_text()
    assert "opmarket_capi" in compiled


@needs_bridge
def test_native_path_reports_ffi_for_c_abi_and_callback_otherwise() -> None:
    assert oj.native_path("Opm>ZeroOut", T=np.float32, _kernel="c_abi") == "ffi"
    assert oj.native_path("Opm>Bitcast", T=np.float32, type=np.int8) == "ffi"
    # The C++ kernels (opmarket/kernel.h) through their C-ABI entries; MedianPool's list
    # attrs travel as FFI arrays.
    assert oj.native_path("Opm>ZeroOut", T=np.float32) == "ffi"
    assert oj.native_path("Opm>MedianPool", T=np.float32, ksize=[1, 3, 3, 1],
                          strides=[1, 1, 1, 1], padding="SAME") == "ffi"  # fmt: skip
    assert oj.native_path("Opm>Atan", T=np.float32) == "callback"


@needs_bridge
def test_a_c_abi_kernel_error_reaches_the_caller() -> None:
    x = jnp.asarray([1.0, 2.0], jnp.float32)
    with pytest.raises(Exception, match="preserve_index out of range"):
        jax.jit(lambda x: oj.ops.zero_out(x, preserve_index=5, _kernel="c_abi"))(x)


def test_non_jax_callback_ops_show_a_callback_in_hlo() -> None:
    text = jax.jit(oj.ops.atan).lower(np.float32([1, 2])).as_text()
    assert "custom_call" in text and "opmarket_capi" not in text


def test_bad_attrs_and_inputs_quote_what_was_wrong() -> None:
    x = jnp.asarray([1.0, 2.0], jnp.float32)
    with pytest.raises(InvalidArgumentError, match="has no attr 'preserve'"):
        oj.ops.zero_out(x, preserve=1)
    with pytest.raises(InvalidArgumentError, match="preserve_index"):
        jax.jit(lambda x: oj.ops.zero_out(x, preserve_index=-1))(x)
    with pytest.raises(InvalidArgumentError, match="rank 1"):
        jax.jit(oj.ops.zero_out)(jnp.ones((2, 2)))
    with pytest.raises(InvalidArgumentError, match="takes 2 inputs"):
        oj.ops.do_custom_call(x)


def test_builtin_graph_ops_are_left_to_the_framework() -> None:
    with pytest.raises(NotFoundError, match="built-in graph ops"):
        _ = oj.ops.add_n
    with pytest.raises(AttributeError, match=r"opmarket\.jax\.ops has no op 'no_such_op'"):
        _ = oj.ops.no_such_op


def test_names_resolve_as_in_opmarket_ops() -> None:
    assert oj.ops.zero_out is oj.ops.opm.zero_out is oj.ops["Opm>ZeroOut"]
    assert "zero_out" in dir(oj.ops)


VALUES = op("BridgeTest>Unique").input("x: float").output("y: float").build()
NO_SHAPE = op("BridgeTest>NoShape").input("x: float").output("y: float").build()
PROBE = op("BridgeTest>Probe").input("x: float").output("y: float").build()


@kernel("BridgeTest>Unique")
def _unique(x: Any) -> Any:
    return np.unique(x)


@shape_fn("BridgeTest>Unique")
def _unique_shape(c: InferenceContext) -> None:
    c.set_output(0, (c.unknown_dim(),))


@kernel("BridgeTest>NoShape")
def _no_shape(x: Any) -> Any:
    return x + 1


def test_an_output_shape_that_depends_on_values_says_so() -> None:
    with isolated_registry():
        opmarket.register(VALUES, _unique, _unique_shape, NO_SHAPE, _no_shape)
        x = jnp.asarray([3.0, 1.0, 3.0])
        np.testing.assert_array_equal(np.asarray(oj.ops.unique(x)), [1, 3])  # eager works
        with pytest.raises(InvalidArgumentError, match="depends on the input values"):
            jax.jit(oj.ops.unique)(x)
        with pytest.raises(InvalidArgumentError, match="has no shape function"):
            jax.jit(oj.ops.no_shape)(x)


def test_an_eager_call_reads_the_arrays_memory_without_a_copy() -> None:
    seen: list[int] = []

    @kernel("BridgeTest>Probe")
    def probe(x: Any) -> Any:
        seen.append(x.ctypes.data)
        return x * 2

    with isolated_registry():
        opmarket.register(PROBE, probe, shape_fn("BridgeTest>Probe", unchanged))
        x = jnp.arange(64, dtype=jnp.float32)
        np.testing.assert_array_equal(np.asarray(oj.ops.probe(x)), np.arange(64) * 2)
        assert seen == [x.unsafe_buffer_pointer()]


def test_import_opmarket_stays_light_and_a_missing_jax_names_the_extra() -> None:
    code = (
        "import sys, opmarket; opmarket.ops; "
        "assert 'jax' not in sys.modules and 'torch' not in sys.modules, 'heavy'; "
        "sys.modules['jax'] = None\n"
        "try:\n import opmarket.jax\nexcept ImportError as e:\n print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'opmarket[jax]'" in done.stdout


@needs_bridge
def test_ffi_calls_batch_and_differentiate() -> None:
    xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4) + 1
    got = jax.jit(jax.vmap(lambda x: oj.ops.zero_out(x, preserve_index=1, _kernel="c_abi")))(xs)
    np.testing.assert_array_equal(np.asarray(got), [[0, 2, 0, 0], [0, 6, 0, 0], [0, 10, 0, 0]])
    g = jax.jit(jax.grad(lambda x: oj.ops.zero_out(x, preserve_index=1, _kernel="c_abi").sum()))
    np.testing.assert_array_equal(np.asarray(g(xs[0])), [0, 1, 0, 0])


def test_a_device_without_a_kernel_is_a_clear_error() -> None:
    # No GPU here: the rule a GPU array meets, asked directly for the GPU.
    from opmarket._bridge import bridge_op
    from opmarket.jax._ops import _build
    from opmarket.registry import KernelNotFoundError

    op = bridge_op("Opm>Atan")
    attrs = op.bind([np.dtype(np.float32)], {})
    with pytest.raises(KernelNotFoundError, match="no kernel for Opm>Atan on GPU"):
        _build(op, attrs, "", "GPU")


@pytest.mark.parametrize("name", ["atan", "time_two"])  # a numpy kernel and a pybind11 one
def test_grad_at_a_0d_input_and_at_a_python_float(name: str) -> None:
    op = getattr(oj.ops, name)
    at = jnp.float32(0.5)
    g = jax.grad(op)(at)
    assert g.shape == ()
    assert jax.grad(op)(0.5) == g  # a Python float, as jax.grad's users write it
    assert jax.jit(jax.grad(op))(at) == g
    # Per-example gradients: vmap over grad of a scalar loss.
    per_example = jax.vmap(jax.grad(lambda v: op(v) * 2.0))(jnp.asarray([0.5, 0.5]))
    np.testing.assert_allclose(per_example, [2 * g, 2 * g], rtol=1e-6)


@needs_bridge
def test_native_path_before_the_op_was_first_used() -> None:
    # A fresh process: nothing has loaded the plugins when native_path names the op.
    code = (
        "import numpy as np\n"
        "import opmarket.jax as oj\n"
        "print(oj.native_path('Opm>ZeroOut', T=np.int32, _kernel='c_abi'))\n"
        "print(oj.native_path('Opm>Atan', T=np.float32))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["ffi", "callback"]


def test_what_docs_frameworks_md_says_is_not_supported_fails_as_it_says() -> None:
    from jax import export
    from jax.test_util import check_grads

    x = jnp.arange(4, dtype=jnp.float32)
    with pytest.raises(NotImplementedError, match="host_callbacks"):
        export.export(jax.jit(oj.ops.atan))(x)
    with pytest.raises(ValueError, match="Pure callbacks do not support JVP"):
        check_grads(oj.ops.atan, (x,), order=2, modes=["rev"])


@needs_bridge
@pytest.mark.parametrize("label", ["", "c_abi"])  # the C++ kernel's C entry and the C plugin's
def test_a_native_kernel_error_names_the_kernel_once(label: str) -> None:
    x = jnp.asarray([1.0, 2.0], jnp.float32)
    with pytest.raises(Exception, match="preserve_index out of range") as caught:
        jax.jit(lambda x: oj.ops.zero_out(x, preserve_index=5, _kernel=label))(x)
    assert str(caught.value).count("Opm>ZeroOut (kernel") == 1, caught.value


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (oj.ops.zero_out, "preserve_index out of range"),  # FFI
        (lambda x: oj.ops.zero_out(x, _kernel="c_abi"), "preserve_index out of range"),  # FFI
        (lambda x: oj.ops.do_custom_call(x, x), "non-empty vector b"),  # callback
    ],
    ids=["zero_out", "zero_out_c_abi", "do_custom_call"],
)
def test_a_call_whose_outputs_are_all_empty_still_runs_its_kernel(call: Any, message: str) -> None:
    """XLA replaces an op whose outputs have no elements by empty constants unless the call
    has a side effect; the kernel must still run, to refuse what opmarket.ops refuses (an
    index into an empty vector), eagerly, under jit, vmap and grad."""
    x = np.zeros(0, np.float32)
    with pytest.raises(InvalidArgumentError, match=message):
        call(x)
    with pytest.raises(Exception, match=message):
        jax.jit(call)(x)
    with pytest.raises(Exception, match=message):
        jax.jit(jax.vmap(call))(np.zeros((2, 0), np.float32))
    with pytest.raises(Exception, match=message):
        jax.grad(lambda v: call(v).sum())(x)
    # A call with a non-empty output keeps no side effect: XLA may still drop it when unused.
    text = jax.jit(oj.ops.time_two).lower(np.float32([1, 2])).as_text()
    assert "has_side_effect = true" not in text
    assert "has_side_effect = true" in jax.jit(oj.ops.time_two).lower(x).as_text()
