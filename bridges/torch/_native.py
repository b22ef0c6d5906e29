"""C-ABI kernels as native CPU kernels of torch operators: ``_shim.cc``, generated
trampolines and ``_shim_register.cc`` (shipped built in opmarket's wheel against opmarket's
declarations of torch's stable C ABI, ``_torch_c_api.h``; built on first use by
``opmarket._bridge.build_shim`` where the install carries none) registers a boxed
kernel through PyTorch's stable C ABI that runs the kernel through the host's bridge table
on torch's own buffers, with no Python per call. The operator's schema, fake tensors and
autograd stay as the bridge defines them from Python. An overload goes native when every
kernel that can serve it on the CPU is a C-ABI kernel and every argument is a tensor, an
``int``, a ``float``, a ``bool``, a ``ScalarType``, an ``int[]``, a ``float[]`` or a ``str``
(none of them optional); otherwise it keeps the Python kernel, and
``opmarket.torch.native_reason`` says why.

Where torch has a CUDA device, an overload whose GPU kernels (a GPU companion's) name device
entries (``opmarket/cuda_kernel.h``) also gets a native CUDA kernel: the shim calls the entry
on the CUDA tensors' memory with torch's current stream (:func:`register_cuda`)."""

from __future__ import annotations

import ctypes
import itertools
import threading
from pathlib import Path
from typing import Any

from opmarket._bridge import (
    TORCH_SLOTS,
    BridgeError,
    BridgeOp,
    KernelNotFoundError,
    LibraryError,
    ParamKind,
    bridge_include,
    bridge_table,
    build_shim,
    device_entry_address,
    native_handle,
    shipped_shim,
    torch_source,
)
from opmarket.sdk import DType
from opmarket.sdk.torch_schema import forward_schema

__all__ = ["BRIDGE_VERSION", "SLOTS", "cuda_unavailable", "register", "register_cuda", "shim"]

#: Native overloads one process can register (each takes a trampoline of the shim).
SLOTS = TORCH_SLOTS
_FOLDER = Path(__file__).parent
#: The OPM dtypes the shim maps to torch dtypes.
_TORCH_TYPES = (1, 2, 3, 4, 5, 6, 8, 9, 10, 14, 17, 18, 19, 22, 23)
#: Dtype combinations tried when tabling an overload's kernels.
_MAX_COMBINATIONS = 4096
# Where an attr comes from (enum Source in _shim.cc).
_FROM_INPUT, _INT, _FLOAT, _BOOL, _DTYPE, _INT_LIST, _FLOAT_LIST, _STRING = range(8)
_SOURCES = {
    "int": _INT,
    "float": _FLOAT,
    "bool": _BOOL,
    "list(int)": _INT_LIST,
    "list(float)": _FLOAT_LIST,
    "string": _STRING,
}
#: The bridge interface version the shim's construction interface implements (list attrs).
BRIDGE_VERSION = 2

_lock = threading.Lock()
_state: dict[str, Any] = {}


def shim() -> ctypes.CDLL | None:
    """The loaded shim, built first if this torch and source have none yet; None where the
    host has no bridge table or the shim cannot be built (the reason: ``_state["why"]``)."""
    if "lib" in _state:
        return _state["lib"]  # type: ignore[no-any-return]
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[no-any-return]
        lib = None
        if bridge_table() is None:
            _state["why"] = "this opmarket has no bridge table"
        else:
            try:
                lib = _build()
            except LibraryError as exc:
                _state["why"] = f"its shim could not be built: {exc}".splitlines()[0]
            except (BridgeError, OSError) as exc:
                _state["why"] = f"its shim cannot serve: {exc}".splitlines()[0]
        _state["lib"] = lib
        return lib


def _build() -> ctypes.CDLL:
    """The shim opmarket's install carries (setup.py builds it), else the same source built
    now, with one line on stderr saying why; torch's functions bound in either."""
    import torch  # noqa: F401  (the shim binds to the torch it loads)

    shipped, why = shipped_shim(_FOLDER, "_opm_torch_shim")
    if shipped is not None:
        try:
            return _open(shipped)
        except OSError as exc:  # e.g. a C++ runtime older than the build machine's
            why = f"the one it carries does not load: {exc}"
    target = build_shim(
        "opm_torch_shim",
        torch_source(_FOLDER),
        [bridge_include(), str(_FOLDER)],
        flags=["-std=c++17", "-fvisibility=hidden"],
        link=["-ldl"],
        language="c++",
        announce=f"building the PyTorch bridge's native shim ({why}; once, a few seconds)...",
    )
    return _open(target)


