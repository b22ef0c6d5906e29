"""The first-party C++ kernels (opmarket/kernel.h: time_two, zero_out, median_pool) in
TensorFlow and JAX after the header gave them C-ABI entries: all three take the native path
(XLA FFI, TensorFlow's C kernel API; median_pool's list attrs through version 2 of the
bridge interface) and agree with opmarket.ops bit for bit."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import get_registry
from opmarket.registry._capi_bridge import native_door

jax = pytest.importorskip("jax")
tf = pytest.importorskip("tensorflow")
oj = pytest.importorskip("opmarket.jax")
otf = pytest.importorskip("opmarket.tensorflow")

POOL: dict[str, Any] = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}


@pytest.fixture(autouse=True)
def _plugins() -> None:
    reg = get_registry()
    for op in ("Opm>TimeTwo", "Opm>ZeroOut", "Opm>MedianPool"):
        if reg.op_def(op) is None:
            pytest.skip(f"{op}'s plugin is not installed (scripts/setup installs it)")


def test_jax_takes_the_ffi_path_for_time_two_and_zero_out() -> None:
    assert oj.native_path("Opm>TimeTwo", T=np.float32) == "ffi"
    assert oj.native_path("Opm>TimeTwo", T=np.int64) == "ffi"
    assert oj.native_path("Opm>ZeroOut", T=np.int32) == "ffi"  # the C++ kernel, no label
    assert oj.native_path("Opm>MedianPool", T=np.float32, **POOL) == "ffi"
    assert oj.native_path("Opm>MedianPool", T=np.float64, **POOL) == "ffi"


def test_jax_results_agree_with_opmarket_ops() -> None:
    x = np.linspace(-4, 4, 8, dtype=np.float32)
    np.testing.assert_array_equal(jax.jit(oj.ops.time_two)(x), opmarket.ops.time_two(x))
    i = np.array([2**31 - 1, -5, 7], np.int32)  # wraps around, as numpy's 2 * x does
    np.testing.assert_array_equal(jax.jit(oj.ops.time_two)(i), opmarket.ops.time_two(i))
    z = np.arange(1, 9, dtype=np.int32)
    zero = jax.jit(lambda v: oj.ops.zero_out(v, preserve_index=5))
    np.testing.assert_array_equal(zero(z), opmarket.ops.zero_out(z, preserve_index=5))
    img = np.random.default_rng(1).random((1, 32, 24, 1), dtype=np.float32)
    pool = jax.jit(lambda v: oj.ops.median_pool(v, **POOL))
    np.testing.assert_array_equal(pool(img), opmarket.ops.median_pool(img, **POOL))


def _tf_priorities(op: str) -> set[int]:
    from tensorflow.python.framework import kernels

    found = kernels.get_registered_kernels_for_op(op).kernel
    return {k.priority for k in found if not k.label}


def test_tensorflow_registers_the_c_entries_natively() -> None:
    from opmarket._bridge import NATIVE_PRIORITY_BOOST

    # A native kernel's priority carries the boost; a Python one's does not.
    assert _tf_priorities("Opm>TimeTwo") == {NATIVE_PRIORITY_BOOST}
    assert _tf_priorities("Opm>ZeroOut") == {NATIVE_PRIORITY_BOOST}
    assert _tf_priorities("Opm>MedianPool") == {NATIVE_PRIORITY_BOOST}


def test_tensorflow_results_agree_with_opmarket_ops() -> None:
    x = np.linspace(-4, 4, 8, dtype=np.float32)
    np.testing.assert_array_equal(otf.ops.time_two(x), opmarket.ops.time_two(x))
    np.testing.assert_array_equal(tf.function(otf.ops.time_two)(x), opmarket.ops.time_two(x))
    z = np.arange(1, 9, dtype=np.int32)
    np.testing.assert_array_equal(
        otf.ops.zero_out(z, preserve_index=2), opmarket.ops.zero_out(z, preserve_index=2)
    )
    with pytest.raises((ValueError, tf.errors.InvalidArgumentError), match="out of range"):
        otf.ops.zero_out(z, preserve_index=20)
    img = np.random.default_rng(2).random((1, 20, 17, 1), dtype=np.float32)
    np.testing.assert_array_equal(
        otf.ops.median_pool(img, **POOL), opmarket.ops.median_pool(img, **POOL)
    )


def test_each_kernel_says_which_door_and_why() -> None:
    reg = get_registry()
    doors = {
        (k.op, k.label): native_door(k)
        for op in ("Opm>TimeTwo", "Opm>MedianPool")
        for k in reg.kernels(op)
        if k.device == "CPU"
    }
    assert all(d.native for (op, _), d in doors.items() if op == "Opm>TimeTwo")
    pools = [k for k in reg.kernels("Opm>MedianPool") if k.device == "CPU"]
    # Its C entry reads list attrs: a bridge whose shim has version 1 of the construction
    # interface keeps it on the Python door; JAX's and TensorFlow's (version 2) take it.
    assert pools and all(
        not d.native and "list attrs" in d.reason
        for (op, _), d in doors.items()
        if op == "Opm>MedianPool"
    )
    assert all(native_door(k, bridge_version=2).native for k in pools)


DOORS = r"""
#include <opmarket/kernel.h>

