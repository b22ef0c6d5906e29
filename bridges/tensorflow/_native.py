"""C-ABI kernels run natively inside TensorFlow: the shim calls the host's bridge table
(``opmarket/capi_bridge.h``) on TensorFlow's own tensors, with no Python per call."""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from opmarket._bridge import BridgeError, KernelPlan, bridge_table, kernel_plan, native_handle
from opmarket.tensorflow._build import shim

__all__ = [
    "BRIDGE_VERSION",
    "GPU_REASON",
    "available",
    "bridge_pointer",
    "plans",
    "register_kernel",
]

#: The shim's OPMB_BRIDGE_API_VERSION: its construction reads list(int) and list(float).
BRIDGE_VERSION = 2
#: Why no GPU kernel is native in TensorFlow (a GPU companion's device entry needs the
#: stream TensorFlow runs the op on): they run through Python, with host arrays.
GPU_REASON = (
    "TensorFlow's C kernel API gives a kernel its CUDA stream (TF_GetStream) only on "
    "pluggable devices, not on TensorFlow's own GPU device"
)


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