def _open(path: Path) -> ctypes.CDLL:
    """The shim at ``path`` with torch's functions bound; BridgeError naming the ones this
    torch lacks."""
    import torch

    lib = ctypes.CDLL(str(path))
    lib.opm_torch_bind.restype = ctypes.c_int32
    lib.opm_torch_bind.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
    missing = ctypes.create_string_buffer(4096)
    lacking = lib.opm_torch_bind(missing, len(missing))
    if lacking < 0:
        raise BridgeError("torch's libtorch_cpu.so is not loaded")
    if lacking > 0:
        raise BridgeError(
            f"torch {torch.__version__} lacks {lacking} function(s) of its stable C ABI that "
            f"the shim calls: {missing.value.decode()}"
        )
    lib.opm_torch_register.restype = ctypes.c_int
    return lib


def _dtype_sets(op: BridgeOp) -> tuple[list[str], list[tuple[int, ...]]]:
    """The type attrs an overload's kernel table ranges over (inferred ones, then the
    ScalarType arguments) and the OPM dtypes each may take."""
    names: list[str] = []
    for arg in op.op_def.inputs:
        if arg.type_attr and arg.type_attr not in names:
            names.append(arg.type_attr)
    names += [p.attr.name for p in op.params if p.kind is ParamKind.DTYPE]
    attrs = {a.name: a for a in op.op_def.attrs}
    sets = []
    for name in names:
        allowed = attrs[name].allowed_values
        values = [int(DType(v)) for v in allowed] if allowed is not None else list(_TORCH_TYPES)
        sets.append(tuple(v for v in values if v in _TORCH_TYPES))
    return names, sets


def _handle(spec: Any, device: str) -> tuple[int | None, str]:
    """The C handle of a kernel: a C-ABI kernel's on the CPU, a device entry's on the GPU;
    (None, why) when it has none."""
    if device == "CPU":
        handle = native_handle(spec, bridge_version=BRIDGE_VERSION)
        why = f"its CPU kernel {spec.name} is not a C-ABI kernel"
        return handle, "" if handle is not None else why
    address, why = device_entry_address(spec)
    return (address, "") if address else (None, why)


def _plan(op: BridgeOp, label: str, device: str = "CPU") -> tuple[str, dict[str, Any]]:
    """Why the overload cannot go native on ``device`` (CPU or GPU) (""), and else what the
    shim needs for it."""
    n_in = len(op.op_def.inputs)
    sources: list[tuple[str, int, int]] = []
    seen: set[str] = set()
    for i, arg in enumerate(op.op_def.inputs):
        if arg.type_attr and arg.type_attr not in seen:
            seen.add(arg.type_attr)
            sources.append((arg.type_attr, _FROM_INPUT, i))
    dtype_args: list[int] = []
    schema = forward_schema(op.op_def)
    for j, p in enumerate(op.params):
        if f"? {p.name}=None" in schema:  # None stands for opmarket's default
            return f"attr {p.attr.name} is optional in the schema", {}
        if p.kind is ParamKind.DTYPE:
            sources.append((p.attr.name, _DTYPE, j))
            dtype_args.append(n_in + j)
        elif p.attr.type in _SOURCES:
            sources.append((p.attr.name, _SOURCES[p.attr.type], j))
        else:
            return (
                f"attr {p.attr.name} is a {p.attr.type} (native: int, float, bool, type, "
                "string, list(int), list(float))",
                {},
            )
    names, sets = _dtype_sets(op)
    combos = list(itertools.islice(itertools.product(*sets), _MAX_COMBINATIONS + 1))
    if len(combos) > _MAX_COMBINATIONS:
        return "its type attrs have too many combinations", {}
    rows: list[tuple[list[int], int]] = []
    for combo in combos:
        values = dict(zip(names, combo, strict=True))
        try:
            spec = op.kernel({k: DType(v) for k, v in values.items()}, device, label)
        except KernelNotFoundError:
            continue
        if spec.device != device:  # dispatch fell back to another device's kernel
            continue
        handle, why = _handle(spec, device)
        if handle is None:
            return why, {}
        dtypes = [values[a.type_attr] if a.type_attr else int(a.type) for a in op.op_def.inputs]
        dtypes += [values[op.params[j - n_in].attr.name] for j in dtype_args]
        rows.append((dtypes, handle))
    if not rows:
        return f"it has no {device} kernel" + (
            " (a GPU companion registers one where a GPU is visible)" if device == "GPU" else ""
        ), {}
    return "", {"sources": sources, "dtype_args": dtype_args, "rows": rows}