#include <cmath>
#include <tuple>

namespace py = pybind11;

static std::tuple<opmarket::Tensor<float>, opmarket::Tensor<int32_t>> Split(
    opmarket::Tensor<float> x, double scale, bool negate, const std::string& mode) {
  OPM_REQUIRES(mode == "floor" || mode == "round", "mode must be floor or round, got ", mode);
  auto y = opmarket::allocate<float>(x.shape());
  auto n = opmarket::allocate<int32_t>(x.shape());
  auto no_gil = opmarket::release_gil();
  for (int64_t i = 0; i < x.size(); ++i) {
    const float v = static_cast<float>(x.flat(i) * scale) * (negate ? -1.0f : 1.0f);
    y.flat(i) = v;
    n.flat(i) = static_cast<int32_t>(mode == "floor" ? std::floor(v) : std::round(v));
  }
  return {y, n};
}

// An input returned as it is: the C door copies it into the output.
static opmarket::Tensor<float> Same(opmarket::Tensor<float> x) { return x; }

// A pybind11 parameter: no C entry, the kernel stays on the Python door.
static opmarket::Tensor<float> Untyped(opmarket::Tensor<float> x, py::object /*extra*/) {
  return x;
}

OPM_LIBRARY(_doors, lib) {
  lib.op("Doors>Split")
      .attr("scale: float = 1.0")
      .attr("negate: bool = false")
      .attr("mode: string = 'floor'")
      .input("x: float")
      .output("y: float")
      .output("n: int32");
  lib.kernel("Doors>Split", "split", &Split, py::arg("x"), py::arg("scale") = 1.0,
             py::arg("negate") = false, py::arg("mode") = "floor");
  lib.op("Doors>Same").input("x: float").output("y: float");
  lib.kernel("Doors>Same", "same", &Same, py::arg("x"));
  lib.op("Doors>Untyped").input("x: float").output("y: float");
  lib.kernel("Doors>Untyped", "untyped", &Untyped, py::arg("x"), py::arg("extra") = py::none());
}
"""


@pytest.mark.slow
def test_a_new_library_runs_natively_in_both_frameworks(tmp_path: Any) -> None:
    """Two outputs, float, bool and string attrs, an input returned as it is, and a kernel
    the C door cannot take, through the real JAX and TensorFlow bridges."""
    import shutil
    import subprocess
    import sysconfig
    from pathlib import Path

    import pybind11

    from opmarket.registry import isolated_registry, load_library
    from opmarket.sdk import InferenceContext, get_include, shape_fn

    if shutil.which("g++") is None:
        pytest.skip("needs a C++ compiler")
    src = Path(tmp_path, "doors.cc")
    src.write_text(DOORS, encoding="utf-8")
    out = Path(tmp_path, f"_doors{sysconfig.get_config_var('EXT_SUFFIX')}")
    subprocess.run(
        ["g++", "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
         "-fvisibility=hidden",
         f"-I{get_include()}", f"-I{sysconfig.get_paths()['include']}",
         f"-I{pybind11.get_include()}", str(src), "-o", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip

    def same_shapes(c: InferenceContext) -> None:
        for i in range(c.num_outputs):
            c.set_output(i, c.input(0))

    with isolated_registry():
        lib = load_library(out)
        reg = get_registry()
        reg.register(
            *(shape_fn(op, same_shapes) for op in ("Doors>Split", "Doors>Same", "Doors>Untyped")),
            source="test",
        )
        (untyped,) = reg.kernels("Doors>Untyped")
        door = native_door(untyped)
        assert not door.native and "not an attr of a C type" in door.reason
        assert oj.native_path("Doors>Split", scale=2.0, negate=True, mode="round") == "ffi"
        assert oj.native_path("Doors>Same") == "ffi"
        assert oj.native_path("Doors>Untyped") == "callback"

        x = np.array([0.3, -1.7, 2.5, 4.0], np.float32)
        attrs: dict[str, Any] = {"scale": 2.0, "negate": True, "mode": "round"}
        want_y, want_n = lib.split(x, **attrs)
        split = jax.jit(lambda v: oj.jax_op("Doors>Split")(v, **attrs))
        got_y, got_n = split(x)
        np.testing.assert_array_equal(got_y, want_y)
        np.testing.assert_array_equal(got_n, want_n)
        np.testing.assert_array_equal(jax.jit(oj.jax_op("Doors>Same"))(x), x)
        np.testing.assert_array_equal(jax.jit(oj.jax_op("Doors>Untyped"))(x), x)

        otf.register()
        assert _tf_priorities("Doors>Split") == {1000} and _tf_priorities("Doors>Untyped") == {0}
        tf_y, tf_n = tf.function(lambda v: otf.ops["Doors>Split"](v, **attrs))(x)
        np.testing.assert_array_equal(tf_y, want_y)
        np.testing.assert_array_equal(tf_n, want_n)
        np.testing.assert_array_equal(otf.ops["Doors>Same"](x), x)
        with pytest.raises(Exception, match="mode must be floor or round, got up"):
            otf.ops["Doors>Split"](x, mode="up")


def _images() -> list[tuple[np.ndarray[Any, Any], dict[str, Any]]]:
    """MedianPool cases: odd sizes, non-contiguous views, NaN and infinities, both
    paddings, the 3x3 fast path and the general one, float32 and float64."""
    rng = np.random.default_rng(7)
    big = rng.standard_normal((2, 67, 55, 4)).astype(np.float32)
    big[0, 5, 7, 1] = np.nan
    big[1, 10:13, 20:23, 1] = np.inf
    big[0, 30, 31, 1] = -np.inf
    odd = big[:, ::2, 1::2, 1:2]  # a strided view: 2x34x27x1
    assert not odd.flags.c_contiguous
    wide = np.asfortranarray(rng.random((1, 9, 13, 3))).astype(np.float64)
    wide[0, 4, 6, 2] = np.nan
    return [
        (odd, {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}),
        (odd, {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}),
        (odd, {"ksize": [1, 5, 3, 1], "strides": [1, 2, 3, 1], "padding": "SAME"}),
        (wide, {"ksize": [1, 3, 5, 1], "strides": [1, 2, 1, 1], "padding": "VALID"}),
        (wide[:, ::-1], {"ksize": [1, 1, 1, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}),
    ]


def _same_bits(got: Any, want: np.ndarray[Any, Any]) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()  # NaN payloads and signed zeros included


@pytest.mark.parametrize("case", range(5))
def test_median_pool_runs_natively_and_bit_for_bit_in_jax(case: int) -> None:
    x, attrs = _images()[case]
    if x.dtype == np.float64 and not jax.config.jax_enable_x64:
        x = x.astype(np.float32)  # JAX would make it float32 (keeps the layout)
    assert oj.native_path("Opm>MedianPool", T=x.dtype, **attrs) == "ffi"
    want = opmarket.ops.median_pool(x, **attrs)
    _same_bits(jax.jit(lambda v: oj.ops.median_pool(v, **attrs))(x), want)
    _same_bits(oj.ops.median_pool(x, **attrs), want)


@pytest.mark.parametrize("case", range(5))
def test_median_pool_runs_natively_and_bit_for_bit_in_tensorflow(case: int) -> None:
    from opmarket.sdk import as_dtype
    from opmarket.tensorflow import _native

    x, attrs = _images()[case]
    plans = [p for p in _native.plans("Opm>MedianPool") if not p.label]
    chosen = [p for p in plans if as_dtype(x.dtype) in (p.spec.constraint("T") or ())]
    assert chosen and all(p.native for p in chosen)
    want = opmarket.ops.median_pool(x, **attrs)
    _same_bits(otf.ops.median_pool(x, **attrs), want)
    _same_bits(tf.function(lambda v: otf.ops.median_pool(v, **attrs))(x), want)


def test_median_pool_errors_come_from_the_c_kernel() -> None:
    x = np.zeros((1, 4, 4, 1), np.float32)
    bad = {"ksize": [1, 3, 3, 2], "strides": [1, 1, 1, 1], "padding": "SAME"}
    with pytest.raises(Exception, match="does not pool over depth"):
        jax.jit(lambda v: oj.ops.median_pool(v, **bad))(x).block_until_ready()
    with pytest.raises(Exception, match="does not pool over depth"):
        otf.ops.median_pool(x, **bad)


LISTS = r"""
#include <stdlib.h>
#include <opmarket/c_api.h>

