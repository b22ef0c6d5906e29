"""opmarket.tensorflow's GPU path on this machine's TensorFlow (a CPU build): a GPU companion's
device entry becomes a TensorFlow GPU kernel only where TensorFlow lists a GPU device, and is
called in the synchronizing mode (TensorFlow's C API gives its own GPU device's kernels no
stream). What is checked here for real, each in a fresh process (TensorFlow's registries are
the process's):

- the production condition: with the companions' kernels registered (as where a GPU is
  visible) on a TensorFlow without a GPU device, TensorFlow's kernel registry lists no GPU
  kernel for their ops and ``native_reason`` says why;
- the registration itself, forced past that condition: TensorFlow's registry lists a GPU
  kernel per dtype of each companion kernel, and the CPU kernels are unchanged beside it;
- the shim's C path, through a host-memory entry registered for the CPU (the only device
  here): the kernel keeps the node's attrs for the entry, passes TensorFlow's tensors, asks
  for the synchronizing mode with no stream, and turns a failure into TensorFlow's error.

What needs a GPU (the companions' kernels on TensorFlow's GPU memory) runs in
scripts/gpu-check's ``bridge tensorflow cuda`` line.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")

import opmarket  # noqa: E402
import opmarket.tensorflow as otf  # noqa: E402 (after the skip)
from opmarket._bridge import registry  # noqa: E402
from opmarket.registry import isolated_registry  # noqa: E402
from opmarket.sdk import get_include, kernel  # noqa: E402
from opmarket.sdk.build import CudaLibrary, compiler, device_entry, entry_of  # noqa: E402
from opmarket.tensorflow import _gpu  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402
from tests.test_gpu_companions import needs_companions  # noqa: E402

pytestmark = [
    needs_first_party,
    pytest.mark.skipif(
        bool(tf.config.list_physical_devices("GPU")),
        reason="TensorFlow lists a GPU: scripts/gpu-check runs the path",
    ),
]
CPU_BUILD = f"TensorFlow lists no GPU device (TensorFlow {tf.version.VERSION}, a CPU build)"

# Registers the companions' kernels as they register where a GPU is visible, imports the
# bridge, reads TensorFlow's kernel registry, then registers the GPU kernels past the "does
# TensorFlow list a GPU" condition and reads it again.
REGISTRATION = r"""
import json, sys
import opmarket, opmarket_median_pool_cuda13, opmarket_time_two_cuda13
from opmarket._bridge import load_all
load_all()  # the base plugins declare the ops
opmarket.register(*opmarket_time_two_cuda13.kernels(), *opmarket_median_pool_cuda13.kernels())
import opmarket.tensorflow as otf
from tensorflow.python.framework import kernels
from opmarket.tensorflow import _gpu, _register

OPS = ("Opm>TimeTwo", "Opm>MedianPool")

def listed():
    out = {}
    for op in OPS:
        rows = []
        for k in kernels.get_registered_kernels_for_op(op).kernel:
            types = {c.name: sorted(c.allowed_values.list.type) for c in k.constraint}
            rows.append([k.device_type, k.label, types])
        out[op] = sorted(rows, key=json.dumps)
    return out

report = {
    "before": listed(),
    "path": {op: otf.native_path(op, device="GPU") for op in OPS},
    "reason": {op: otf.native_reason(op, device="GPU") for op in OPS},
}
for op in OPS:
    record = _register.registered()[op]
    _gpu.register_kernels(
        record.op_def,
        record.labelled,
        lambda spec, op=record.op_def: _register._take_slot(op, spec),
        lambda label: None,
    )
