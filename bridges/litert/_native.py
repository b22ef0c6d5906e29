"""C-ABI kernels as native LiteRT custom-op kernels: ``_shim.c`` (shipped built in opmarket's
wheel; built on first use by ``opmarket._bridge.build_shim`` where the install carries none;
against opmarket's bridge header only) holds the
``LiteRtCustomOpKernel`` every native registration uses, its user data a registration made
here: the op, its attrs in the bridge interface's form and the kernel for each tuple of input
dtypes its nodes take. Init creates the kernels' states, GetOutputLayouts runs the op's C
shape function (or the registration's Python one, at prepare only), Run calls the kernel on
LiteRT's locked buffers: no Python, no GIL per invoke.

A registration goes native when every kernel that serves its nodes is a C-ABI kernel whose
attrs the bridge interface reads (int, float, bool, type, string, list(int), list(float));
otherwise it keeps the Python callbacks, and :func:`plan` says why."""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from opmarket._bridge import (
    BridgeError,
    BridgeOp,
    KernelNotFoundError,
    LibraryError,
    bridge_include,
    bridge_op,
    bridge_table,
    build_shim,
    native_handle,
    native_shape_handle,
    normalize_dtype,
    num_outputs,
    shipped_shim,
)
from opmarket.litert import _capi
from opmarket.sdk import DType, KernelSpec, OpmarketError

__all__ = [
    "BRIDGE_VERSION",
    "ErrorRecord",
    "Plan",
    "free",
    "kernel_struct",
    "native_path",
    "native_reason",
    "plan",
    "register",
]

#: The shim's OPMB_BRIDGE_API_VERSION: its construction reads list(int) and list(float).
BRIDGE_VERSION = 2
_SOURCE = Path(__file__).with_name("_shim.c")
#: Attr kinds as the shim reads them (enum in _shim.c).
_KINDS = {
    "type": 0,
    "int": 1,
    "float": 2,
    "bool": 3,
    "string": 4,
    "list(int)": 5,
    "list(float)": 6,
}
_MAX_TENSORS = 64
_lock = threading.Lock()
_state: dict[str, Any] = {}


class ErrorRecord(ctypes.Structure):
    """The shim's OpmLiteError: the first failure of a native kernel since it was cleared
    (LiteRT 2.3 ignores the status its callbacks return)."""

    _fields_ = [("failed", ctypes.c_int32), ("message", ctypes.c_char * 1024)]


@dataclass(frozen=True)
class Plan:
    """How one registration runs: natively (``rows``: OPM input dtypes, kernel handle and
    bound attrs for each dtype tuple) or, when ``why`` is set, through Python."""

    why: str
    rows: tuple[tuple[tuple[int, ...], int, Mapping[str, Any]], ...] = ()
    n_in: int = 0
    n_out: int = 0


def shim() -> ctypes.CDLL | None:
    """The loaded shim, built first if this source has none yet; None where the host has no
    bridge table or the shim cannot be built (the reason: :func:`why_not`)."""
    if "lib" in _state:
        return _state["lib"]  # type: ignore[no-any-return]
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[no-any-return]
        lib = None
        table = bridge_table()
        if table is None:
            _state["why"] = "this opmarket has no bridge table"
        else:
            try:
                lib = _load(table)
            except (LibraryError, BridgeError, OSError) as exc:
                _state["why"] = f"its shim could not be built: {exc}".splitlines()[0]
        _state["lib"] = lib
        return lib


def why_not() -> str:
    """Why there is no shim ("" when there is one)."""
    return "" if shim() is not None else str(_state.get("why", "no shim"))


def _load(table: int) -> ctypes.CDLL:
    """The shim opmarket's install carries (setup.py builds it), else the same source built
    now, with one line on stderr saying why."""
    shipped, why = shipped_shim(_SOURCE.parent, "_opm_litert_shim")
    if shipped is not None:
        try:
            return _open(shipped, table)
        except OSError as exc:
            why = f"the one it carries does not load: {exc}"
    path = build_shim(
        "opm_litert_shim",
        _SOURCE,
        [bridge_include()],
        flags=["-std=c11", "-fvisibility=hidden"],
        link=[],
        announce=f"building the LiteRT bridge's native shim ({why}; once)...",
    )
    return _open(path, table)


