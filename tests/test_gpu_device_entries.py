"""The GPU companions' device entries (``opmarket/cuda_kernel.h``): the door framework
bridges call on their own GPU buffers and stream. Without a GPU, what can be checked is
checked for real: each installed companion library exports its entry (read with opmarket's
ELF reader), the Python kernel names it, and a C harness calls each entry through the
header's interfaces with opmarket's real bridge table: the entry reads its inputs and attrs,
allocates its outputs through the bridge (the shapes a bridge must allocate) and then fails
to launch, with CUDA's reason in the status, since no GPU is there.
"""

from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import pytest

from opmarket.registry import capi_bridge
from opmarket.registry._elfsymbols import Exports
from opmarket.sdk import get_include
from opmarket.sdk.build import DeviceEntry, compiler, entry_of
from tests.test_gpu_companions import needs_companions

ENTRIES = {
    "opmarket_time_two_cuda13": ("time_two_gpu", "opm_time_two_device"),
    "opmarket_median_pool_cuda13": ("median_pool_gpu", "opm_median_pool_device"),
}

# A bridge in miniature: one input (host memory standing in for device memory: without a GPU
# the launch fails before anything reads it), attrs from arrays, outputs recorded.
HARNESS = r"""
#include <string.h>
#include "opmarket/cuda_kernel.h"

typedef struct { OPMB_KernelContext base; OPMB_Tensor in; OPMB_Tensor out; int64_t dims[8];
                 float data[64]; const OPM_Api* api; } Ctx;
typedef struct { OPMB_KernelConstruction base; const int64_t* ksize; int nk;
                 const char* padding; } Attrs;

static int n_in(OPMB_KernelContext* c) { (void)c; return 1; }
static int n_out(OPMB_KernelContext* c) { (void)c; return 1; }
static const OPMB_Tensor* input(OPMB_KernelContext* c, int i, OPM_Status* s) {
  (void)i; (void)s; return &((Ctx*)c)->in;
}
static const OPMB_Tensor* allocate(OPMB_KernelContext* b, int i, OPM_DataType t,
                                   const int64_t* dims, int n, OPM_Status* s) {
  Ctx* c = (Ctx*)b; (void)i; (void)s;
  memcpy(c->dims, dims, (size_t)n * sizeof *dims);
  c->out.dtype = t; c->out.ndim = n; c->out.dims = c->dims; c->out.data = c->data;
  return &c->out;
}
static void int64_list(OPMB_KernelConstruction* b, const char* name, int64_t* v, size_t max,
                       size_t* length, OPM_Status* s) {
  Attrs* a = (Attrs*)b; (void)name; (void)s;
  *length = (size_t)a->nk;
  for (size_t k = 0; k < max && k < *length; ++k) v[k] = a->ksize[k];
}
static void string(OPMB_KernelConstruction* b, const char* name, char* v, size_t max,
                   size_t* length, OPM_Status* s) {
  Attrs* a = (Attrs*)b; (void)name; (void)s;
  *length = strlen(a->padding);
  memcpy(v, a->padding, *length < max ? *length : max);
}
static const OPMB_KernelContextOps ctx_ops = {sizeof ctx_ops, n_in, n_out, input, allocate};
static const OPMB_KernelConstructionOps attr_ops = {
    sizeof attr_ops, 0, 0, 0, 0, string, int64_list, 0};

/* Calls `entry` on a float input of shape dims[0..ndim); the output's rank and dims go to
 * out_dims (rank -1: none allocated), the status's code is returned, its message in msg. */
int run(OPM_CudaKernelFn entry, const OPMB_BridgeApi* bridge, const int64_t* dims, int ndim,
        const int64_t* ksize, int nk, const char* padding, int64_t* out_dims, char* msg,
        size_t cap, uint32_t flags, size_t struct_size) {
  static Ctx c;
  memset(&c, 0, sizeof c);
  c.base.ops = &ctx_ops;
  c.in.dtype = OPM_FLOAT; c.in.ndim = ndim; c.in.dims = dims; c.in.data = c.data;
  c.in.nbytes = 4;
  for (int k = 0; k < ndim; ++k) c.in.nbytes *= (size_t)dims[k];
  c.out.ndim = -1;
  Attrs a = {{&attr_ops}, ksize, nk, padding};
  OPM_Status* status = bridge->api->NewStatus();
  OPM_CudaKernelCall call = {struct_size, OPM_CUDA_KERNEL_VERSION, 0, NULL, bridge->api,
                             status, &a.base, &c.base, flags};
  entry(&call);
  out_dims[0] = c.out.ndim;
  for (int k = 0; k < c.out.ndim; ++k) out_dims[1 + k] = c.dims[k];
  int code = bridge->api->GetCode(status);
  strncpy(msg, bridge->api->Message(status), cap - 1);
  msg[cap - 1] = 0;
  bridge->api->DeleteStatus(status);
  return code;
}

/* What a version 2 bridge fills, and what a version 1 bridge filled (the struct before flags). */
size_t call_size(void) { return sizeof(OPM_CudaKernelCall); }
size_t call_size_v1(void) { return offsetof(OPM_CudaKernelCall, flags); }
"""


