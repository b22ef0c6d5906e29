"""The framework bridges' interface (opmarket/capi_bridge.h): a tiny C shim, compiled here,
runs bitcast's C-ABI kernel (the first-party plugin, loaded once by the host) on tensors of
its own through the host's OPMB_BridgeApi capsule, from Python (ctypes, GIL released) and
from C threads that never touched Python."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opmarket.registry import (
    Registry,
    capi_bridge,
    capi_bridge_include,
    isolated_registry,
    native_kernel_handle,
    native_shape_fn_handle,
)
from opmarket.sdk import DType, as_dtype

SHIM = Path(__file__).resolve().parent / "data" / "capi_bridge_shim.c"
OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED = 0, 3, 8, 12

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The shim, compiled as a bridge author would: against the header in the package."""
    out = tmp_path_factory.mktemp("shim") / "libshim.so"
    subprocess.run(
        [
            "gcc",
            "-std=c99",
            "-pedantic",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-O1",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            "-pthread",
            f"-I{capi_bridge_include()}",
            str(SHIM),
            "-o",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    lib = ctypes.CDLL(str(out))
    lib.shim_run.restype = ctypes.c_int
    lib.shim_run.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.shim_shape.restype = ctypes.c_int
    lib.shim_shape.argtypes = [
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_int64,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int64),
        ctypes.c_char_p,
        ctypes.c_size_t,
    ]
    lib.shim_run_threads.restype = ctypes.c_int
    lib.shim_run_threads.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int]
    return lib


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["bitcast"]) as reg:
        if reg.op_def("Opm>Bitcast") is None:
            pytest.skip("the bitcast plugin is not installed (scripts/setup installs it)")
        yield reg


def bridge_address() -> int:
    """The OPMB_BridgeApi pointer, as a C shim reads it from the capsule."""
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = get(capi_bridge(), b"opmarket.capi_bridge")
    assert address
    return int(address)


def bitcast_handle(registry: Registry) -> int:
    (spec,) = registry.kernels("Opm>Bitcast")
    handle = native_kernel_handle(spec)
    assert handle is not None and spec.label == "" and spec.device == "CPU"
    return handle


def run(
    shim: ctypes.CDLL,
    handle: int,
    x: np.ndarray[Any, Any],
    to: DType,
    *,
    variant: int = 0,
    capacity: int | None = None,
) -> tuple[int, str, np.ndarray[Any, Any] | None]:
    """Bitcast ``x`` to ``to`` through the shim: (code, message, output or None)."""
    src = as_dtype(x.dtype)
    dims = np.array(x.shape, dtype=np.int64)
    out = np.zeros(x.nbytes + 16 if capacity is None else capacity, dtype=np.uint8)
    out_dims = np.zeros(16, dtype=np.int64)
    out_ndim = ctypes.c_int(-1)
    message = ctypes.create_string_buffer(512)
    code = shim.shim_run(
        bridge_address(),
        handle,
        variant,
        int(src),
        int(to),
        x.ctypes.data,
        dims.ctypes.data,
        x.ndim,
        out.ctypes.data,
        out.nbytes,
        out_dims.ctypes.data,
        ctypes.byref(out_ndim),
        message,
        len(message),
    )
    if code != OK:
        return code, message.value.decode(), None
    assert to.numpy is not None
    shape = tuple(int(d) for d in out_dims[: out_ndim.value])
    size = int(np.prod(shape)) * to.numpy.itemsize
    return code, "", out[:size].view(to.numpy).reshape(shape)


def test_a_shim_runs_bitcasts_c_kernel_on_its_own_tensors(
    shim: ctypes.CDLL, registry: Registry
) -> None:
    handle = bitcast_handle(registry)
    x = np.array([[1.5, -2.0, 3.25], [0.0, 1e9, -7.0]], np.float32)
    code, message, y = run(shim, handle, x, DType.UINT8)
    assert (code, message) == (OK, "")
    assert y is not None and y.shape == (2, 3, 4) and y.tobytes() == x.tobytes()
    # To a larger type the last dimension goes; the same handle serves Python's dispatch.
    pairs = np.arange(8, dtype=np.int32).reshape(4, 2)
    code, _, wide = run(shim, handle, pairs, DType.INT64)
    assert code == OK and wide is not None
    import opmarket

    assert np.array_equal(wide, opmarket.ops.bitcast(pairs, type=DType.INT64))
    assert np.array_equal(wide, pairs.view(np.int64).reshape(4))


