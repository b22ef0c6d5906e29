"""Native (C++) kernels: where the SDK header is, and what a compiled library declares.

A library built with ``opmarket/kernel.h`` (``OPM_LIBRARY``) carries its op specs and kernel
registrations as ``__opmarket_library__``; :func:`library_declarations` turns them into the
OpDefs and KernelSpecs that a plugin's ``register`` hook hands on, or that
``opmarket.load_library`` registers. A kernel that has a C-ABI entry too (library format 2)
becomes a :class:`LibraryKernel`: Python calls its pybind11 function, framework bridges its
C-ABI entry. See docs/native.md.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from opmarket.sdk._builder import finalize_op
from opmarket.sdk._dtypes import DType, as_dtype
from opmarket.sdk._errors import InvalidOpDefError, Problem
from opmarket.sdk._kernel import KernelSpec
from opmarket.sdk._opdef import OpDef

__all__ = ["LIBRARY_FORMAT", "LibraryKernel", "get_include", "library_declarations"]

#: The format of ``__opmarket_library__`` this version writes (OPMARKET_LIBRARY_FORMAT); it
#: reads format 1 too (libraries built before kernels had C-ABI entries).
LIBRARY_FORMAT = 2
_READS = (1, 2)


class LibraryKernel:
    """A kernel of a library built with ``opmarket/kernel.h`` that has two doors. It is a
    function kernel: calling the class calls its pybind11 function ``fn`` (each subclass
    has a metaclass whose ``__call__`` is that function), so ``opmarket.ops`` runs it as it
    runs any compiled function. Framework bridges call the same kernel through the
    library's C-ABI entry (``capi_library``, kernel ``capi_kernel``), which the registry
    resolves to ``native_handle`` on first use."""

    fn: ClassVar[Callable[..., Any]]
    #: The library file, whose ``OPM_InitPlugin`` registers the C entries.
    capi_library: ClassVar[str] = ""
    capi_kernel: ClassVar[str] = ""
    #: The bridge interface version (opmarket/capi_bridge.h) its attrs need: 2 for lists.
    capi_bridge_version: ClassVar[int] = 1
    #: The ``OPMB_Kernel*`` of the C entry, once resolved (0 until then).
    native_handle: ClassVar[int] = 0


def get_include() -> str:
    """The directory to add to the compiler's include path for ``#include
    <opmarket/kernel.h>`` (as ``pybind11.get_include()``)."""
    return str(Path(__file__).resolve().parent / "include")


def library_declarations(module: ModuleType) -> list[OpDef | KernelSpec]:
    """The ops and kernels a compiled library declares, ops first.

    InvalidOpDefError lists every problem (an op spec that does not parse, a kernel with an
    unknown dtype), naming the library's file; an empty list if it declares nothing.
    """
    source = str(getattr(module, "__file__", None) or module.__name__)
    raw = getattr(module, "__opmarket_library__", None)
    if raw is None:
        return []
    if not (isinstance(raw, tuple) and len(raw) == 2 and raw[0] in _READS):
        found = raw[0] if isinstance(raw, tuple) and raw else raw
        raise InvalidOpDefError(
            [
                Problem(
                    f"library format {found!r}; this opmarket reads formats 1 and "
                    f"{LIBRARY_FORMAT} "
                    "(rebuild the library against this opmarket's opmarket/kernel.h)",
                    source=source,
                )
            ]
        )
    problems: list[Problem] = []
    fmt = raw[0]
    ops: dict[str, OpDef] = {}
    kernels: list[KernelSpec] = []
    items: list[dict[str, Any]] = list(raw[1])
    for d in items:
        if d["kind"] != "op":
            continue
        op_def, found = finalize_op(
            d["name"],
            inputs=d["inputs"],
            outputs=d["outputs"],
            attrs=d["attrs"],
            doc=d["doc"],
            is_stateful=d["stateful"],
        )
        problems.extend(Problem(m, op=d["name"], source=source) for m in found)
        if op_def is not None:
            ops[op_def.name] = op_def
    for d in items:
        if d["kind"] != "kernel":
            continue
        constraints: list[tuple[str, tuple[DType, ...]]] = []
        for attr, names in d["constraints"]:
            try:
                constraints.append((attr, tuple(sorted({as_dtype(n) for n in names}))))
            except ValueError as exc:
                problems.append(
                    Problem(str(exc), op=d["op"], field=f"kernel {d['name']}", source=source)
                )
        if "attrs" in d:
            attr_names: tuple[str, ...] = tuple(d["attrs"])
        else:
            op_def = ops.get(d["op"])
            attr_names = tuple(a for a in d["args"] if op_def is not None and op_def.attr(a))
        if not d.get("capi"):
            _no_capi[d["fn"]] = _FORMAT_1 if fmt == 1 else str(d.get("capi_reason") or "")
        kernels.append(
            KernelSpec(
                op=d["op"],
                impl=_two_doors(d, source) if d.get("capi") else d["fn"],
                device=str(d["device"]).upper(),
                constraints=tuple(sorted(constraints)),
                host_memory=tuple(d["host_memory"]),
                priority=int(d["priority"]),
                label=d["label"],
                attr_names=attr_names,
            )
        )
    if problems:
        raise InvalidOpDefError(problems)
    return [*ops.values(), *kernels]


def _two_doors(d: dict[str, Any], source: str) -> type[LibraryKernel]:
    """The :class:`LibraryKernel` of kernel declaration ``d``, which has a C-ABI entry: one
    class per function, so that declaring the library again declares equal kernels."""
    fn = d["fn"]
    found = _classes.get(fn)
    if found is not None:
        return found
    # Calling the class is calling fn: the slot looks __call__ up on the metaclass, and a
    # staticmethod there is fn itself, with no Python frame in between. Its signature is
    # fn's too (inspect.signature finds none for a pybind11 function, only its doc).
    meta = type(
        f"{d['name']}_type",
        (type,),
        {
            "__call__": staticmethod(fn),
            "__signature__": property(lambda _cls: inspect.signature(fn)),
        },
    )
    cls: type[LibraryKernel] = meta(
        d["name"],
        (LibraryKernel,),
        {
            "fn": fn,
            "capi_library": source,
            "capi_kernel": d["name"],
            "capi_bridge_version": int(d.get("capi_bridge_version") or 1),
            "__module__": getattr(fn, "__module__", None) or source,
            "__qualname__": d["name"],
            "__doc__": getattr(fn, "__doc__", None),
        },
    )
    _classes[fn] = cls
    return cls


def capi_reason(spec: KernelSpec) -> str:
    """Why a compiled library's kernel has no C-ABI entry, as its declaration said ("" when
    it has one, or is not a compiled library's kernel)."""
    try:
        return _no_capi.get(spec.impl, "")
    except TypeError:  # an unhashable implementation: not a library's function
        return ""


# The LibraryKernel of each pybind11 function that has a C-ABI entry.
_classes: dict[Any, type[LibraryKernel]] = {}
# The pybind11 functions of kernels without a C-ABI entry, and why not.
_no_capi: dict[Any, str] = {}
_FORMAT_1 = (
    "built with opmarket/kernel.h library format 1, before kernels had C-ABI entries: "
    "rebuild it against this opmarket"
)