def register(op: BridgeOp, name: str, label: str) -> str:
    """Register the overload ``name`` (``zero_out`` or ``zero_out.c_abi``) of ``op``'s
    operator natively on the CPU; "" when done, else why it stays on Python."""
    why, plan = _plan(op, label)
    if why:
        return why
    return _register(op, name, plan, "opm_torch_register")


def cuda_unavailable() -> str:
    """Why this torch cannot run CUDA kernels (no CUDA device, a CPU build, a shim that
    cannot bind torch's CUDA functions); "" when it can."""
    import torch

    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
        return f"no CUDA device in torch (torch {torch.__version__}, {build})"
    lib = shim()
    if lib is None:
        return str(_state.get("why", "no shim"))
    with _lock:
        if "cuda" not in _state:
            lib.opm_torch_bind_cuda.restype = ctypes.c_int32
            lib.opm_torch_bind_cuda.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
            missing = ctypes.create_string_buffer(4096)
            lacking = lib.opm_torch_bind_cuda(missing, len(missing))
            _state["cuda"] = (
                "torch has a CUDA device but its CUDA library (libtorch_cuda.so) is not loaded"
                if lacking < 0
                else f"torch {torch.__version__} lacks {missing.value.decode()}"
                if lacking
                else ""
            )
    return str(_state["cuda"])


def register_cuda(op: BridgeOp, name: str, label: str) -> str:
    """Register the overload ``name`` of ``op``'s operator natively for torch's CUDA
    dispatch key, its GPU kernels' device entries called on torch's CUDA buffers and
    current stream; "" when done, else why CUDA tensors go through Python."""
    why = cuda_unavailable()
    if why:
        return why
    why, plan = _plan(op, label, "GPU")
    if why:
        return why
    return _register(op, name, plan, "opm_torch_register_cuda")


def _register(op: BridgeOp, name: str, plan: dict[str, Any], function: str) -> str:
    """The shim's ``function`` (the CPU or the CUDA registration) on ``plan``."""
    lib = shim()
    bridge = bridge_table()
    if lib is None or bridge is None:
        return str(_state.get("why", "no shim"))
    with _lock:
        slot = _state.setdefault("next", 0)
        _state["next"] = slot + 1
    n_in = len(op.op_def.inputs)
    sources = plan["sources"]
    rows = plan["rows"]
    names = (ctypes.c_char_p * len(sources))(*[s[0].encode() for s in sources])
    kinds = (ctypes.c_int32 * len(sources))(*[s[1] for s in sources])
    indices = (ctypes.c_int32 * len(sources))(*[s[2] for s in sources])
    dtype_args = (ctypes.c_int32 * len(plan["dtype_args"]))(*plan["dtype_args"])
    flat = [d for dtypes, _ in rows for d in dtypes]
    kernel_dtypes = (ctypes.c_int32 * len(flat))(*flat)
    kernels = (ctypes.c_void_p * len(rows))(*[h for _, h in rows])
    error = ctypes.create_string_buffer(512)
    code = getattr(lib, function)(
        op.namespace.encode(),
        name.encode(),
        ctypes.c_int32(slot),
        ctypes.c_void_p(bridge),
        ctypes.c_int32(n_in),
        ctypes.c_int32(n_in + len(op.params)),
        ctypes.c_int32(len(op.op_def.outputs)),
        ctypes.c_int32(len(sources)),
        names,
        kinds,
        indices,
        ctypes.c_int32(len(plan["dtype_args"])),
        dtype_args,
        ctypes.c_int32(len(rows)),
        kernel_dtypes,
        kernels,
        error,
        ctypes.c_size_t(len(error)),
    )
    if code != 0:
        return error.value.decode(errors="replace")
    return ""
