"""Native (C++) kernels: where the SDK header is, and what a compiled library declares.

A library built with ``opmarket/kernel.h`` (``OPM_LIBRARY``) carries its op specs and kernel
registrations as ``__opmarket_library__``; :func:`library_declarations` turns them into the
OpDefs and KernelSpecs that a plugin's ``register`` hook hands on, or that
``opmarket.load_library`` registers. See docs/native.md.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from opmarket.sdk._builder import finalize_op
from opmarket.sdk._dtypes import DType, as_dtype
from opmarket.sdk._errors import InvalidOpDefError, Problem
from opmarket.sdk._kernel import KernelSpec
from opmarket.sdk._opdef import OpDef

__all__ = ["LIBRARY_FORMAT", "get_include", "library_declarations"]

#: The format of ``__opmarket_library__`` this version reads (OPMARKET_LIBRARY_FORMAT).
LIBRARY_FORMAT = 1


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
    if not (isinstance(raw, tuple) and len(raw) == 2 and raw[0] == LIBRARY_FORMAT):
        found = raw[0] if isinstance(raw, tuple) and raw else raw
        raise InvalidOpDefError(
            [
                Problem(
                    f"library format {found!r}; this opmarket reads format {LIBRARY_FORMAT} "
                    "(rebuild the library against this opmarket's opmarket/kernel.h)",
                    source=source,
                )
            ]
        )
    problems: list[Problem] = []
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
        kernels.append(
            KernelSpec(
                op=d["op"],
                impl=d["fn"],
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
