"""The Python side of the framework bridges' interface (``opmarket/capi_bridge.h``): the
host's bridge table as a capsule, the include folder of its header, and the handle of a
registered C-ABI kernel, which a bridge's C/C++ shim passes to ``kernel_create`` and
``kernel_compute`` to run the kernel on its framework's tensors with no Python per call."""

from __future__ import annotations

from opmarket.registry._capi_kernel import CAbiKernel, NativeShapeFn, host
from opmarket.sdk import KernelSpec, ShapeFnSpec, get_include

__all__ = ["capi_bridge", "capi_bridge_include", "native_kernel_handle", "native_shape_fn_handle"]


def capi_bridge() -> object:
    """The host's ``OPMB_BridgeApi`` table, as a PyCapsule named ``opmarket.capi_bridge``
    (``OPMB_CAPSULE_NAME``): in C, ``PyCapsule_GetPointer(capsule, OPMB_CAPSULE_NAME)``."""
    capsule: object = host().bridge
    return capsule


def capi_bridge_include() -> str:
    """The folder to compile a bridge's shim with (``-I``): it holds
    ``opmarket/capi_bridge.h`` and the ``opmarket/c_api.h`` it includes."""
    return get_include()


def native_kernel_handle(spec: KernelSpec) -> int | None:
    """The handle (an ``OPMB_Kernel*`` as an int) of a registered kernel that a C-ABI plugin
    implements, for the bridge table's ``kernel_create``/``kernel_compute``; None for a
    kernel of another kind (numpy, pybind11), which runs through Python."""
    impl = spec.impl
    if isinstance(impl, type) and issubclass(impl, CAbiKernel) and impl.native_handle:
        return impl.native_handle
    return None


def native_shape_fn_handle(spec: ShapeFnSpec | None) -> int | None:
    """The handle (an ``OPMB_ShapeFn*`` as an int) of an op's shape function that a C-ABI
    library registered (``registry.shape_fn(op)``), for the bridge table's ``shape_infer``;
    None for a Python shape function, or none."""
    fn = spec.fn if spec is not None else None
    return fn.native_handle if isinstance(fn, NativeShapeFn) else None