def kernel_and_library(module_name: str) -> tuple[object, Path]:
    module = __import__(module_name)
    kernel = getattr(module, ENTRIES[module_name][0])
    return kernel, Path(module.__file__).with_name(module.LIBRARY)


@needs_companions
@pytest.mark.parametrize("module_name", sorted(ENTRIES))
def test_each_companion_exports_the_device_entry_its_kernel_names(module_name: str) -> None:
    kernel, library = kernel_and_library(module_name)
    symbol = ENTRIES[module_name][1]
    assert Exports(library).find([symbol]), f"{library.name} does not export {symbol}"
    entry = entry_of(kernel)
    assert entry is not None and entry.symbol == symbol
    address, why = entry.address()
    assert why == "" and address, why
    loaded = ctypes.CDLL(str(library))
    assert address == ctypes.cast(getattr(loaded, symbol), ctypes.c_void_p).value
    missing = DeviceEntry("opm_time_three_device", entry.library).address()
    assert missing == (0, f"{library.name} exports no opm_time_three_device()")


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> ctypes.CDLL:
    """The harness above, compiled as C99 against the header (which must be plain C)."""
    folder = tmp_path_factory.mktemp("entry-harness")
    (folder / "harness.c").write_text(HARNESS)
    target = folder / "harness.so"
    subprocess.run(
        [
            *compiler("c"),
            "-std=c99",
            "-Wall",
            "-Werror",
            "-shared",
            "-fPIC",
            f"-I{get_include()}",
            "-o",
            str(target),
            str(folder / "harness.c"),
        ],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(target))
    lib.run.restype = ctypes.c_int
    lib.call_size.restype = lib.call_size_v1.restype = ctypes.c_size_t
    p64 = ctypes.POINTER(ctypes.c_int64)
    lib.run.argtypes = [
        ctypes.c_void_p,  # entry
        ctypes.c_void_p,  # bridge table
        p64,  # input dims
        ctypes.c_int,
        p64,  # ksize (and strides)
        ctypes.c_int,
        ctypes.c_char_p,  # padding
        p64,  # out: rank, dims
        ctypes.c_char_p,  # out: message
        ctypes.c_size_t,
        ctypes.c_uint32,  # flags
        ctypes.c_size_t,  # struct_size: what the bridge filled
    ]
    return lib


#: OPM_CUDA_SYNCHRONIZE
SYNCHRONIZE = 1


def call_entry(
    harness: ctypes.CDLL,
    module_name: str,
    dims: list[int],
    ksize: list[int] = (),  # type: ignore[assignment]
    padding: str = "",
    *,
    flags: int = 0,
    struct_size: int | None = None,
) -> tuple[int, list[int], str]:
    """(status code, output dims or [] when none was allocated, message)."""
    kernel, _ = kernel_and_library(module_name)
    entry = entry_of(kernel)
    assert entry is not None
    address, why = entry.address()
    assert address, why
    if entry.library().available:
        pytest.skip("a GPU is visible: the entries run for real in scripts/gpu-check")
    bridge = ctypes.pythonapi.PyCapsule_GetPointer
    bridge.restype, bridge.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    table = bridge(capi_bridge(), b"opmarket.capi_bridge")
    out = (ctypes.c_int64 * 9)()
    msg = ctypes.create_string_buffer(512)
    code = harness.run(
        address,
        table,
        (ctypes.c_int64 * len(dims))(*dims),
        len(dims),
        (ctypes.c_int64 * max(len(ksize), 1))(*ksize),
        len(ksize),
        padding.encode(),
        out,
        msg,
        len(msg),
        flags,
        harness.call_size() if struct_size is None else struct_size,
    )
    return code, list(out[1 : 1 + out[0]]) if out[0] >= 0 else [], msg.value.decode()


OPM_INVALID_ARGUMENT, OPM_INTERNAL = 3, 13