def test_the_kernels_failures_come_back_as_statuses(shim: ctypes.CDLL, registry: Registry) -> None:
    handle = bitcast_handle(registry)
    code, message, _ = run(shim, handle, np.zeros((2, 3), np.int32), DType.INT64)
    assert code == INVALID_ARGUMENT
    assert message == (
        "Opm>Bitcast (kernel BitcastOp): Cannot bitcast from int32 to int64: "
        "the last dimension must be 2"
    )
    # create's failure, with the shim's own message: the node lacks an attr.
    code, message, _ = run(shim, handle, np.zeros(2, np.int32), DType.INT8, variant=1)
    assert (code, message) == (
        INVALID_ARGUMENT,
        "Opm>Bitcast (kernel BitcastOp): shim: the node has no attr 'type'",
    )
    # A bridge without attr getters: the plugin is told, not crashed.
    code, message, _ = run(shim, handle, np.zeros(2, np.int32), DType.INT8, variant=2)
    assert code == UNIMPLEMENTED and "a type attr is not available here" in message
    # The bridge's own allocation failure reaches it through the kernel.
    code, message, _ = run(shim, handle, np.zeros(4000, np.int8), DType.UINT8, capacity=64)
    assert (code, message) == (
        RESOURCE_EXHAUSTED,
        "Opm>Bitcast (kernel BitcastOp): shim: the output buffer is too small",
    )


def test_c_threads_without_python_run_the_kernel_at_once(
    shim: ctypes.CDLL, registry: Registry
) -> None:
    """Eight threads made in C, 500 create/compute/delete each: the bridge path touches no
    Python (a call into CPython without a thread state would abort the process)."""
    assert shim.shim_run_threads(bridge_address(), bitcast_handle(registry), 8, 500) == 0


def shape(
    shim: ctypes.CDLL, handle: int, src: DType, to: DType, dims: tuple[int, ...] | None
) -> tuple[int, str, tuple[int, ...] | None]:
    """Bitcast's output shape for an input of ``dims`` (None: unknown rank), through the
    shim: (code, message, output dims with -1 unknown, or None for an unknown rank)."""
    given = np.array(dims or (0,), dtype=np.int64)
    out = np.zeros(16, dtype=np.int64)
    rank = ctypes.c_int64(-3)
    message = ctypes.create_string_buffer(512)
    code = shim.shim_shape(
        bridge_address(),
        handle,
        int(src),
        int(to),
        -1 if dims is None else len(dims),
        given.ctypes.data,
        out.ctypes.data,
        ctypes.byref(rank),
        message,
        len(message),
    )
    assert rank.value >= -1 or code != OK
    result = None if rank.value < 0 else tuple(int(d) for d in out[: rank.value])
    return code, message.value.decode(), result


def test_a_shim_runs_the_ops_shape_function(shim: ctypes.CDLL, registry: Registry) -> None:
    handle = native_shape_fn_handle(registry.shape_fn("Opm>Bitcast"))
    assert handle is not None
    assert shape(shim, handle, DType.FLOAT, DType.UINT8, (2, -1)) == (OK, "", (2, -1, 4))
    assert shape(shim, handle, DType.INT8, DType.INT32, (5, 4)) == (OK, "", (5,))
    assert shape(shim, handle, DType.FLOAT, DType.INT8, None) == (OK, "", None)
    assert shape(shim, handle, DType.INT32, DType.INT64, (2, 3)) == (
        INVALID_ARGUMENT,
        "Opm>Bitcast: Cannot bitcast due to shape. 3 does not match 2",
        None,
    )


def test_only_c_abi_kernels_have_a_handle(registry: Registry) -> None:
    from opmarket.sdk import KernelSpec, ShapeFnSpec

    def double(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return x * 2

    assert native_kernel_handle(KernelSpec(op="Opm>Bitcast", impl=double)) is None
    assert native_shape_fn_handle(None) is None
    assert native_shape_fn_handle(ShapeFnSpec(op="Opm>Bitcast", fn=lambda c: None)) is None
    assert Path(capi_bridge_include(), "opmarket", "capi_bridge.h").is_file()
    assert type(capi_bridge()).__name__ == "PyCapsule"
