"""The C door of opmarket/kernel.h libraries: the first-party plugins' kernels get C-ABI
entries from their C++ source, which a bridge-like C shim (compiled here) runs on a thread
of its own with the node's attrs, list attrs included; a library built with the previous
header (a frozen copy, compiled here) keeps running through Python and says why; a kernel
that still uses py::gil_scoped_release does not compile against the new header."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import (
    Registry,
    capi_bridge,
    capi_bridge_include,
    isolated_registry,
    load_library,
    native_kernel_handle,
)
from opmarket.registry._capi_bridge import native_door
from opmarket.sdk import KernelSpec, get_include

DATA = Path(__file__).resolve().parent / "data"
SHIM = DATA / "header_kernel_shim.c"
FORMAT_1 = DATA / "kernel_h_format1"
OK, INVALID_ARGUMENT = 0, 3

pytestmark = pytest.mark.skipif(
    shutil.which("gcc") is None or shutil.which("g++") is None, reason="needs C and C++ compilers"
)


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    out = tmp_path_factory.mktemp("hk") / "libhk.so"
    subprocess.run(
        ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-fPIC", "-shared",
         "-fvisibility=hidden", "-pthread", f"-I{capi_bridge_include()}", str(SHIM), "-o",
         str(out)],
        check=True,
        capture_output=True,
        text=True,
    )  # fmt: skip
    lib = ctypes.CDLL(str(out))
    lib.hk_run.restype = ctypes.c_int
    return lib


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["time_two", "zero_out", "median_pool"]) as reg:
        for op in ("Opm>TimeTwo", "Opm>ZeroOut", "Opm>MedianPool"):
            if reg.op_def(op) is None:
                pytest.skip(f"{op}'s plugin is not installed (scripts/setup installs it)")
        yield reg


def bridge_address() -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return int(get(capi_bridge(), b"opmarket.capi_bridge"))


def kernel(registry: Registry, op: str, dtype: str) -> KernelSpec:
    (spec,) = [
        k
        for k in registry.kernels(op)
        if not k.label and any(t.spec_name == dtype for _, ts in k.constraints for t in ts)
    ]
    return spec


def run(
    shim: ctypes.CDLL,
    handle: int,
    x: np.ndarray[Any, Any],
    out_shape: tuple[int, ...],
    **attrs: Any,
) -> tuple[int, str, np.ndarray[Any, Any]]:
    """Run the C entry ``handle`` on ``x`` in the shim's own thread: (code, message, out)."""
    names, values, lengths, kinds, keep = [], [], [], [], []
    for name, value in attrs.items():
        if isinstance(value, str):
            raw: Any = ctypes.create_string_buffer(value.encode(), len(value))
            kinds.append(b"s")
            lengths.append(len(value))
        else:
            many = isinstance(value, list)
            raw = np.array(value if many else [value], np.int64)
            kinds.append(b"l" if many else b"i")
            lengths.append(len(raw))
        keep.append(raw)
        names.append(name.encode())
        values.append(ctypes.cast(raw.ctypes.data if isinstance(raw, np.ndarray) else raw,
                                  ctypes.c_void_p))  # fmt: skip
    n = len(names)
    out = np.full(out_shape, -1, x.dtype)
    dims = np.array(x.shape, np.int64)
    out_dims = np.zeros(8, np.int64)
    out_ndim = ctypes.c_int(-1)
    message = ctypes.create_string_buffer(512)
    code = shim.hk_run(
        ctypes.c_void_p(bridge_address()),
        ctypes.c_void_p(handle),
        n,
        (ctypes.c_char_p * max(n, 1))(*names),
        (ctypes.c_void_p * max(n, 1))(*values),
        np.array(lengths or [0], np.int64).ctypes.data_as(ctypes.c_void_p),
        b"".join(kinds) or b"\0",
        {np.float32: 1, np.float64: 2, np.int32: 3}[x.dtype.type],
        x.ctypes.data_as(ctypes.c_void_p),
        dims.ctypes.data_as(ctypes.c_void_p),
        x.ndim,
        out.ctypes.data_as(ctypes.c_void_p),
        ctypes.c_size_t(out.nbytes),
        out_dims.ctypes.data_as(ctypes.c_void_p),
        ctypes.byref(out_ndim),
        message,
        ctypes.c_size_t(len(message)),
    )
    if code == OK:
        assert tuple(out_dims[: out_ndim.value]) == out_shape
    return code, message.value.decode(), out


def test_first_party_kernels_have_c_entries_from_their_cpp_source(registry: Registry) -> None:
    for op, dtype in (("Opm>TimeTwo", "float"), ("Opm>ZeroOut", "int32")):
        door = native_door(kernel(registry, op, dtype))
        assert door.native, door.reason
    # MedianPool reads list attrs: a bridge asking with interface version 1 goes through
    # Python, and is told why; version 2 gets the C entry.
    spec = kernel(registry, "Opm>MedianPool", "float")
    door = native_door(spec)
    assert not door.native and "list attrs" in door.reason and "version 2" in door.reason
    assert native_kernel_handle(spec) is None
    assert native_kernel_handle(spec, bridge_version=2)