report["after"] = listed()
x = otf.ops.time_two([1.0, 2.5])  # the CPU path still runs
report["cpu"] = [x.numpy().tolist(), otf.native_path("Opm>TimeTwo")]
json.dump(report, sys.stdout)
"""

DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64 = 1, 2, 3, 9


def _run(script: str, *args: str) -> dict:  # type: ignore[type-arg]
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.slow  # two seconds of TensorFlow import in a fresh process
@needs_companions
def test_gpu_kernels_are_registered_only_where_tensorflow_lists_a_gpu() -> None:
    report = _run(REGISTRATION)
    # Without a GPU device: no GPU kernel, python on the GPU, and why.
    for op in ("Opm>TimeTwo", "Opm>MedianPool"):
        assert all(device == "CPU" for device, _, _ in report["before"][op]), report["before"]
        assert report["path"][op] == "python"
        assert report["reason"][op] == CPU_BUILD
    # Forced past that condition: one GPU kernel per dtype the companion kernel allows.
    gpu = {
        op: [(label, types) for device, label, types in rows if device == "GPU"]
        for op, rows in report["after"].items()
    }
    assert gpu["Opm>TimeTwo"] == [
        ("", {"T": [t]}) for t in sorted([DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64])
    ]
    assert gpu["Opm>MedianPool"] == [("", {"T": [t]}) for t in (DT_FLOAT, DT_DOUBLE)]
    # the CPU kernels beside them are the ones registered before
    for op, rows in report["after"].items():
        assert [r for r in rows if r[0] == "CPU"] == report["before"][op]
    assert report["cpu"] == [[2.0, 5.0], "native"]


def test_without_a_gpu_device_the_gpu_path_is_python_and_says_why() -> None:
    for name in ("Opm>TimeTwo", "Opm>ZeroOut", "Opm>MedianPool"):
        for device in ("GPU", "CUDA", "gpu"):
            assert otf.native_reason(name, device=device) == CPU_BUILD
            assert otf.native_path(name, device=device) == "python"
    assert otf.native_path("Opm>ZeroOut") == "native"
    assert otf.native_reason("Opm>ZeroOut") == ""
    assert otf.native_path("Opm>TimeTwo", device="TPU") == "python"
    assert otf.native_reason("Opm>TimeTwo", device="TPU") == (
        "no native kernels on device 'TPU' (native: CPU, GPU)"
    )
    assert otf.native_reason("Opm>ZeroOut", _kernel="nope") == (
        "it has no CPU kernel with label 'nope'"
    )


# A device entry with no CUDA in it, over host memory: it records what the shim passed, reads
# the attrs the kernel kept, and writes 2 * x, or fails when ksize[0] is 0.
ENTRY = r"""
#include <string.h>
#include "opmarket/cuda_kernel.h"

uint32_t seen_flags, seen_version;
int32_t seen_stream_null, seen_type;
size_t seen_size, seen_nk;
int64_t seen_ksize[8];
char seen_padding[16];

void entry(const OPM_CudaKernelCall* call) {
  const OPMB_KernelConstructionOps* ops = call->attrs->ops;
  size_t n = 0;
  OPM_DataType t = OPM_FLOAT;
  seen_flags = OPM_CUDA_CALL_FLAGS(call);
  seen_version = call->version;
  seen_size = call->struct_size;
  seen_stream_null = call->stream == NULL;
  ops->get_attr_type(call->attrs, "T", &t, call->status);
  seen_type = (int32_t)t;
  ops->get_attr_int64_list(call->attrs, "ksize", seen_ksize, 8, &seen_nk, call->status);
  ops->get_attr_string(call->attrs, "padding", seen_padding, 15, &n, call->status);
  seen_padding[n < 15 ? n : 15] = 0;
  if (seen_nk > 0 && seen_ksize[0] == 0) {
    ops->get_attr_int64(call->attrs, "padding", (int64_t*)seen_ksize, call->status);
    return;
  }
  const OPMB_Tensor* in = call->context->ops->get_input(call->context, 0, call->status);
  if (in == NULL) return;
  const OPMB_Tensor* out = call->context->ops->allocate_output(
      call->context, 0, in->dtype, in->dims, in->ndim, call->status);
  if (out == NULL) return;
  for (size_t i = 0; i < in->nbytes / sizeof(float); ++i)
    ((float*)out->data)[i] = 2 * ((const float*)in->data)[i];
}
"""

# Defines a test op with MedianPool's attrs, registers the entry above as its kernel for
# the CPU through the shim's device-kernel registration, and runs it eagerly.
SHIM_PATH = r"""
import ctypes, json, sys
import numpy as np
import opmarket.tensorflow as otf
import tensorflow as tf
from tensorflow.python.eager import context, execute
from opmarket.tensorflow._build import shim
from opmarket.tensorflow._native import bridge_pointer
from opmarket.tensorflow._register import _take_slot
from opmarket._bridge import bridge_op

lib, entry = shim(), ctypes.CDLL(sys.argv[1])
def strings(*items):
    return (ctypes.c_char_p * (len(items) + 1))(*[s.encode() for s in items], None)
def checked(call, *args):
    status = lib.TF_NewStatus()
    call(*args, ctypes.c_void_p(status))
    assert lib.TF_GetCode(ctypes.c_void_p(status)) == 0, lib.TF_Message(ctypes.c_void_p(status))
    lib.TF_DeleteStatus(ctypes.c_void_p(status))

attrs = ["T: {float, double}", "ksize: list(int)", "padding: string"]
checked(lib.opm_tf_register_op, b"OpmTest>DeviceEntry", strings("x: T"), strings("y: T"),
        strings(*attrs), 0, -1)
