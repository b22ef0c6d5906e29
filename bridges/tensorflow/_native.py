"""C-ABI kernels run natively inside TensorFlow: the shim calls the host's bridge table
(``opmarket/capi_bridge.h``) on TensorFlow's own tensors, with no Python per call; GPU
companions' device entries too, synchronizing (``_gpu``). :func:`native_path` and
:func:`native_reason` say which path an op's kernel takes on a device, and why."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from opmarket._bridge import (
    BridgeError,
    KernelPlan,
    bridge_op,
    bridge_table,
    kernel_plan,
    native_handle,
)
from opmarket.tensorflow._build import shim

__all__ = [
    "BRIDGE_VERSION",
    "available",
    "bridge_pointer",
    "native_path",
    "native_reason",
    "plans",
    "register_kernel",
]

#: The shim's OPMB_BRIDGE_API_VERSION: its construction reads list(int) and list(float).
BRIDGE_VERSION = 2
# the device names native_path takes, as opmarket names them
_DEVICES = {"CPU": "CPU", "GPU": "GPU", "CUDA": "GPU"}


@functools.cache
def bridge_pointer() -> int | None:
    """The host's ``OPMB_BridgeApi*`` as an int; None when this opmarket has no bridge
    table (C-ABI kernels then run through Python, as in ``opmarket.ops``)."""
    return bridge_table()


def available() -> bool:
    """Whether C-ABI kernels can be registered natively."""
    return bridge_pointer() is not None


def plans(op: str) -> list[KernelPlan]:
    """The kernels TensorFlow gets for ``op``: native where the shim can run them."""
    return kernel_plan(op, native_ok=available(), bridge_version=BRIDGE_VERSION)


def register_kernel(
    kernel_name: str,
    target: tuple[str, str],
    plan: KernelPlan,
    slot: int,
    *,
    names: Any,
    dtypes: Any,
    n: int,
    status: int,
) -> None:
    """Register ``plan``'s C-ABI kernel with TensorFlow under ``kernel_name`` for ``target``,
    (the op's TensorFlow name, the label), for one dtype combination (``n`` constraints);
    the TensorFlow status says why not."""
    tf_op, label = target
    handle = native_handle(plan.spec, bridge_version=BRIDGE_VERSION)
    bridge = bridge_pointer()
    if handle is None or bridge is None:
        raise BridgeError(f"{tf_op}: kernel {plan.spec.name} has no native handle")
    shim().opm_tf_register_native_kernel(
        kernel_name.encode(),
        tf_op.encode(),
        plan.spec.device.encode(),
        slot,
        names,
        dtypes,
        n,
        label.encode(),
        plan.priority,
        ctypes.c_void_p(bridge),
        ctypes.c_void_p(handle),
        ctypes.c_void_p(status),
    )


def native_reason(name: str, *, device: str = "CPU", _kernel: str = "", **attrs: Any) -> str:
    """Why the op's kernel (``_kernel``: a kernel label, "" for the default) runs through
    Python in TensorFlow on ``device`` (``CPU``, or ``GPU``/``CUDA``); "" when it runs
    natively on the CPU. On the GPU a native kernel is synchronizing, and this says why
    (*TensorFlow's C API gives no stream for its own GPU device*). ``attrs`` are accepted
    for the bridges' common signature; the path does not depend on them."""
    from opmarket.tensorflow._gpu import gpu_reason
    from opmarket.tensorflow._register import registered

    op = bridge_op(name).op_def
    where = _DEVICES.get(device.upper())
    if where is None:
        return f"no native kernels on device {device!r} (native: CPU, GPU)"
    if where == "GPU":
        return gpu_reason(op, _kernel)[1]
    record = registered().get(op.name)
    found = [p for p in record.kernels if p.label == _kernel] if record else []
    if not found:
        return f"it has no CPU kernel with label {_kernel!r}"
    if any(p.native for p in found):
        return ""
    if not available():
        return "this opmarket has no bridge table (C-ABI kernels run through Python)"
    return f"its CPU kernel {found[0].spec.name} is not a C-ABI kernel"


def native_path(name: str, *, device: str = "CPU", _kernel: str = "", **attrs: Any) -> str:
    """Which path the op's kernel (``_kernel``: a label) takes in TensorFlow on ``device``:
    ``"native"`` (a C-ABI kernel the shim runs on the CPU, no Python per call), ``"native,
    synchronizing"`` (a GPU companion's device entry the shim runs on TensorFlow's GPU memory,
    synchronizing the device around its launch) or ``"python"``. :func:`native_reason` says
    why."""
    from opmarket.tensorflow._gpu import gpu_reason

    where = _DEVICES.get(device.upper())
    if where == "GPU":
        native, _ = gpu_reason(bridge_op(name).op_def, _kernel)
        return "native, synchronizing" if native else "python"
    if where == "CPU" and not native_reason(name, _kernel=_kernel):
        return "native"
    return "python"
