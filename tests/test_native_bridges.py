"""The first-party C++ kernels (opmarket/kernel.h: time_two, zero_out, median_pool) in
TensorFlow and JAX after the header gave them C-ABI entries: time_two and zero_out take the
native path (XLA FFI, TensorFlow's C kernel API) and agree with opmarket.ops; median_pool,
whose list attrs today's bridges cannot hand to a C kernel, still runs, through Python."""

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
    assert oj.native_path("Opm>MedianPool", T=np.float32, **POOL) == "callback"


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
    from opmarket.tensorflow._plumbing import NATIVE_PRIORITY_BOOST

    # A native kernel's priority carries the boost; a Python one's does not.
    assert _tf_priorities("Opm>TimeTwo") == {NATIVE_PRIORITY_BOOST}
    assert _tf_priorities("Opm>ZeroOut") == {NATIVE_PRIORITY_BOOST}
    assert _tf_priorities("Opm>MedianPool") == {0}


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
    assert all(
        not d.native and "list attrs" in d.reason
        for (op, _), d in doors.items()
        if op == "Opm>MedianPool"
    )


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