def _open(path: Path, table: int) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    lib.opm_litert_init.restype = ctypes.c_int
    lib.opm_litert_init.argtypes = [ctypes.c_void_p] * 4
    lib.opm_litert_new.restype = ctypes.c_void_p
    lib.opm_litert_new.argtypes = [
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.POINTER(ErrorRecord),
    ]
    lib.opm_litert_add_row.restype = ctypes.c_int
    lib.opm_litert_add_row.argtypes = [
        ctypes.c_void_p,
        ctypes.POINTER(ctypes.c_int32),
        ctypes.c_void_p,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_int32),
        ctypes.POINTER(ctypes.c_int64),
        ctypes.POINTER(ctypes.c_void_p),
    ]
    lib.opm_litert_free.restype = None
    lib.opm_litert_free.argtypes = [ctypes.c_void_p]
    litert = _capi.lib()
    functions = [
        ctypes.cast(getattr(litert, name), ctypes.c_void_p).value
        for name in (
            "LiteRtGetTensorBufferTensorType",
            "LiteRtLockTensorBuffer",
            "LiteRtUnlockTensorBuffer",
        )
    ]
    if lib.opm_litert_init(table, *functions) != 0:
        raise BridgeError("the LiteRT shim refused this opmarket's bridge table")
    return lib


