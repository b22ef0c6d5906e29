"""C-ABI kernels as XLA FFI custom calls: the handler in ``_ffi_shim.c`` (shipped built in
opmarket's wheel for one XLA FFI API version; for a jaxlib of another, built on first use
against ``jax.ffi.include_dir()``, cached by content and jax version) is registered as the
CPU target ``opmarket_capi``, and called with
``jax.ffi.ffi_call``. The op's attrs travel as FFI attributes; the kernel's handle and a
call-site number beside them (``opm_kernel``, ``opm_site``).

Where JAX has a CUDA platform, the same library's second handler is the CUDA target
``opmarket_cuda``: a GPU companion's kernel with a device entry (``opmarket/cuda_kernel.h``)
runs as a custom call on XLA's device buffers and stream, its entry in ``opm_kernel``."""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import jax
from opmarket._bridge import (
    BridgeOp,
    KernelNotFoundError,
    LibraryError,
    OutputSpec,
    bridge_include,
    bridge_table,
    build_shim,
    device_entry_address,
    freeze_attrs,
    native_handle,
    shipped_shim,
)
from opmarket.sdk import DType

__all__ = ["CUDA_TARGET", "TARGET", "call", "cuda_unavailable", "native_kernel", "native_reason"]

#: The custom-call target every C-ABI kernel runs through.
TARGET = "opmarket_capi"
#: The CUDA custom-call target every GPU companion's device entry runs through.
CUDA_TARGET = "opmarket_cuda"
#: The shim's OPMB_BRIDGE_API_VERSION: its construction reads list(int) and list(float).
BRIDGE_VERSION = 2
_SOURCE = Path(__file__).with_name("_ffi_shim.c")
_lock = threading.Lock()
_state: dict[str, Any] = {}
_sites: dict[tuple[int, Any], int] = {}


@dataclass(frozen=True, slots=True)
class Native:
    """A C-ABI kernel ready to call: its handle, its call site and its FFI attributes."""

    handle: int
    site: int
    attributes: tuple[tuple[str, Any], ...]
    target: str = TARGET


def library() -> ctypes.CDLL | None:
    """The FFI handler's library, loaded and registered with JAX once per process; None
    where the host has no bridge interface or there is no handler for this jaxlib (no
    compiler to build one: then C-ABI kernels run through host callbacks, the reason in
    ``_state["why"]``)."""
    if "lib" in _state:
        return _state["lib"]  # type: ignore[no-any-return]
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[no-any-return]
        table = bridge_table()
        lib = _handler() if table is not None else None
        if lib is not None:
            lib.opm_jax_init.argtypes = [ctypes.c_void_p]
            lib.opm_jax_init.restype = ctypes.c_int
            if lib.opm_jax_init(table) != 0:
                lib = None
            else:
                capsule = jax.ffi.pycapsule(  # type: ignore[no-untyped-call]
                    lib.opm_jax_capi_call
                )
                jax.ffi.register_ffi_target(TARGET, capsule, platform="cpu")
        _state["lib"] = lib
        return lib


def cuda_unavailable() -> str:
    """Why JAX cannot run opmarket's CUDA kernels here (no CUDA platform, no FFI handler);
    "" when the CUDA target ``opmarket_cuda`` is registered."""
    if "cuda" in _state:
        return str(_state["cuda"])
    try:
        jax.devices("cuda")
    except RuntimeError as exc:
        why = f"JAX has no CUDA platform here ({str(exc).splitlines()[0]})"
    else:
        lib = library()
        why = str(_state.get("why", "no FFI handler")) if lib is None else ""
        if lib is not None:
            capsule = jax.ffi.pycapsule(lib.opm_jax_cuda_call)  # type: ignore[no-untyped-call]
            jax.ffi.register_ffi_target(CUDA_TARGET, capsule, platform="CUDA")
    with _lock:
        _state["cuda"] = why
    return why


def _api_version(number: int) -> str:
    return f"{number // 1000}.{number % 1000}"


