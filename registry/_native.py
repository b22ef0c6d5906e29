"""``load_library``: load a compiled op library and register what it declares, as
TensorFlow's ``tf.load_op_library`` does: a pybind11 module built with
``opmarket/kernel.h``, or a C-ABI plugin built with ``opmarket/c_api.h`` (docs/c-api.md)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from opmarket.registry._capi import load_declarations
from opmarket.registry._elf import dynamic_symbols
from opmarket.registry._errors import LibraryError
from opmarket.registry._runtime import get_registry
from opmarket.sdk import InvalidOpDefError, OpDef
from opmarket.sdk._native import library_declarations

__all__ = ["OpLibrary", "load_library"]


class OpLibrary:
    """What :func:`load_library` returns: the library's ops as attributes (their generated
    wrappers, ``lib.zero_out(x)``), ``module`` (the compiled module; None for a C-ABI
    plugin) and ``path``."""

    def __init__(self, path: Path, module: ModuleType | None, ops: tuple[OpDef, ...]) -> None:
        self.path = path
        self.module = module
        self.ops = ops
        self._by_python_name = {o.python_name: o.name for o in ops}

    def __getattr__(self, name: str) -> Any:
        op = self.__dict__.get("_by_python_name", {}).get(name)
        if op is None:
            raise AttributeError(f"library {self.path} has no op {name!r}")
        # The current registry's wrapper: it follows isolated_registry() swaps.
        return get_registry().dispatcher(op).wrapper

    def __dir__(self) -> list[str]:
        return sorted([*self.__dict__, *self._by_python_name])

    def __repr__(self) -> str:
        return f"<OpLibrary {str(self.path)!r} ops={[o.name for o in self.ops]}>"


def load_library(path: str | os.PathLike[str]) -> OpLibrary:
    """Load the compiled library at ``path`` and register its ops and kernels in the
    process's registry: a pybind11 module built with ``OPM_LIBRARY`` from
    ``opmarket/kernel.h`` (it exports ``PyInit_<name>``) is imported (its kernels' C-ABI
    entries are for framework bridges); any other library is a C-ABI plugin
    (``opmarket/c_api.h``), dlopened and its init run with the host's function table.

    LibraryError, naming the path and the reason, when the file is missing, cannot be
    loaded, needs a newer C API, fails or crashes in its init, or declares nothing;
    RegistrationError when what it declares conflicts with what is registered. Loading the
    same file again registers nothing new.
    """
    p = Path(path).resolve()
    if not p.is_file():
        raise LibraryError(f"cannot load library {p}: no such file")
    # A library built with opmarket/kernel.h is both: a Python module first (its C-ABI
    # entry registers what importing it declared; bridges reach it through the registry).
    if not _is_extension(p):
        decls = load_declarations(p)
        get_registry().register(*decls, source=f"library {p}")
        return OpLibrary(p, None, tuple(d for d in decls if isinstance(d, OpDef)))
    # PyInit_<name> decides the module name: the file name up to its first dot.
    name = p.name.split(".", 1)[0]
    loader = importlib.machinery.ExtensionFileLoader(name, str(p))
    spec = importlib.util.spec_from_file_location(name, p, loader=loader)
    if spec is None:
        raise LibraryError(f"cannot load library {p}: not a Python extension module")
    try:
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
    except ImportError as exc:
        raise LibraryError(f"cannot load library {p}: {exc}") from exc
    try:
        decls = library_declarations(module)
    except InvalidOpDefError as exc:
        raise LibraryError(f"library {p} declares invalid ops:\n{exc}") from exc
    if not decls:
        raise LibraryError(
            f"library {p} declares no ops or kernels: build it with OPM_LIBRARY "
            "from opmarket/kernel.h (see docs/native.md)"
        )
    get_registry().register(*decls, source=f"library {p}")
    return OpLibrary(p, module, tuple(d for d in decls if isinstance(d, OpDef)))


def _is_extension(path: Path) -> bool:
    """Whether the file exports a Python module's init (``PyInit_<name>``) from its dynamic
    symbol table, read without loading it."""
    return any(name.startswith("PyInit_") for name in dynamic_symbols(path))
