"""C-ABI plugins (``opmarket/c_api.h``): loading a library and what it declares.

A library never seen before is first probed in a subprocess (``_capi_probe``); then the host
extension (``_capi_kernel.host()``, compiled when opmarket was installed: no compiler is
needed here) dlopens it and runs its entry point, and each op and kernel it registers is
checked here with opmarket's own parser. What a library file declared is remembered by path,
size and time, so loading it again declares the same objects. The other jobs live beside
this module: the ELF reader (``_elf``), the probe, the kernel adapter (``_capi_kernel``)
and the framework bridges' side (``_capi_bridge``).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Literal

from opmarket.registry._capi_kernel import (
    CODE_NAMES,
    CAbiKernel,
    check_single_tensors,
    host,
    kernel_spec,
    shape_fn,
)
from opmarket.registry._capi_probe import probe as _probe
from opmarket.registry._elf import dynamic_symbols
from opmarket.registry._errors import KernelError, LibraryError
from opmarket.sdk import DType, OpDef, ShapeFnSpec, finalize_op
from opmarket.sdk._builder import OpFlags

__all__ = [
    "ENTRY_POINT",
    "HOST_API_VERSION",
    "CAbiKernel",
    "exports_entry_point",
    "host",
    "load_declarations",
]

#: The symbol a C-ABI plugin exports (OPM_PLUGIN_ENTRY_POINT).
ENTRY_POINT = "OPM_InitPlugin"
#: The C API version this opmarket implements (OPM_C_API_VERSION of its header).
HOST_API_VERSION = 3

# What each library file (by path, size and time) declared: loading it again declares the
# same objects, so registering them again registers nothing new.
_loaded: dict[tuple[Path, int, int], list[Any]] = {}
# One plugin init at a time: the host collects a library's registrations in one session.
_lock = threading.Lock()

_FLAGS: dict[
    int, Literal["is_stateful", "is_commutative", "is_aggregate", "allows_uninitialized_input"]
] = {1: "is_stateful", 2: "is_commutative", 3: "is_aggregate", 4: "allows_uninitialized_input"}


def exports_entry_point(path: Path) -> bool:
    """Whether the shared library exports the C API's entry point: a defined, visible symbol
    of its ELF dynamic symbol table (read without loading the library)."""
    return ENTRY_POINT in dynamic_symbols(path)


def _check(kind: str, decl: dict[str, Any]) -> str | None:
    """The host's registration check: parse an op's spec strings with opmarket's parser, or
    check a kernel's fields; a message refuses it (the plugin's status gets it)."""
    if kind == "op":
        flags: OpFlags = {}
        for number, value in decl["flags"].items():
            if number in _FLAGS:
                flags[_FLAGS[number]] = bool(value)
        op_def, problems = finalize_op(
            decl["name"],
            inputs=decl["inputs"],
            outputs=decl["outputs"],
            attrs=decl["attrs"],
            doc=decl["doc"],
            **flags,
        )
        if op_def is None:
            return f"op {decl['name']!r}: " + "; ".join(problems)
        decl["op_def"] = op_def
        return None
    problems = []
    if not decl["op"]:
        problems.append("no op name")
    if not decl["name"]:
        problems.append("no kernel name")
    if not decl["compute"]:
        problems.append("no compute function")
    for attr, numbers in decl["constraints"].items():
        for n in numbers:
            try:
                DType(n)
            except ValueError:
                problems.append(f"type constraint {attr}: unknown dtype number {n}")
    if problems:
        return f"kernel {decl['name']!r} of {decl['op']!r}: " + "; ".join(problems)
    return None


def load_declarations(path: Path, *, probe: bool = True) -> list[Any]:
    """Run the C-ABI library's init and return what it registered: OpDefs, their shape
    functions, KernelSpecs. LibraryError naming the path and the status message for every
    failure: no entry point, a newer API, an init that fails, crashes or registers nothing."""
    st = path.stat()
    key = (path, st.st_size, st.st_mtime_ns)
    if key in _loaded:
        return list(_loaded[key])
    host()  # a missing host is reported here, not as the probe's failure
    if probe:
        _probe(path)
    with _lock:
        if key in _loaded:
            return list(_loaded[key])
        return _load(path, key)


def _load(path: Path, key: tuple[Path, int, int]) -> list[Any]:
    result = host().load(str(path), _check)
    if result["error"]:
        raise LibraryError(f"cannot load library {path}: {result['message']}")
    need, have = result["plugin_api_version"], result["host_api_version"]
    if need == 0:
        raise LibraryError(
            f"library {path} did not state the C API version it was built "
            "against (define its entry point with OPM_PLUGIN_INIT)"
        )
    if need > have:
        raise LibraryError(
            f"library {path} needs opmarket C API version {need}; this "
            f"opmarket provides version {have} (upgrade opmarket)"
        )
    if result["code"] != 0:
        code = CODE_NAMES.get(result["code"], f"code {result['code']}")
        raise LibraryError(f"library {path} failed in its init: {code}: {result['message']}")
    if not result["ops"] and not result["kernels"]:
        raise LibraryError(f"library {path} registered no ops or kernels in its init")
    ops: dict[str, OpDef] = {d["op_def"].name: d["op_def"] for d in result["ops"]}
    decls: list[Any] = list(ops.values())
    for d in result["ops"]:
        if d["shape_fn"]:
            decls.append(
                ShapeFnSpec(
                    d["op_def"].name, shape_fn(d["op_def"], d["shape_fn"], d["shape_handle"])
                )
            )
    for d in result["kernels"]:
        if d["op"] in ops:
            try:
                check_single_tensors(ops[d["op"]], d["name"])
            except KernelError as exc:
                raise LibraryError(f"library {path}: {exc}") from None
    decls.extend(kernel_spec(d, path, ops) for d in result["kernels"])
    _loaded[key] = decls
    return list(decls)
