"""GPU kernels inside TensorFlow: a GPU companion's device entry (``opmarket/cuda_kernel.h``)
registered as a TensorFlow GPU kernel, run by the shim on TensorFlow's device memory with no
Python per call, in the *synchronizing* mode.

TensorFlow's C kernel API gives a kernel its CUDA stream only on pluggable devices
(``TF_GetStream``), never on TensorFlow's own GPU device, so the entry cannot launch in order
on TensorFlow's compute stream. The shim calls it with ``OPM_CUDA_SYNCHRONIZE`` instead: the
entry synchronises the device before its launch and its own stream after
(``opmarket::cuda::DeviceCall``), which is correct on any stream TensorFlow uses and costs a
device synchronisation per call. Registered only where TensorFlow lists a GPU device;
:func:`gpu_reason` says why not, or that the path is synchronizing."""

from __future__ import annotations

import ctypes
import functools
import itertools
from collections.abc import Callable
from typing import Any

from opmarket._bridge import BridgeError, device_entry_address, registry
from opmarket.sdk import KernelSpec, OpDef
from opmarket.sdk.build import entry_of
from opmarket.tensorflow._build import shim
from opmarket.tensorflow._labels import targets

__all__ = ["SYNCHRONIZING", "gpu_reason", "gpu_unavailable", "register", "register_kernels"]

#: What native_reason says of a GPU kernel TensorFlow runs natively: why it synchronizes.
SYNCHRONIZING = "TensorFlow's C API gives no stream for its own GPU device"
#: The attr kinds a GPU kernel keeps for its entry (``_shim_device.cc``), by attr type.
KINDS = {
    "type": 1,
    "int": 2,
    "float": 3,
    "bool": 4,
    "string": 5,
    "list(int)": 6,
    "list(float)": 7,
}
#: The first OPM_CudaKernelCall version whose entries honour the synchronizing mode.
SYNC_VERSION = 2

# (op name, kernel label) -> "" (a synchronizing GPU kernel is registered) or why not
_reasons: dict[tuple[str, str], str] = {}


@functools.cache
def gpu_unavailable() -> str:
    """Why TensorFlow gets no GPU kernel here ("" where it lists a GPU device)."""
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return ""
    build = "a CUDA build" if tf.test.is_built_with_cuda() else "a CPU build"
    return f"TensorFlow lists no GPU device (TensorFlow {tf.version.VERSION}, {build})"


def _entry(spec: KernelSpec) -> tuple[int, str]:
    """(the address of the GPU kernel's device entry, "") where the shim can call it
    synchronizing, else (0, why not)."""
    address, why = device_entry_address(spec)
    if not address:
        return 0, why
    entry = entry_of(spec.impl)
    version = entry.kernel_version() if entry is not None else 0
    if version < SYNC_VERSION:
        return 0, (
            f"the device entry of its GPU kernel {spec.name} was built with "
            f"opmarket/cuda_kernel.h version {version}, which cannot synchronize (TensorFlow "
            "gives it no stream): rebuild the companion"
        )
    return address, ""


def _kernel_names(tf_op: str, spec: KernelSpec, label: str) -> list[tuple[str, Any, Any, int]]:
    """One TensorFlow registration per combination of the kernel's allowed types: (kernel
    name, type attr names, dtypes, how many)."""
    axes = [[(attr, t) for t in types] for attr, types in spec.constraints]
    out = []
    for combo in itertools.product(*axes):
        names = (ctypes.c_char_p * max(len(combo), 1))(*[a.encode() for a, _ in combo])
        dtypes = (ctypes.c_int32 * max(len(combo), 1))(*[t.value for _, t in combo])
        types = ",".join(f"{a}={t.spec_name}" for a, t in combo)
        out.append((f"{tf_op}:{spec.name}:{label or '-'}:{types}:GPU", names, dtypes, len(combo)))
    return out


def _register_one(
    op: OpDef, spec: KernelSpec, *, address: int, bridge: int, slot: int, labelled: dict[str, str]
) -> None:
    """Register ``spec``'s entry (``address``) as ``op``'s GPU kernel, for each of its type
    combinations and each op its label runs."""
    lib = shim()
    attrs = [a for a in op.attrs if a.type in KINDS]
    attr_names = (ctypes.c_char_p * max(len(attrs), 1))(*[a.name.encode() for a in attrs])
    attr_kinds = (ctypes.c_int32 * max(len(attrs), 1))(*[KINDS[a.type] for a in attrs])
    for tf_op, label in targets(op.name, spec.label, labelled):
        for kernel_name, names, dtypes, n in _kernel_names(tf_op, spec, label):
            status = lib.TF_NewStatus()
            try:
                lib.opm_tf_register_device_kernel(
                    kernel_name.encode(),
                    tf_op.encode(),
                    b"GPU",
                    slot,
                    names,
                    dtypes,
                    n,
                    label.encode(),
                    spec.priority,
                    ctypes.c_void_p(bridge),
                    ctypes.c_void_p(address),
                    attr_names,
                    attr_kinds,
                    len(attrs),
                    ctypes.c_void_p(status),
                )
                if lib.TF_GetCode(ctypes.c_void_p(status)) != 0:
                    message = lib.TF_Message(ctypes.c_void_p(status)).decode()
                    raise BridgeError(
                        f"TensorFlow refused GPU kernel {spec.name} of {tf_op}: {message}"
                    )
            finally:
                lib.TF_DeleteStatus(ctypes.c_void_p(status))


def register_kernels(
    op: OpDef,
    labelled: dict[str, str],
    take_slot: Callable[[KernelSpec], int],
    define: Callable[[str], None],
) -> None:
    """Register each of ``op``'s GPU kernels that has a synchronizing device entry as a
    TensorFlow GPU kernel (whether or not TensorFlow has a GPU: :func:`register` asks that
    first); ``labelled`` maps labels to their ops (``_labels``), ``take_slot(kernel)`` gives
    a create slot of the shim, ``define(label)`` defines a label's op. Why a label stays on
    Python is kept for :func:`gpu_reason`."""
    from opmarket.tensorflow._native import bridge_pointer

    kernels = [k for k in registry().kernels(op.name) if k.device == "GPU"]
    bridge = bridge_pointer()
    for spec in kernels:
        address, why = _entry(spec)
        if bridge is None or why:
            why = why or "this opmarket has no bridge table"
            _reasons.setdefault((op.name, spec.label), why)
            continue
        if spec.label and spec.label not in labelled:
            define(spec.label)
        _register_one(
            op, spec, address=address, bridge=bridge, slot=take_slot(spec), labelled=labelled
        )
        _reasons[(op.name, spec.label)] = ""


def register(
    op: OpDef,
    labelled: dict[str, str],
    take_slot: Callable[[KernelSpec], int],
    define: Callable[[str], None],
) -> None:
    """:func:`register_kernels` where TensorFlow lists a GPU device; else nothing."""
    if not gpu_unavailable():
        register_kernels(op, labelled, take_slot, define)


def gpu_reason(op: OpDef, label: str) -> tuple[bool, str]:
    """(whether ``op``'s GPU kernel under ``label`` runs natively in TensorFlow, what to say:
    :data:`SYNCHRONIZING` when it does, else why it does not)."""
    why = gpu_unavailable()
    if why:
        return False, why
    found = _reasons.get((op.name, label))
    if found is None:
        return False, (
            "it has no GPU kernel (a GPU companion registers one where a GPU is visible)"
            if not label
            else f"it has no GPU kernel with label {label!r}"
        )
    return (True, SYNCHRONIZING) if found == "" else (False, found)
