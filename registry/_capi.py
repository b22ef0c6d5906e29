"""C-ABI plugins (``opmarket/c_api.h``): the host, the first-load probe, and what a library
declares.

The host is a small CPython extension (``_capi_host.c``) compiled on first use into
``cache_dir()/capi`` for this Python and numpy, then imported from there: a plugin's compute
is reached from the dispatch wrapper through one C method call, with no ctypes callback on
the per-call path (docs/c-api.md has the measurements). A library never seen before is first
loaded in a subprocess, so that a crash in its init is reported instead of ending this
process; a clean probe is remembered by path, size and time.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.machinery
import importlib.util
import json
import mmap
import os
import shlex
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar, Literal

import numpy as np

from opmarket.registry._discovery import cache_dir
from opmarket.registry._errors import KernelError, LibraryError
from opmarket.sdk import (
    DType,
    InferenceContext,
    InvalidArgument,
    Kernel,
    KernelSpec,
    NotFound,
    OpDef,
    OpmarketError,
    ShapeFnSpec,
    finalize_op,
    get_include,
)
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
HOST_API_VERSION = 2
#: How long a first-load probe may take.
PROBE_TIMEOUT_S = 120

_SOURCE = Path(__file__).with_name("_capi_host.c")
_host: ModuleType | None = None
# What each library file (by path, size and time) declared: loading it again declares the
# same objects, so registering them again registers nothing new.
_loaded: dict[tuple[Path, int, int], list[Any]] = {}
# One build of the host and one plugin init at a time (the host collects a library's
# registrations in one session). Reentrant: a load builds the host under it.
_lock = threading.RLock()

# Status codes (TensorFlow's) as the errors a Python caller sees.
_CODE_NAMES = {
    0: "OK", 1: "CANCELLED", 2: "UNKNOWN", 3: "INVALID_ARGUMENT", 4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND", 6: "ALREADY_EXISTS", 7: "PERMISSION_DENIED", 8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION", 10: "ABORTED", 11: "OUT_OF_RANGE", 12: "UNIMPLEMENTED",
    13: "INTERNAL", 14: "UNAVAILABLE", 15: "DATA_LOSS", 16: "UNAUTHENTICATED",
}
_FLAGS: dict[int, Literal["is_stateful", "is_commutative", "is_aggregate",
                          "allows_uninitialized_input"]] = {
    1: "is_stateful", 2: "is_commutative", 3: "is_aggregate", 4: "allows_uninitialized_input"}


def _error_for(code: int, message: str) -> OpmarketError:
    """The exception a failed status raises: InvalidArgument for the caller's mistakes
    (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION), NotFound, else KernelError."""
    if code in (3, 9, 11):
        return InvalidArgument(message)
    if code == 5:
        return NotFound(message)
    return KernelError(f"{message} ({_CODE_NAMES.get(code, f'code {code}')})")


def _compiler() -> list[str]:
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    return shlex.split(str(cc))


def host() -> ModuleType:
    """The host extension, built into the cache folder the first time any process of this
    Python and numpy needs it; LibraryError (with the compiler's output) if it cannot be."""
    if _host is not None:
        return _host
    with _lock:
        return _host or _make_host()


def _make_host() -> ModuleType:
    global _host
    header = Path(get_include(), "opmarket", "c_api.h")
    digest = hashlib.sha256()
    for part in (_SOURCE.read_bytes(), header.read_bytes(), sys.version.encode(),
                 np.__version__.encode(), " ".join(_compiler()).encode()):
        digest.update(part)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    target = cache_dir() / "capi" / f"opmarket_capi_host-{digest.hexdigest()[:16]}{suffix}"
    try:
        if not target.is_file():
            _build(target, header)
    except OSError:
        # An unwritable cache (a read-only home, a sandbox): build for this process only.
        target = Path(tempfile.mkdtemp(prefix="opmarket-capi-"), target.name)
        _build(target, header)
    loader = importlib.machinery.ExtensionFileLoader("opmarket_capi_host", str(target))
    spec = importlib.util.spec_from_file_location("opmarket_capi_host", target, loader=loader)
    assert spec is not None  # a file location with a loader always gives a spec
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    if target.parent.name.startswith("opmarket-capi-"):
        shutil.rmtree(target.parent, ignore_errors=True)  # loaded; nothing else needs it
    extra = {int(t): t.numpy for t in DType
             if t.numpy is not None and not t.is_ref and t.numpy.kind == "V"}
    module.configure(_error_for, extra)
    _host = module
    return module


def _build(target: Path, header: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".host-", suffix=".so")
    os.close(fd)
    command = [*_compiler(), "-shared", "-fPIC", "-O2", "-std=c11", "-w",
               f"-I{sysconfig.get_paths()['include']}", f"-I{np.get_include()}",
               f"-I{header.parent.parent}", str(_SOURCE), "-o", tmp]
    if sys.platform == "darwin":
        command[1:1] = ["-undefined", "dynamic_lookup"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        os.unlink(tmp)
        raise LibraryError(f"C-ABI plugins need a C compiler the first time: cannot run "
                           f"{command[0]!r} ({exc}); set CC") from None
    if done.returncode != 0:
        os.unlink(tmp)
        raise LibraryError(f"cannot build opmarket's C API host with {shlex.join(command)}:\n"
                           f"{done.stderr.strip()[-2000:]}")
    os.replace(tmp, target)  # another process building the same file at once is harmless


def exports_entry_point(path: Path) -> bool:
    """Whether the shared library names the C API's entry point (its dynamic symbol table
    holds the name; read without loading it)."""
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(ENTRY_POINT.encode()) >= 0
    except (OSError, ValueError):  # unreadable, or empty (mmap refuses)
        return False


class CAbiKernel(Kernel):
    """A lifecycle kernel whose create, compute and delete are a C-ABI plugin's: a subclass
    per registered kernel carries its function pointers. ``compute`` is the host's C method,
    so the dispatch wrapper calls into the plugin directly."""

    create_fn: ClassVar[int | None] = None
    compute_fn: ClassVar[int] = 0
    delete_fn: ClassVar[int | None] = None
    op_name: ClassVar[str] = ""
    kernel_name: ClassVar[str] = ""
    #: The op's outputs when the library declares the op; else read from the registry.
    num_outputs: ClassVar[int | None] = None

    def __init__(self, attrs: Mapping[str, Any], options: bytes = b"") -> None:
        super().__init__(attrs, options)
        outputs = self.num_outputs
        if outputs is None:
            from opmarket.registry._runtime import get_registry  # _runtime loads libraries

            op_def = get_registry().op_def(self.op_name)
            if op_def is not None:
                _check_single_tensors(op_def, self.kernel_name)
            outputs = len(op_def.outputs) if op_def is not None else 1
        self.native = host().Kernel(self.create_fn, self.compute_fn, self.delete_fn,
                                    dict(attrs), outputs,
                                    f"{self.op_name} (kernel {self.kernel_name})")
        # Instance attributes shadow the methods: the wrapper calls the C methods themselves.
        self.__dict__["compute"] = self.native.compute
        self.__dict__["prepare"] = self.native.prepare

    def close(self) -> None:
        self.native.close()


def _check_single_tensors(op: OpDef, kernel: str) -> None:
    """C-ABI kernels take and return one tensor per argument (no ``N * T`` lists yet)."""
    lists = [a.name for a in (*op.inputs, *op.outputs) if a.is_list]
    if lists:
        raise KernelError(f"{op.name}: C-ABI kernel {kernel} cannot serve list arguments "
                          f"({', '.join(lists)}); the C API passes one tensor per argument")


def _shape_fn(op: OpDef, fn: int) -> Callable[[InferenceContext], None]:
    names = [a.name for a in op.attrs]

    def infer(c: InferenceContext) -> None:
        attrs: dict[str, Any] = {}
        for name in names:
            with contextlib.suppress(InvalidArgument):  # an attr the node lacks
                attrs[name] = c.get_attr(name)
        shapes = [c.input(i) for i in range(c.num_inputs)]
        for i, shape in enumerate(host().infer(fn, shapes, attrs, c.num_outputs)):
            c.set_output(i, shape)

    infer.__qualname__ = f"{op.name} shape function"
    return infer


def _check(kind: str, decl: dict[str, Any]) -> str | None:
    """The host's registration check: parse an op's spec strings with opmarket's parser, or
    check a kernel's fields; a message refuses it (the plugin's status gets it)."""
    if kind == "op":
        flags: OpFlags = {}
        for number, value in decl["flags"].items():
            if number in _FLAGS:
                flags[_FLAGS[number]] = bool(value)
        op_def, problems = finalize_op(decl["name"], inputs=decl["inputs"],
                                       outputs=decl["outputs"], attrs=decl["attrs"],
                                       doc=decl["doc"], **flags)
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


def _kernel_spec(decl: dict[str, Any], library: Path, ops: Mapping[str, OpDef]) -> KernelSpec:
    op_def = ops.get(decl["op"])
    outputs = len(op_def.outputs) if op_def is not None else None
    impl = type(decl["name"], (CAbiKernel,), {
        "create_fn": decl["create"] or None,
        "compute_fn": decl["compute"],
        "delete_fn": decl["delete"] or None,
        "op_name": decl["op"],
        "kernel_name": decl["name"],
        "num_outputs": outputs,
        "__module__": library.name,
        "__qualname__": decl["name"],
    })
    constraints = tuple(sorted((attr, tuple(sorted({DType(n) for n in numbers})))
                               for attr, numbers in decl["constraints"].items()))
    return KernelSpec(op=decl["op"], impl=impl, device=str(decl["device"]).upper(),
                      constraints=constraints, host_memory=tuple(decl["host_memory"]),
                      priority=int(decl["priority"]), label=str(decl["label"]))


def _probe_key(path: Path) -> str:
    st = path.stat()
    text = f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{HOST_API_VERSION}\0{sys.version}"
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# Not ``-m opmarket.registry._capi``: runpy warns when the package already imported it.
_PROBE = ("import sys; from opmarket.registry._capi import _probe_main; "
          "sys.exit(_probe_main(sys.argv[1:]))")


def _probe(path: Path) -> None:
    """Load ``path`` in a subprocess unless a probe of this very file passed before;
    LibraryError when the child crashes or reports an error. ``OPMARKET_CAPI_PROBE=0``
    skips it (a crash in init then ends this process)."""
    if os.environ.get("OPMARKET_CAPI_PROBE", "1").strip() in ("0", "false", "no"):
        return
    mark = cache_dir() / "capi" / "probed" / _probe_key(path)
    if mark.is_file():
        return
    host()  # built here, so the child finds it
    env = {**os.environ, "OPMARKET_DISABLE_PLUGINS": "1"}
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE, str(path)],
                              capture_output=True, text=True, env=env, check=False,
                              cwd=tempfile.gettempdir(), timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise LibraryError(f"library {path} did not finish its init within "
                           f"{PROBE_TIMEOUT_S}s (probed in a subprocess)") from None
    if done.returncode < 0:
        try:
            name = signal.Signals(-done.returncode).name
        except ValueError:
            name = f"signal {-done.returncode}"
        raise LibraryError(f"library {path} crashed in its init ({name}; probed in a "
                           "subprocess, this process is unharmed)")
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if lines else {}
    except ValueError:
        report = {}
    if done.returncode != 0 or not report.get("ok"):
        message = report.get("error") or (done.stderr.strip()[-2000:] or
                                          f"exit status {done.returncode}")
        raise LibraryError(message)
    try:
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(str(path), encoding="utf-8")
    except OSError:
        pass  # an unwritable cache only means probing this library again next time


def load_declarations(path: Path, *, probe: bool = True) -> list[Any]:
    """Run the C-ABI library's init and return what it registered: OpDefs, their shape
    functions, KernelSpecs. LibraryError naming the path and the status message for every
    failure: no entry point, a newer API, an init that fails, crashes or registers nothing."""
    st = path.stat()
    key = (path, st.st_size, st.st_mtime_ns)
    if key in _loaded:
        return list(_loaded[key])
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
        raise LibraryError(f"library {path} did not state the C API version it was built "
                           "against (define its entry point with OPM_PLUGIN_INIT)")
    if need > have:
        raise LibraryError(f"library {path} needs opmarket C API version {need}; this "
                           f"opmarket provides version {have} (upgrade opmarket)")
    if result["code"] != 0:
        code = _CODE_NAMES.get(result["code"], f"code {result['code']}")
        raise LibraryError(f"library {path} failed in its init: {code}: {result['message']}")
    if not result["ops"] and not result["kernels"]:
        raise LibraryError(f"library {path} registered no ops or kernels in its init")
    ops: dict[str, OpDef] = {d["op_def"].name: d["op_def"] for d in result["ops"]}
    decls: list[Any] = list(ops.values())
    for d in result["ops"]:
        if d["shape_fn"]:
            decls.append(ShapeFnSpec(d["op_def"].name, _shape_fn(d["op_def"], d["shape_fn"])))
    for d in result["kernels"]:
        if d["op"] in ops:
            try:
                _check_single_tensors(ops[d["op"]], d["name"])
            except KernelError as exc:
                raise LibraryError(f"library {path}: {exc}") from None
    decls.extend(_kernel_spec(d, path, ops) for d in result["kernels"])
    _loaded[key] = decls
    return list(decls)


def _probe_main(argv: list[str]) -> int:
    """The probe's child process (``_PROBE PATH``): load the library here and say how it went
    on the last line of stdout, as JSON."""
    try:
        load_declarations(Path(argv[0]), probe=False)
    except OpmarketError as exc:
        print(json.dumps({"ok": False, "error": str(exc)}))
        return 1
    print(json.dumps({"ok": True}))
    return 0