slot = _take_slot(bridge_op("Opm>MedianPool").op_def, None)
kinds = (ctypes.c_int32 * 3)(1, 6, 5)
checked(lib.opm_tf_register_device_kernel, b"OpmTest>DeviceEntry:entry", b"OpmTest>DeviceEntry",
        b"CPU", slot, (ctypes.c_char_p * 1)(b"T"), (ctypes.c_int32 * 1)(1), 1, b"", 0,
        ctypes.c_void_p(bridge_pointer()), ctypes.cast(entry.entry, ctypes.c_void_p),
        (ctypes.c_char_p * 3)(b"T", b"ksize", b"padding"), kinds, 3)

def run(ksize):
    x = tf.constant(np.array([[1.0, -2.5], [3.0, 4.0]], np.float32))
    attrs = ("T", tf.float32.as_datatype_enum, "ksize", ksize, "padding", "SAME")
    return execute.execute("OpmTest>DeviceEntry", 1, [x], attrs, context.context())[0]

out = {"y": run([1, 3, 3, 1]).numpy().tolist()}
for name, ctype in [("seen_flags", ctypes.c_uint32), ("seen_version", ctypes.c_uint32),
                    ("seen_stream_null", ctypes.c_int32), ("seen_type", ctypes.c_int32),
                    ("seen_size", ctypes.c_size_t), ("seen_nk", ctypes.c_size_t)]:
    out[name] = ctype.in_dll(entry, name).value
out["ksize"] = list((ctypes.c_int64 * 8).in_dll(entry, "seen_ksize"))[: out["seen_nk"]]
padding = ctypes.c_char.in_dll(entry, "seen_padding")
out["padding"] = ctypes.string_at(ctypes.addressof(padding)).decode()
try:
    run([0, 1, 1, 1])
except tf.errors.InvalidArgumentError as exc:
    out["error"] = exc.message
json.dump(out, sys.stdout)
"""


@pytest.mark.slow  # a C build and TensorFlow in a fresh process
def test_the_shim_calls_a_device_entry_synchronizing_with_the_node_s_attrs(
    tmp_path: Path,
) -> None:
    (tmp_path / "entry.c").write_text(ENTRY)
    library = tmp_path / "entry.so"
    subprocess.run(
        [
            *compiler("c"),
            *("-std=c99", "-Wall", "-Werror", "-shared", "-fPIC", f"-I{get_include()}"),
            *("-o", str(library), str(tmp_path / "entry.c")),
        ],
        check=True,
        capture_output=True,
    )
    report = _run(SHIM_PATH, str(library))
    assert report["y"] == [[2.0, -5.0], [6.0, 8.0]]
    # the synchronizing mode, no stream, a version 2 call, the kept attrs
    assert report["seen_flags"] == 1 and report["seen_stream_null"] == 1
    assert report["seen_version"] == 2 and report["seen_size"] >= 64
    assert (report["seen_type"], report["ksize"], report["padding"]) == (
        DT_FLOAT,
        [1, 3, 3, 1],
        "SAME",
    )
    # an attr of another kind than the entry asks: the entry's failure is TensorFlow's error
    assert "has no attr 'padding' of the kind asked for" in report["error"], report


def test_an_entry_built_before_the_synchronizing_mode_stays_on_python_and_says_rebuild(
    tmp_path: Path,
) -> None:
    # A library as the version 1 header built it: its entry, no opmarket_cuda_kernel_version.
    (tmp_path / "old.c").write_text("void opm_old_device(const void* call) { (void)call; }\n")
    library = tmp_path / "libold.so"
    subprocess.run(
        [*compiler("c"), "-shared", "-fPIC", "-o", str(library), str(tmp_path / "old.c")],
        check=True,
        capture_output=True,
    )
    loaded = CudaLibrary(str(library), ctypes.CDLL(str(library)), 0, "no GPU visible")

    @device_entry("opm_old_device", lambda: loaded)
    @kernel("Opm>TimeTwo", device="GPU", constraints={"T": [np.float32]})
    def old_gpu(input: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
        return input * 2

    with isolated_registry(plugins=["time_two"]):
        opmarket.register(old_gpu)
        (spec,) = [k for k in registry().kernels("Opm>TimeTwo") if k.device == "GPU"]
        assert entry_of(spec.impl) is not None
        assert entry_of(spec.impl).kernel_version() == 1  # type: ignore[union-attr]
        assert _gpu._entry(spec) == (
            0,
            f"the device entry of its GPU kernel {spec.name} was built with "
            "opmarket/cuda_kernel.h version 1, which cannot synchronize (TensorFlow gives it "
            "no stream): rebuild the companion",
        )