def _installed_api_version() -> int | None:
    """The XLA FFI API version this jaxlib's own c_api.h declares (major * 1000 + minor), or
    None where it cannot be read."""
    header = Path(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h")
    try:
        text = header.read_text()
    except OSError:
        return None
    major = re.search(r"#define XLA_FFI_API_MAJOR (\d+)", text)
    minor = re.search(r"#define XLA_FFI_API_MINOR (\d+)", text)
    return int(major[1]) * 1000 + int(minor[1]) if major and minor else None


def _serves(served: int, installed: int) -> bool:
    """Whether a handler built for XLA FFI API ``served`` runs under ``installed``: XLA's
    c_api.h raises the major version only for ABI-incompatible changes, and a minor one only
    adds fields that a newer XLA reads past an older handler by ``struct_size``."""
    return served // 1000 == installed // 1000 and installed % 1000 >= served % 1000


def _handler() -> ctypes.CDLL | None:
    """The handler opmarket's install carries, where it serves this jaxlib's XLA FFI API
    version (the same major, a minor as new or newer); else one built now against jaxlib's
    header (one line on stderr says why)."""
    shipped, why = shipped_shim(_SOURCE.parent, "_opm_jax_ffi")
    if shipped is not None:
        try:
            lib = ctypes.CDLL(str(shipped))
            served, installed = lib.opm_jax_ffi_version(), _installed_api_version()
            if installed is None or _serves(served, installed):
                return lib
            why = (
                f"this jaxlib's XLA FFI API is {_api_version(installed)}, the shipped "
                f"handler's {_api_version(served)}"
            )
        except OSError as exc:
            why = f"the one it carries does not load: {exc}"
    try:
        path = build_shim(
            "opmarket_jax_ffi",
            _SOURCE,
            [bridge_include(), jax.ffi.include_dir()],
            key=[jax.__version__],
            flags=["-std=c11", "-DOPM_XLA_FFI_HEADERS"],
            announce=f"building the JAX bridge's FFI handler ({why}; once per jax version)...",
        )
    except LibraryError as exc:  # no compiler: C-ABI kernels go through callbacks
        _state["why"] = f"its FFI handler could not be built: {exc}".splitlines()[0]
        return None
    return ctypes.CDLL(str(path))


def _attribute(attr_type: str, value: Any) -> Any:
    """An attr as an FFI attribute the shim's construction reads (a list as a dense
    array), or None if the bridge interface has no getter for its type (other lists,
    shapes, tensors)."""
    if attr_type == "int":
        return np.int64(value)
    if attr_type == "type":
        return np.int32(int(DType(value)))
    if attr_type == "float":
        return np.float32(value)
    if attr_type == "bool":
        return bool(value)
    if attr_type == "string":
        return str(value)
    if attr_type == "list(int)":
        return np.asarray(value, np.int64)
    if attr_type == "list(float)":
        return np.asarray(value, np.float32)
    return None


def native_reason(op: BridgeOp, attrs: Mapping[str, Any], label: str, device: str) -> str:
    """Why the op's kernel for ``attrs`` on ``device`` runs through a host callback; "" when
    it is an FFI custom call."""
    if device not in ("CPU", "GPU"):
        return f"no native kernels on device {device!r} (native: CPU, GPU)"
    if device == "GPU":
        why = cuda_unavailable()
        if why:
            return why
    if native_kernel(op, attrs, label, device) is not None:
        return ""
    if device == "GPU":
        spec = _gpu_kernel(op, attrs, label)
        if spec is None:
            return "it has no GPU kernel (a GPU companion registers one where a GPU is visible)"
        return device_entry_address(spec)[1] or "an attr the FFI handler cannot carry"
    why = str(_state.get("why", "")) if library() is None else ""
    return why or "not a C-ABI kernel, or an attr the FFI handler cannot carry"


def native_kernel(op: BridgeOp, attrs: Mapping[str, Any], label: str, device: str) -> Any:
    """How to call the op's kernel for ``attrs`` natively, or None (a callback then): C-ABI
    kernels on the CPU, and on the GPU kernels with a device entry where JAX has CUDA, with
    attrs the bridge interface can read."""
    if device == "GPU":
        return _cuda_kernel(op, attrs, label)
    if device != "CPU":
        return None
    handle = native_handle(op.kernel(attrs, device, label), bridge_version=BRIDGE_VERSION)
    if handle is None:
        return None
    attributes = _attributes(op, attrs)
    if attributes is None or library() is None:
        return None
    key = (handle, freeze_attrs(attrs))
    with _lock:
        site = _sites.setdefault(key, len(_sites))
    return Native(handle, site, attributes)


def _cuda_kernel(op: BridgeOp, attrs: Mapping[str, Any], label: str) -> Any:
    """The GPU kernel's device entry as a call to ``opmarket_cuda``, or None."""
    if cuda_unavailable():
        return None
    spec = _gpu_kernel(op, attrs, label)
    address = device_entry_address(spec)[0] if spec is not None else 0
    attributes = _attributes(op, attrs)
    if not address or attributes is None:
        return None
    return Native(address, -1, attributes, CUDA_TARGET)


def _gpu_kernel(op: BridgeOp, attrs: Mapping[str, Any], label: str) -> Any:
    """The GPU kernel dispatch chooses for ``attrs``, or None when none serves them."""
    try:
        spec = op.kernel(attrs, "GPU", label)
    except KernelNotFoundError:
        return None
    return spec if spec.device == "GPU" else None


def _attributes(op: BridgeOp, attrs: Mapping[str, Any]) -> tuple[tuple[str, Any], ...] | None:
    """The op's attrs as FFI attributes, or None when one has no FFI form."""
    attributes = []
    for a in op.op_def.attrs:
        if a.name in ("opm_kernel", "opm_site"):
            return None
        value = _attribute(a.type, attrs[a.name])
        if value is None:
            return None
        attributes.append((a.name, value))
    return tuple(attributes)


def call(
    native: Native,
    op: BridgeOp,
    attrs: Mapping[str, Any],
    xs: Sequence[Any],
    specs: Sequence[OutputSpec],
) -> list[Any]:
    """The custom call to ``opmarket_capi``; one array per output."""
    from opmarket.jax._ops import all_empty, shape_dtype

    result = [shape_dtype(s.shape, s.dtype) for s in specs]
    # XLA replaces a call whose outputs are all empty by empty constants unless the call has
    # a side effect: the kernel would then not check its inputs (a ZeroOut index out of range).
    fn = jax.ffi.ffi_call(
        native.target, result, vmap_method="sequential", has_side_effect=all_empty(specs)
    )
    return list(
        fn(
            *xs,
            opm_kernel=np.int64(native.handle),
            opm_site=np.int64(native.site),
            **dict(native.attributes),
        )
    )