def plan(
    op: BridgeOp,
    attrs: Mapping[str, Any],
    dtype_rows: Sequence[tuple[np.dtype[Any], ...]],
    kernel: KernelSpec | None = None,
) -> Plan:
    """The plan of a registration of ``op`` with these attrs (from its nodes' options) whose
    nodes take inputs of ``dtype_rows``; ``kernel`` is the resolver's choice (None:
    dispatch's, on the CPU)."""
    if kernel is not None and kernel.device != "CPU":
        return Plan(f"its kernel {kernel.name} is a {kernel.device} kernel")
    if not dtype_rows:
        return Plan("no node of the model uses it")
    rows = []
    n_out = 0
    for dtypes in dtype_rows:
        try:
            bound = op.bind_attrs(dtypes, attrs)
            spec = kernel if kernel is not None else op.kernel(bound, "CPU")
            opm = tuple(int(normalize_dtype(d)) for d in dtypes)
        except (KernelNotFoundError, OpmarketError, ValueError) as exc:
            return Plan(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        handle = native_handle(spec, bridge_version=BRIDGE_VERSION)
        if handle is None:
            return Plan(f"its CPU kernel {spec.name} is not a C-ABI kernel")
        for a in op.op_def.attrs:
            if a.type not in _KINDS:
                return Plan(
                    f"attr {a.name} is a {a.type} (native: int, float, bool, type, string, "
                    "list(int), list(float))"
                )
        n_out = sum(num_outputs(op.op_def, bound))
        if len(dtypes) > _MAX_TENSORS or n_out > _MAX_TENSORS:
            return Plan(f"it has more than {_MAX_TENSORS} inputs or outputs")
        rows.append((opm, handle, bound))
    why = why_not()
    if why:
        return Plan(why)
    return Plan("", tuple(rows), len(dtype_rows[0]), n_out)


def _word_array(kind: int, value: Any) -> tuple[Any, int]:
    """An attr's value as the shim copies it, and its length."""
    if kind == _KINDS["type"]:
        return (ctypes.c_int64 * 1)(int(DType(value))), 1
    if kind in (_KINDS["int"], _KINDS["bool"]):
        return (ctypes.c_int64 * 1)(int(value)), 1
    if kind == _KINDS["float"]:
        return (ctypes.c_double * 1)(float(value)), 1
    if kind == _KINDS["string"]:
        data = str(value).encode("utf-8", "surrogateescape")
        return ctypes.create_string_buffer(data, len(data) + 1), len(data)
    if kind == _KINDS["list(int)"]:
        return (ctypes.c_int64 * max(len(value), 1))(*map(int, value)), len(value)
    return (ctypes.c_double * max(len(value), 1))(*map(float, value)), len(value)


def register(op: BridgeOp, native: Plan, layouts: Any, record: ErrorRecord) -> int:
    """A shim registration for ``native`` (a plan with rows): its address, the user data of
    the registration's custom-op kernel. ``layouts`` (a ``_capi.OUTPUT_LAYOUTS`` callback)
    gives output shapes for an op without a C shape function; the caller keeps it alive."""
    lib = shim()
    assert lib is not None and not native.why
    shape = native_shape_handle(op.op_def)
    callback = ctypes.cast(layouts, ctypes.c_void_p)
    reg = lib.opm_litert_new(
        op.name.encode(), native.n_in, native.n_out, shape, callback, ctypes.byref(record)
    )
    if not reg:
        raise BridgeError(f"{op.name}: the LiteRT shim could not make a registration")
    try:
        for dtypes, handle, bound in native.rows:
            attrs = op.op_def.attrs
            data = [_word_array(_KINDS[a.type], bound[a.name]) for a in attrs]
            status = lib.opm_litert_add_row(
                reg,
                (ctypes.c_int32 * max(len(dtypes), 1))(*dtypes),
                handle,
                len(attrs),
                (ctypes.c_char_p * max(len(attrs), 1))(*[a.name.encode() for a in attrs]),
                (ctypes.c_int32 * max(len(attrs), 1))(*[_KINDS[a.type] for a in attrs]),
                (ctypes.c_int64 * max(len(attrs), 1))(*[n for _, n in data]),
                (ctypes.c_void_p * max(len(attrs), 1))(
                    *[ctypes.cast(d, ctypes.c_void_p) for d, _ in data]
                ),
            )
            if status != 0:
                raise BridgeError(f"{op.name}: the LiteRT shim is out of memory")
    except BaseException:
        lib.opm_litert_free(reg)
        raise
    return int(reg)


def kernel_struct() -> Any:
    """The shim's ``LiteRtCustomOpKernel`` (every native registration's callbacks)."""
    lib = shim()
    assert lib is not None
    return _capi.CustomOpKernel.in_dll(lib, "opm_litert_kernel")


def free(reg: int) -> None:
    """Free a registration once LiteRT destroyed the compiled model that used it."""
    lib = shim()
    if lib is not None:
        lib.opm_litert_free(reg)


def native_reason(name: str, **attrs: Any) -> str:
    """Why the op's nodes with these attrs (by name; inferred type attrs too, ``T=np.int32``)
    run through Python in LiteRT; "" when they run natively."""
    op = bridge_op(name)
    by_py = {p.name: p.attr.name for p in op.params}
    given = {by_py.get(k, k): v for k, v in attrs.items()}
    defaults = {a.name: a.default for a in op.op_def.attrs if a.default is not None}
    dtypes: list[np.dtype[Any]] = []
    for arg in op.op_def.inputs:
        if arg.type_list_attr:
            dtypes += [np.dtype(normalize_dtype(t).numpy) for t in given[arg.type_list_attr]]
            continue
        if arg.type_attr:
            value = given.get(arg.type_attr, defaults.get(arg.type_attr))
            if value is None:
                return f"give the dtype of input {arg.name} ({arg.type_attr}=...)"
            dtype = np.dtype(normalize_dtype(value).numpy)
        else:
            dtype = np.dtype(arg.type.numpy)
        count = int(given.get(arg.number_attr, defaults.get(arg.number_attr, 1)))
        dtypes += [dtype] * (count if arg.number_attr else 1)
    return plan(op, given, [tuple(dtypes)]).why


def native_path(name: str, *, device: str = "CPU", _kernel: str = "", **attrs: Any) -> str:
    """Which path the op's nodes with these attrs take in LiteRT: ``"native"`` (the shim's
    C callbacks on LiteRT's buffers, no Python per invoke) or ``"python"`` (Python
    callbacks); :func:`native_reason` says why. A model's node names no kernel label, so
    LiteRT runs the kernel dispatch chooses: ``_kernel`` is accepted for the bridges' common
    signature and not used."""
    return "native" if device == "CPU" and not native_reason(name, **attrs) else "python"
