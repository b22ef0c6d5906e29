"""C-ABI kernels as XLA FFI custom calls: the handler in ``_ffi_shim.c`` (shipped built in
opmarket's wheel for one XLA FFI API version; for a jaxlib of another, built on first use
against ``jax.ffi.include_dir()``, cached by content and jax version) is registered as the
CPU target ``opmarket_capi``, and called with
``jax.ffi.ffi_call``. The op's attrs travel as FFI attributes; the kernel's handle and a
call-site number beside them (``opm_kernel``, ``opm_site``)."""

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
    LibraryError,
    OutputSpec,
    bridge_include,
    bridge_table,
    build_shim,
    freeze_attrs,
    native_handle,
    shipped_shim,
)
from opmarket.sdk import DType

__all__ = ["TARGET", "call", "native_kernel"]

#: The custom-call target every C-ABI kernel runs through.
TARGET = "opmarket_capi"
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


def native_kernel(op: BridgeOp, attrs: Mapping[str, Any], label: str, device: str) -> Any:
    """How to call the op's kernel for ``attrs`` natively, or None (a callback then): only
    C-ABI kernels on the CPU, with attrs the bridge interface can read."""
    if device != "CPU":
        return None
    handle = native_handle(op.kernel(attrs, device, label), bridge_version=BRIDGE_VERSION)
    if handle is None:
        return None
    attributes = []
    for a in op.op_def.attrs:
        if a.name in ("opm_kernel", "opm_site"):
            return None
        value = _attribute(a.type, attrs[a.name])
        if value is None:
            return None
        attributes.append((a.name, value))
    if library() is None:
        return None
    key = (handle, freeze_attrs(attrs))
    with _lock:
        site = _sites.setdefault(key, len(_sites))
    return Native(handle, site, tuple(attributes))


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
        TARGET, result, vmap_method="sequential", has_side_effect=all_empty(specs)
    )
    return list(
        fn(
            *xs,
            opm_kernel=np.int64(native.handle),
            opm_site=np.int64(native.site),
            **dict(native.attributes),
        )
    )