/* y[i] = x[i] * scales[i % m] + offsets[i % n] (1 and 0 for an empty list). */
typedef struct { size_t n, m; int64_t offsets[8]; float scales[8]; } lists;

static void* create(OPM_OpKernelConstruction* ctx) {
  OPM_Status* s = OPM_NewStatus();
  lists* k = (lists*)calloc(1, sizeof *k);
  OPM_OpKernelConstruction_GetAttrInt64List(ctx, "offsets", k->offsets, 8, &k->n, s);
  if (OPM_GetCode(s) == OPM_OK)
    OPM_OpKernelConstruction_GetAttrFloatList(ctx, "scales", k->scales, 8, &k->m, s);
  if (OPM_GetCode(s) == OPM_OK && (k->n > 8 || k->m > 8))
    OPM_SetStatus(s, OPM_INVALID_ARGUMENT, "Lists: at most 8 offsets and 8 scales");
  if (OPM_GetCode(s) != OPM_OK) OPM_OpKernelConstruction_Failure(ctx, s);
  OPM_DeleteStatus(s);
  return k;
}

static void compute(void* kernel, OPM_OpKernelContext* ctx) {
  const lists* k = (const lists*)kernel;
  OPM_Status* s = OPM_NewStatus();
  OPM_Tensor* x = OPM_GetInput(ctx, 0, s);
  int64_t dims[8];
  int nd = x ? OPM_NumDims(x) : 0;
  for (int d = 0; d < nd && d < 8; ++d) dims[d] = OPM_Dim(x, d);
  OPM_Tensor* y = x ? OPM_AllocateOutput(ctx, 0, OPM_FLOAT, dims, nd, s) : NULL;
  if (y) {
    const float* in = (const float*)OPM_TensorData(x);
    float* out = (float*)OPM_TensorData(y);
    for (int64_t i = 0; i < OPM_TensorElementCount(x); ++i)
      out[i] = in[i] * (k->m ? k->scales[i % k->m] : 1.0f) +
               (float)(k->n ? k->offsets[i % k->n] : 0);
  }
  OPM_DeleteStatus(s);
}

