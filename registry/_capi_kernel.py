"""C-ABI kernels as opmarket kernels: the host extension, the kernel class each registered
C-ABI kernel becomes, its KernelSpec, and a library's shape functions as Python ones.

The host (``opmarket.registry._capi_host``, ``_capi_host.c``) is compiled when opmarket is
installed; importing it needs no compiler. A kernel instance's ``compute`` is the host's C
method, so the dispatch wrapper calls into the plugin with no Python code in between.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from abc import ABCMeta
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from opmarket.registry._errors import KernelError, LibraryError
from opmarket.sdk import (
    DType,
    InferenceContext,
    InvalidArgumentError,
    Kernel,
    KernelSpec,
    NotFoundError,
    OpDef,
    OpmarketError,
)
from opmarket.sdk._native import LibraryKernel

__all__ = ["CAbiKernel", "NativeShapeFn", "check_single_tensors", "host", "kernel_spec", "shape_fn"]

_host: ModuleType | None = None
_lock = threading.Lock()

# Status codes (TensorFlow's) as the errors a Python caller sees.
CODE_NAMES = {
    0: "OK",
    1: "CANCELLED",
    2: "UNKNOWN",
    3: "INVALID_ARGUMENT",
    4: "DEADLINE_EXCEEDED",
    5: "NOT_FOUND",
    6: "ALREADY_EXISTS",
    7: "PERMISSION_DENIED",
    8: "RESOURCE_EXHAUSTED",
    9: "FAILED_PRECONDITION",
    10: "ABORTED",
    11: "OUT_OF_RANGE",
    12: "UNIMPLEMENTED",
    13: "INTERNAL",
    14: "UNAVAILABLE",
    15: "DATA_LOSS",
    16: "UNAUTHENTICATED",
}


def _error_for(code: int, message: str) -> OpmarketError:
    """The exception a failed status raises: InvalidArgumentError for the caller's mistakes
    (INVALID_ARGUMENT, OUT_OF_RANGE, FAILED_PRECONDITION), NotFoundError, else KernelError."""
    if code in (3, 9, 11):
        return InvalidArgumentError(message)
    if code == 5:
        return NotFoundError(message)
    return KernelError(f"{message} ({CODE_NAMES.get(code, f'code {code}')})")


def host() -> ModuleType:
    """The host extension module, configured; LibraryError when this opmarket was installed
    without it (a source tree used without installing it)."""
    if _host is not None:
        return _host
    with _lock:
        return _host or _import_host()


def _import_host() -> ModuleType:
    global _host
    try:
        module = importlib.import_module("opmarket.registry._capi_host")
    except ImportError as exc:
        raise LibraryError(
            f"opmarket's C-ABI host extension (opmarket.registry._capi_host) is missing or "
            f"broken ({exc}): C-ABI plugins need an installed opmarket; reinstall it with "
            "pip"
        ) from None
    extra = {
        int(t): t.numpy
        for t in DType
        if t.numpy is not None and not t.is_ref and t.numpy.kind == "V"
    }
    module.configure(_error_for, extra)
    _host = module
    return module


class CAbiKernel(Kernel, metaclass=ABCMeta):
    """A lifecycle kernel whose create, compute and delete are a C-ABI plugin's: a subclass
    per registered kernel carries its ``native_handle``. ``compute`` is the host's C method,
    so the dispatch wrapper calls into the plugin directly.

    A kernel of a library built with ``opmarket/kernel.h`` that has a C-ABI entry
    (``opmarket.sdk._native.LibraryKernel``) counts as one too (a virtual subclass): bridges
    call its C entry, ``opmarket.ops`` its pybind11 function."""

    #: The host's handle of the registered kernel (an ``OPMB_Kernel*`` as an int, for
    #: framework bridges: opmarket/capi_bridge.h); 0 on this base class.
    native_handle: ClassVar[int] = 0
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
                check_single_tensors(op_def, self.kernel_name)
            outputs = len(op_def.outputs) if op_def is not None else 1
        self.native = host().Kernel(self.native_handle, dict(attrs), outputs)
        # Instance attributes shadow the methods: the wrapper calls the C methods themselves.
        self.__dict__["compute"] = self.native.compute
        self.__dict__["prepare"] = self.native.prepare

    def close(self) -> None:
        self.native.close()


CAbiKernel.register(LibraryKernel)


def check_single_tensors(op: OpDef, kernel: str) -> None:
    """KernelError unless every argument of ``op`` is one tensor: C-ABI kernels take and
    return one tensor per argument (no ``N * T`` lists yet)."""
    lists = [a.name for a in (*op.inputs, *op.outputs) if a.is_list]
    if lists:
        raise KernelError(
            f"{op.name}: C-ABI kernel {kernel} cannot serve list arguments "
            f"({', '.join(lists)}); the C API passes one tensor per argument"
        )


class NativeShapeFn:
    """A C-ABI library's shape function of an op, called as a Python shape function; its
    ``native_handle`` (an ``OPMB_ShapeFn*`` as an int) lets a framework bridge run it
    natively (opmarket/capi_bridge.h)."""

    def __init__(self, op: OpDef, fn: int, handle: int) -> None:
        self.native_handle = handle
        self._fn = fn
        self._attrs = [a.name for a in op.attrs]
        self.__qualname__ = self.__name__ = f"{op.name} shape function"

    def __call__(self, c: InferenceContext) -> None:
        """Run the library's function on ``c``'s input shapes and attrs, set the outputs."""
        attrs: dict[str, Any] = {}
        for name in self._attrs:
            with contextlib.suppress(InvalidArgumentError):  # an attr the node lacks
                attrs[name] = c.get_attr(name)
        shapes = [c.input(i) for i in range(c.num_inputs)]
        for i, shape in enumerate(host().infer(self._fn, shapes, attrs, c.num_outputs)):
            c.set_output(i, shape)


def shape_fn(op: OpDef, fn: int, handle: int) -> Callable[[InferenceContext], None]:
    """The library's shape function at address ``fn`` (bridge handle ``handle``) as a Python
    shape function of ``op``."""
    return NativeShapeFn(op, fn, handle)


def kernel_spec(decl: Mapping[str, Any], library: Path, ops: Mapping[str, OpDef]) -> KernelSpec:
    """The KernelSpec of a kernel the host recorded (``decl``), with a CAbiKernel subclass
    of its own as the implementation."""
    op_def = ops.get(decl["op"])
    outputs = len(op_def.outputs) if op_def is not None else None
    impl = type(
        decl["name"],
        (CAbiKernel,),
        {
            "native_handle": int(decl["handle"]),
            "op_name": decl["op"],
            "kernel_name": decl["name"],
            "num_outputs": outputs,
            "__module__": library.name,
            "__qualname__": decl["name"],
        },
    )
    constraints = tuple(
        sorted(
            (attr, tuple(sorted({DType(n) for n in numbers})))
            for attr, numbers in decl["constraints"].items()
        )
    )
    return KernelSpec(
        op=decl["op"],
        impl=impl,
        device=str(decl["device"]).upper(),
        constraints=constraints,
        host_memory=tuple(decl["host_memory"]),
        priority=int(decl["priority"]),
        label=str(decl["label"]),
    )
