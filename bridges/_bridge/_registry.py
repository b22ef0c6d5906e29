"""The one place the bridges touch opmarket's run time, internals included: the process
registry, an op's dispatcher (kernel choice, binding, calls) and whether a kernel is a
C-ABI one. When ``opmarket.registry`` reorganises, only this module follows."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from opmarket.registry import BUILTIN_OPS, Registry, get_registry, load_plugins
from opmarket.registry._wrapper import py_name  # internal: wrappers' parameter names
from opmarket.sdk import KernelSpec, OpDef, OpmarketError

__all__ = [
    "bind",
    "bridge_include",
    "bridge_table",
    "builtin",
    "cache_dir",
    "choose_kernel",
    "is_c_abi",
    "load_all",
    "native_handle",
    "op_def",
    "prepared_call",
    "py_name",
    "registry",
    "run_op",
    "version",
]


def registry() -> Registry:
    """The process registry (the current isolated one inside ``isolated_registry``)."""
    return get_registry()


def version() -> tuple[int, int]:
    """Changes whenever the process registry is swapped or changes (caches key on it)."""
    reg = registry()
    return id(reg), reg.version


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
    attrs: inferred, defaulted and checked, InvalidArgumentError naming the op otherwise."""
    return registry().dispatcher(op.name).bind(inputs, attrs)[1]


def choose_kernel(
    op: OpDef, attrs: Mapping[str, Any], device: str | None, label: str = ""
) -> KernelSpec:
    """The kernel dispatch runs for bound ``attrs`` on ``device``; KernelNotFoundError lists
    the registered ones."""
    return registry().dispatcher(op.name).choose(attrs, device, label)


def run_op(
    op: OpDef,
    inputs: Sequence[Any],
    attrs: Mapping[str, Any],
    *,
    device: str | None,
    label: str = "",
    kernel: KernelSpec | None = None,
) -> Any:
    """Run ``op`` through opmarket's dispatch (shape and dtype checks included)."""
    return (
        registry()
        .dispatcher(op.name)
        .call(inputs, attrs, device=device, label=label, kernel=kernel)
    )


def is_c_abi(spec: KernelSpec) -> bool:
    """Whether ``spec`` is a C-ABI plugin's kernel (``opmarket/c_api.h``)."""
    from opmarket.registry._capi import CAbiKernel  # internal: the host's kernel class

    impl = spec.impl
    return isinstance(impl, type) and issubclass(impl, CAbiKernel)


_MISS = object()


def prepared_call(
    op: OpDef, attrs: Mapping[str, Any], device: str, label: str = ""
) -> Callable[[Sequence[Any]], Any]:
    """A call of ``op`` with bound ``attrs`` on ``device`` prepared once: kernel chosen,
    lifecycle kernel created (shared with opmarket.ops' cache). The returned function runs
    it on numpy arrays as the generated wrapper's fast path does: the shape function (and
    ``prepare``) only on new input shapes, outputs checked. Uses the dispatcher's entries,
    which are internal to opmarket.registry."""
    d = registry().dispatcher(op.name)
    entry, _, cached = d._shared_entry(dict(attrs), device, label, None)
    if not cached:  # attrs nothing makes hashable: a call of its own each time
        return lambda arrays: run_op(op, arrays, attrs, device=device, label=label)
    single = d.single_input
    fn, kw, lock = entry.fn, entry.kw, entry.lock
    run, finish, odt = entry.run, entry.finish, entry.odt
    nd = np.ndarray

    def call(arrays: Sequence[Any]) -> Any:
        shapes = arrays[0].shape if single else tuple(a.shape for a in arrays)
        if lock is not None:
            with lock:
                out = fn(*arrays) if shapes == entry.shapes else _MISS
            if out is _MISS:
                return run(arrays, shapes)
        elif shapes != entry.shapes:
            return run(arrays, shapes)
        else:
            out = fn(*arrays, **kw)
        # As the generated wrapper: one array of the declared dtype needs no other check.
        if odt is not None and out.__class__ is nd and out.dtype is odt:
            return out
        return finish(out)

    return call


def native_handle(spec: KernelSpec) -> int | None:
    """The OPMB_Kernel handle (opmarket/capi_bridge.h) of a C-ABI kernel, or None: not a
    C-ABI kernel, or a host without the bridge interface."""
    import opmarket.registry as reg

    get = getattr(reg, "native_kernel_handle", None)
    if get is None or not is_c_abi(spec):
        return None
    handle = get(spec)
    return int(handle) if handle is not None else None


def bridge_table() -> int | None:
    """The address of the host's OPMB_BridgeApi, or None for a host without one."""
    import ctypes

    import opmarket.registry as reg

    get = getattr(reg, "capi_bridge", None)
    if get is None:
        return None
    capsule = get()
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype = ctypes.c_void_p
    pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    address = pointer(capsule, b"opmarket.capi_bridge")
    return int(address) if address else None


def bridge_include() -> str:
    """The folder holding opmarket/capi_bridge.h and opmarket/c_api.h."""
    import opmarket.registry as reg

    get = getattr(reg, "capi_bridge_include", None)
    if get is not None:
        return str(get())
    from opmarket.sdk import get_include

    return str(get_include())


def cache_dir() -> Path:
    """opmarket's cache folder (``$OPMARKET_CACHE_DIR``, else the user's cache)."""
    from opmarket.sdk._files import cache_dir as opm_cache_dir  # internal

    return opm_cache_dir()