static void del(void* kernel) { free(kernel); }

static void init(OPM_Status* status) {
  OPM_OpDefinitionBuilder* b = OPM_NewOpDefinitionBuilder("Lists>Affine");
  OPM_OpDefinitionBuilderAddAttr(b, "offsets: list(int)");
  OPM_OpDefinitionBuilderAddAttr(b, "scales: list(float) = []");
  OPM_OpDefinitionBuilderAddInput(b, "x: float");
  OPM_OpDefinitionBuilderAddOutput(b, "y: float");
  OPM_RegisterOpDefinition(b, status);
  if (OPM_GetCode(status) != OPM_OK) return;
  OPM_RegisterKernelBuilder("AffineOp", OPM_NewKernelBuilder("Lists>Affine", "CPU", create,
                                                              compute, del), status);
}
OPM_PLUGIN_INIT(init)
"""


def test_a_c_abi_kernel_reads_list_attrs_natively_in_both_frameworks(tmp_path: Any) -> None:
    """A C-ABI plugin compiled here reads list(int) and list(float) attrs through the real
    JAX and TensorFlow shims (empty lists, int64 beyond 32 bits, negative values), and one
    whose create refuses its lists fails with its own message."""
    import shutil
    import subprocess
    from pathlib import Path

    from opmarket.registry import isolated_registry, load_library
    from opmarket.sdk import InferenceContext, get_include, shape_fn

    if shutil.which("gcc") is None:
        pytest.skip("needs a C compiler")
    src = Path(tmp_path, "lists.c")
    src.write_text(LISTS, encoding="utf-8")
    out = Path(tmp_path, "liblists.so")
    subprocess.run(
        ["gcc", "-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror", "-O1", "-fPIC",
         "-shared", "-fvisibility=hidden", f"-I{get_include()}", str(src), "-o", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip

    def same_shape(c: InferenceContext) -> None:
        c.set_output(0, c.input(0))

    x = np.arange(-3, 9, dtype=np.float32).reshape(3, 4)[:, ::-1]
    cases: list[dict[str, Any]] = [
        {"offsets": [1, -2, 2**33], "scales": [0.5, -3.0]},
        {"offsets": [], "scales": [2.0]},
        {"offsets": [7]},
    ]
    with isolated_registry():
        lib = load_library(out)
        get_registry().register(shape_fn("Lists>Affine", same_shape), source="test")
        otf.register()
        from opmarket._bridge import NATIVE_PRIORITY_BOOST

        assert _tf_priorities("Lists>Affine") == {NATIVE_PRIORITY_BOOST}
        for attrs in cases:
            want = lib.affine(x, **attrs)
            assert oj.native_path("Lists>Affine", **attrs) == "ffi"
            _same_bits(jax.jit(lambda v, a=attrs: oj.jax_op("Lists>Affine")(v, **a))(x), want)
            _same_bits(otf.ops["Lists>Affine"](x, **attrs), want)
            _same_bits(tf.function(lambda v, a=attrs: otf.ops["Lists>Affine"](v, **a))(x), want)
        many = {"offsets": list(range(9))}
        with pytest.raises(Exception, match="at most 8 offsets"):
            jax.jit(lambda v: oj.jax_op("Lists>Affine")(v, **many))(x).block_until_ready()
        with pytest.raises(Exception, match="at most 8 offsets"):
            otf.ops["Lists>Affine"](x, **many)
