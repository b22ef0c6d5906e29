"""The one place the bridges touch opmarket's run time, through ``opmarket.registry``'s public
names only: the process registry, an op's binding and kernel choice, prepared calls
(``prepare``) and the C-ABI kernels' native handles. When the run time reorganises, only
this module follows."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

from opmarket.registry import (
    BUILTIN_OPS,
    Registry,
    capi_bridge,
    capi_bridge_include,
    get_registry,
    load_plugins,
    native_kernel_handle,
    native_shape_fn_handle,
    prepare,
)
from opmarket.sdk import KernelSpec, OpDef, OpmarketError
from opmarket.sdk.build import entry_of

__all__ = [
    "bind",
    "bind_inputs",
    "bridge_include",
    "bridge_table",
    "builtin",
    "choose_kernel",
    "device_entry_address",
    "load_all",
    "native_handle",
    "native_shape_handle",
    "op_def",
    "prepare",
    "registry",
]


def registry() -> Registry:
    """The process registry (the current isolated one inside ``isolated_registry``)."""
    return get_registry()


def load_all() -> None:
    """Load every installed plugin (what a framework that registers every op up front needs)."""
    load_plugins()


def op_def(name: str) -> OpDef | None:
    """The OpDef of the op of full name ``name``, loading the plugins that provide it as
    ``opmarket.ops[name]`` does (an op asked for before anything used it); None if no
    installed plugin has it."""
    found = registry().op_def(name)
    if found is None:
        import opmarket

        with contextlib.suppress(LookupError, OpmarketError):
            opmarket.ops[name]
        found = registry().op_def(name)
    return found


def builtin(name: str) -> bool:
    """Whether ``name`` is one of opmarket's built-in graph ops (Const, Identity, AddN, ...)."""
    return name in BUILTIN_OPS


def bind(op: OpDef, inputs: Sequence[Any], attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Every attr of ``op`` for these inputs (arrays; only their dtypes matter) and given
    attrs, as :func:`bind_inputs` binds them."""
    return bind_inputs(op, inputs, attrs)[1]


def bind_inputs(
    op: OpDef, inputs: Sequence[Any], attrs: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """``opmarket.ops``' binding of ``op``: inputs (numpy arrays, Python values; a list per
    list argument) as arrays of the types they bind to, and every attr, inferred, defaulted
    and checked; InvalidArgumentError naming the op otherwise."""
    return registry().dispatcher(op.name).bind(inputs, attrs)


def choose_kernel(
    op: OpDef, attrs: Mapping[str, Any], device: str | None, label: str = ""
) -> KernelSpec:
    """The kernel dispatch runs for bound ``attrs`` on ``device``; KernelNotFoundError lists
    the registered ones."""
    return registry().dispatcher(op.name).choose(attrs, device, label)


def native_handle(spec: KernelSpec, *, bridge_version: int = 1) -> int | None:
    """The OPMB_Kernel handle (opmarket/capi_bridge.h) of a C-ABI kernel, or None: not a
    C-ABI kernel, one whose attrs a shim of ``bridge_version`` (its
    OPMB_BRIDGE_API_VERSION) cannot serve, or a host without the bridge interface."""
    try:
        handle = native_kernel_handle(spec, bridge_version=bridge_version)
    except Exception:  # no host (no compiler, no built extension): the Python path remains
        return None
    return int(handle) if handle else None


def device_entry_address(spec: KernelSpec) -> tuple[int, str]:
    """(the address of the ``OPM_CudaKernelFn`` a GPU kernel names, "") for a bridge's
    CUDA kernel (``opmarket/cuda_kernel.h``), or (0, why it has none)."""
    entry = entry_of(spec.impl)
    if entry is None:
        return 0, (
            f"its GPU kernel {spec.name} names no device entry (it takes host arrays only: "
            "opmarket.sdk.build.device_entry)"
        )
    address, why = entry.address()
    return address, f"the device entry of its GPU kernel {spec.name}: {why}" if why else ""


def native_shape_handle(op: OpDef) -> int | None:
    """The OPMB_ShapeFn handle of ``op``'s shape function where a C-ABI library registered
    it (the bridge table's ``shape_infer`` runs it with no Python), else None."""
    try:
        return native_shape_fn_handle(registry().shape_fn(op.name))
    except Exception:  # as native_handle: no host, the Python shape function remains
        return None


def bridge_table() -> int | None:
    """The address of the host's OPMB_BridgeApi, or None where there is no host (no
    compiler, no built extension): C-ABI kernels then run through Python."""
    import ctypes

    try:
        capsule = capi_bridge()
    except Exception:  # as above: the Python path remains
        return None
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype = ctypes.c_void_p
    pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = pointer(capsule, b"opmarket.capi_bridge")
    return int(address) if address else None


def bridge_include() -> str:
    """The folder holding opmarket/capi_bridge.h and opmarket/c_api.h."""
    return str(capi_bridge_include())