def test_time_two_and_zero_out_run_natively_off_a_python_thread(
    shim: ctypes.CDLL, registry: Registry
) -> None:
    x = np.array([1.5, -2.0, 3.25, 0.0, 7.0, -1.0, 2.0, 4.0], np.float32)
    handle = native_kernel_handle(kernel(registry, "Opm>TimeTwo", "float"))
    assert handle
    code, message, out = run(shim, handle, x, x.shape)
    assert code == OK, message
    np.testing.assert_array_equal(out, opmarket.ops.time_two(x))
    z = np.arange(1, 7, dtype=np.int32)
    handle = native_kernel_handle(kernel(registry, "Opm>ZeroOut", "int32"))
    assert handle
    code, message, out = run(shim, handle, z, z.shape, preserve_index=4)
    assert code == OK, message
    np.testing.assert_array_equal(out, opmarket.ops.zero_out(z, preserve_index=4))
    # OPM_REQUIRES on the C door: the call's INVALID_ARGUMENT status, with the message.
    code, message, _ = run(shim, handle, z, z.shape, preserve_index=9)
    assert code == INVALID_ARGUMENT and "preserve_index out of range: 9" in message


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_median_pool_runs_natively_with_list_attrs(
    shim: ctypes.CDLL, registry: Registry, padding: str
) -> None:
    x = np.random.default_rng(3).random((1, 40, 33, 1), dtype=np.float32)
    attrs: dict[str, Any] = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": padding}
    want = opmarket.ops.median_pool(x, **attrs)
    handle = native_kernel_handle(kernel(registry, "Opm>MedianPool", "float"), bridge_version=2)
    assert handle
    code, message, out = run(shim, handle, x, want.shape, **attrs)
    assert code == OK, message
    np.testing.assert_array_equal(out, want)
    code, message, _ = run(shim, handle, x, want.shape, **{**attrs, "ksize": [1, 3, 3]})
    assert code == INVALID_ARGUMENT and "ksize field must specify 4 dimensions" in message


SOURCE = """
    #include <opmarket/kernel.h>
    namespace py = pybind11;
    static opmarket::Tensor<float> Twice(opmarket::Tensor<float> x, float factor) {
      auto out = opmarket::allocate<float>(x.shape());
      float* o = out.mutable_data();
      const float* in = x.data();
      py::gil_scoped_release no_gil;
      for (int64_t i = 0; i < x.size(); ++i) o[i] = in[i] * factor;
      return out;
    }
    OPM_LIBRARY(_old_twice, lib) {
      lib.op("Old>Twice").attr("factor: float = 2.0").input("x: float").output("y: float");
      lib.kernel("Old>Twice", "twice", &Twice, py::arg("x"), py::arg("factor") = 2.0f);
    }
"""


def compile_library(tmp_path: Path, source: str, include: Path) -> subprocess.CompletedProcess[str]:
    import pybind11

    src = tmp_path / "old_twice.cc"
    src.write_text(textwrap.dedent(source), encoding="utf-8")
    out = tmp_path / f"_old_twice{sysconfig.get_config_var('EXT_SUFFIX')}"
    return subprocess.run(
        ["g++", "-std=c++17", "-O1", "-shared", "-fPIC", "-fvisibility=hidden",
         f"-I{include}", f"-I{sysconfig.get_paths()['include']}", f"-I{pybind11.get_include()}",
         str(src), "-o", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip


@pytest.mark.slow
def test_a_library_built_with_the_previous_header_runs_through_python(tmp_path: Path) -> None:
    frozen = (FORMAT_1 / "opmarket" / "kernel.h").read_text(encoding="utf-8")
    assert "#define OPMARKET_LIBRARY_FORMAT 1" in frozen and "release_gil" not in frozen
    done = compile_library(tmp_path, SOURCE, FORMAT_1)
    assert done.returncode == 0, done.stderr
    (path,) = tmp_path.glob("_old_twice*.so")
    with isolated_registry(plugins=[]) as reg:
        lib = load_library(path)
        x = np.array([1.0, -3.0], np.float32)
        np.testing.assert_array_equal(lib.twice(x, factor=3.0), [3.0, -9.0])
        (spec,) = reg.kernels("Old>Twice")
        door = native_door(spec)
        assert not door.native and "library format 1" in door.reason and "rebuild" in door.reason
        assert native_kernel_handle(spec, bridge_version=2) is None


def test_py_gil_scoped_release_does_not_compile_against_the_new_header(tmp_path: Path) -> None:
    done = compile_library(tmp_path, SOURCE, Path(get_include()))
    assert done.returncode != 0
    assert "use_opmarket_release_gil" in done.stderr


def test_doctor_says_which_door_each_kernel_takes_and_why() -> None:
    import json
    import sys

    done = subprocess.run(
        [str(Path(sys.executable).parent / "opmarket"), "doctor", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a GPU-only op on a machine without one
    ops = {o["op"]: o["kernels"] for o in json.loads(done.stdout)["ops"]}
    if "Opm>TimeTwo" not in ops or "Opm>MedianPool" not in ops:
        pytest.skip("time_two and median_pool are not installed (scripts/setup installs them)")
    cpu = [k for k in ops["Opm>TimeTwo"] if k["device"] == "CPU"]
    assert cpu and all(k["native"] for k in cpu)
    assert all("kernel.h library" in k["native_reason"] for k in cpu)
    # Every framework bridge serves list attrs (interface version 2): MedianPool is native.
    pool = [k for k in ops["Opm>MedianPool"] if k["device"] == "CPU"]
    assert pool and all(k["native"] for k in pool)
    assert all("kernel.h library" in k["native_reason"] for k in pool)
    assert all("native" not in k for k in ops["Opm>MedianPool"] if k["device"] == "GPU")
