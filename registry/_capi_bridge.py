"""The Python side of the framework bridges' interface (``opmarket/capi_bridge.h``): the
host's bridge table as a capsule, the include folder of its header, the handle of a
registered C-ABI kernel, which a bridge's C/C++ shim passes to ``kernel_create`` and
``kernel_compute`` to run the kernel on its framework's tensors with no Python per call,
and which door (native or Python) each kernel takes, and why."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from opmarket.registry._capi_kernel import CAbiKernel, NativeShapeFn, host
from opmarket.sdk import KernelSpec, OpmarketError, ShapeFnSpec, get_include
from opmarket.sdk._native import LibraryKernel, capi_reason

__all__ = [
    "BRIDGE_API_VERSION",
    "NativeDoor",
    "capi_bridge",
    "capi_bridge_include",
    "native_door",
    "native_kernel_handle",
    "native_shape_fn_handle",
]

#: The bridge interface version of ``opmarket/capi_bridge.h`` (OPMB_BRIDGE_API_VERSION).
BRIDGE_API_VERSION = 2

_lock = threading.Lock()
# Why a library's C entries could not be resolved, by library file.
_failed: dict[str, str] = {}


def capi_bridge() -> object:
    """The host's ``OPMB_BridgeApi`` table, as a PyCapsule named ``opmarket.capi_bridge``
    (``OPMB_CAPSULE_NAME``): in C, ``PyCapsule_GetPointer(capsule, OPMB_CAPSULE_NAME)``."""
    capsule: object = host().bridge
    return capsule


def capi_bridge_include() -> str:
    """The folder to compile a bridge's shim with (``-I``): it holds
    ``opmarket/capi_bridge.h`` and the ``opmarket/c_api.h`` it includes."""
    return get_include()


@dataclass(frozen=True, slots=True)
class NativeDoor:
    """How framework bridges run a kernel: ``native`` (its C-ABI entry, no Python per call)
    or through Python, and why."""

    native: bool
    reason: str


def native_door(spec: KernelSpec, *, bridge_version: int = 1) -> NativeDoor:
    """Which door a bridge whose construction interface has ``bridge_version``
    (``OPMB_BRIDGE_API_VERSION`` of its shim) takes to ``spec``'s kernel, and why."""
    impl = spec.impl
    if isinstance(impl, type) and issubclass(impl, LibraryKernel):
        if impl.capi_bridge_version > bridge_version:
            return NativeDoor(
                False,
                f"its C entry reads list attrs, which need bridge interface version "
                f"{impl.capi_bridge_version} (asked: version {bridge_version})",
            )
        failed = _resolve(impl)
        if failed:
            return NativeDoor(False, f"its C entry did not load: {failed}")
        return NativeDoor(True, "the C entry of its opmarket/kernel.h library")
    if isinstance(impl, type) and issubclass(impl, CAbiKernel) and impl.native_handle:
        return NativeDoor(True, "a C-ABI plugin's kernel")
    if spec.device != "CPU":
        return NativeDoor(False, f"a {spec.device} kernel (the C door passes host memory)")
    why = capi_reason(spec)
    if why:
        return NativeDoor(False, f"compiled without a C entry: {why}")
    if isinstance(impl, type):
        return NativeDoor(False, "a Python lifecycle kernel")
    return NativeDoor(False, "a Python function (numpy or pybind11)")


def _resolve(impl: type[LibraryKernel]) -> str:
    """Load the C entries of ``impl``'s library through the host once and set its
    ``native_handle``; "" when done, else why not."""
    if impl.native_handle:
        return ""
    with _lock:
        library = impl.capi_library
        if library in _failed:
            return _failed[library]
        from opmarket.registry._capi import load_declarations

        try:
            # The library is a Python module this process imported: no crash probe needed.
            decls = load_declarations(Path(library), probe=False)
        except OpmarketError as exc:
            _failed[library] = str(exc)
            return _failed[library]
        handles = {
            d.impl.kernel_name: d.impl.native_handle
            for d in decls
            if isinstance(d, KernelSpec)
            and isinstance(d.impl, type)
            and issubclass(d.impl, CAbiKernel)
            and not issubclass(d.impl, LibraryKernel)
        }
        handle = handles.get(impl.capi_kernel)
        if not handle:
            return f"{library} registered no C entry named {impl.capi_kernel!r}"
        impl.native_handle = handle
        return ""


def native_kernel_handle(spec: KernelSpec, *, bridge_version: int = 1) -> int | None:
    """The handle (an ``OPMB_Kernel*`` as an int) of a registered kernel that has a C-ABI
    entry (a C-ABI plugin's kernel, or an ``opmarket/kernel.h`` library's), for the bridge
    table's ``kernel_create``/``kernel_compute``; None for a kernel that runs through Python
    (numpy, a library built without C entries), or whose attrs a bridge interface of
    ``bridge_version`` cannot serve (:func:`native_door` says why)."""
    if not native_door(spec, bridge_version=bridge_version).native:
        return None
    handle: int = spec.impl.native_handle  # type: ignore[attr-defined]  # checked above
    return handle


def native_shape_fn_handle(spec: ShapeFnSpec | None) -> int | None:
    """The handle (an ``OPMB_ShapeFn*`` as an int) of an op's shape function that a C-ABI
    library registered (``registry.shape_fn(op)``), for the bridge table's ``shape_infer``;
    None for a Python shape function, or none."""
    fn = spec.fn if spec is not None else None
    return fn.native_handle if isinstance(fn, NativeShapeFn) else None