@needs_companions
def test_time_two_s_entry_allocates_its_output_then_says_why_it_cannot_launch(
    harness: ctypes.CDLL,
) -> None:
    code, out, msg = call_entry(harness, "opmarket_time_two_cuda13", [2, 3])
    assert out == [2, 3]
    assert code == OPM_INTERNAL and msg.startswith("TimeTwo on the GPU: "), msg


@needs_companions
def test_median_pool_s_entry_reads_its_attrs_and_allocates_the_pooled_shape(
    harness: ctypes.CDLL,
) -> None:
    # ksize doubles as strides in the harness: 1x3x3x1 windows, stride 3, SAME on 1x7x8x2.
    code, out, msg = call_entry(
        harness, "opmarket_median_pool_cuda13", [1, 7, 8, 2], [1, 3, 3, 1], "SAME"
    )
    assert out == [1, 3, 3, 2]
    assert code == OPM_INTERNAL and msg.startswith("MedianPool on the GPU: "), msg
    code, out, msg = call_entry(
        harness, "opmarket_median_pool_cuda13", [1, 7, 8, 2], [1, 3, 3, 1], "VALID"
    )
    assert out == [1, 2, 2, 2]
    # No output element: nothing to launch, so no GPU is needed and the call succeeds.
    code, out, msg = call_entry(
        harness, "opmarket_median_pool_cuda13", [1, 2, 8, 2], [1, 3, 3, 1], "VALID"
    )
    assert (code, out, msg) == (0, [1, 0, 2, 2], "")


@needs_companions
@pytest.mark.parametrize(
    ("dims", "ksize", "padding", "message"),
    [
        ([1, 7, 8, 2], [1, 3, 3], "SAME", "must specify 4 dimensions"),
        ([1, 7, 8, 2], [2, 3, 3, 1], "SAME", "not yet supported on the batch dimension"),
        ([1, 7, 8, 2], [1, 3, 3, 1], "FULL", "padding must be 'VALID' or 'SAME', got 'FULL'"),
        ([7, 8, 2], [1, 3, 3, 1], "SAME", "4-D NHWC input, got rank 3"),
    ],
)
def test_median_pool_s_entry_refuses_bad_attrs_before_allocating(
    harness: ctypes.CDLL, dims: list[int], ksize: list[int], padding: str, message: str
) -> None:
    code, out, msg = call_entry(harness, "opmarket_median_pool_cuda13", dims, ksize, padding)
    assert (code, out) == (OPM_INVALID_ARGUMENT, [])
    assert message in msg


@needs_companions
@pytest.mark.parametrize("module_name", sorted(ENTRIES))
def test_each_companion_says_it_honours_the_synchronizing_mode(module_name: str) -> None:
    kernel, library = kernel_and_library(module_name)
    assert Exports(library).find(["opmarket_cuda_kernel_version"])
    entry = entry_of(kernel)
    assert entry is not None and entry.kernel_version() == 2


#: An entry's call for each companion: (module, input dims, ksize, padding, what it launches).
CALLS = [
    ("opmarket_time_two_cuda13", [2, 3], [], "", "TimeTwo"),
    ("opmarket_median_pool_cuda13", [1, 7, 8, 2], [1, 3, 3, 1], "SAME", "MedianPool"),
]


@needs_companions
@pytest.mark.parametrize("case", CALLS, ids=[c[0] for c in CALLS])
def test_the_synchronizing_flag_reaches_the_entry_which_settles_the_device_before_launching(
    harness: ctypes.CDLL, case: tuple[str, list[int], list[int], str, str]
) -> None:
    module_name, dims, ksize, padding, what = case
    # Asked to synchronise, the entry allocates its output, then selects and synchronises
    # the GPU right before the launch: without a GPU that is where it fails, with CUDA's
    # reason, and the failed launch after it does not replace that message.
    code, out, msg = call_entry(harness, module_name, dims, ksize, padding, flags=SYNCHRONIZE)
    assert out and code == OPM_INTERNAL
    assert msg.startswith("selecting GPU 0 before the launch (the synchronizing mode): "), msg
    # The same call without the flag fails only at the launch (above); so does a version 1
    # bridge's call, whose struct ends before `flags` (whatever follows it).
    v1 = harness.call_size_v1()
    assert v1 < harness.call_size()
    code, out, msg = call_entry(
        harness, module_name, dims, ksize, padding, flags=SYNCHRONIZE, struct_size=v1
    )
    assert out and code == OPM_INTERNAL and msg.startswith(f"{what} on the GPU: "), msg
