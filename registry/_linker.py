"""What the dynamic linker would say to loading one library into a Python process, predicted
from the files without loading anything.

The model, found by loading real plugin libraries and comparing: when the library loads, the
process already holds the interpreter (and what it needs) in the global scope, and what each
framework's import loaded (:data:`~._environment.FRAMEWORKS`: TensorFlow's
``_pywrap_tensorflow_internal`` closure globally; PyTorch's ``libtorch_global_deps`` globally
and ``torch._C``'s closure locally). The library's DT_NEEDED names are matched by soname (or
file name) to what is loaded, else searched as ``ld.so`` searches (DT_RPATH, then
``LD_LIBRARY_PATH``, DT_RUNPATH, ``ld.so.cache``, the default folders), breadth first. Each
version it needs (``.gnu.version_r``) must be defined by the library it names, and each
undefined symbol of global binding must be exported, with a matching version, by the global
scope or the library's own closure: DT_NEEDED alone would miss the ``Py*`` symbols a
pybind11 module takes from the interpreter, and a framework's local libraries count only
when the library needs them.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from opmarket.registry._elf import read_library
from opmarket.registry._elfsymbols import Reference, read_imports
from opmarket.registry._environment import Environment, Framework

__all__ = ["Problem", "Process", "demangle"]


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a file would not load (or, as a note, what is worth knowing though it would):
    ``kind`` (tag, extension, needed, version, symbol, cuda, elf, note), the ``library``
    (its path in the wheel, "" for the wheel as a whole) and a one-line ``detail``."""

    kind: str
    library: str
    detail: str

    def to_json(self) -> dict[str, str]:
        """``{"kind", "library", "detail"}``."""
        return {"kind": self.kind, "library": self.library, "detail": self.detail}


# The namespaces (first name of a demangled symbol) and C prefixes of each framework's
# symbols, to say where a missing symbol should have come from.
_NAMESPACES = {
    "tensorflow": "tensorflow",
    "tsl": "tensorflow",
    "xla": "tensorflow",
    "c10": "torch",
    "at": "torch",
    "torch": "torch",
    "caffe2": "torch",
    "absl": "absl",
}
_PREFIXES = (
    ("TF_", "tensorflow"),
    ("TFE_", "tensorflow"),
    ("aoti_torch_", "torch"),
    ("Py", "python"),
    ("AbslInternal", "absl"),
    ("_Py", "python"),
)
_SPECIAL = re.compile(
    r"^(?:vtable for |typeinfo for |typeinfo name for |VTT for |guard variable for |"
    r"non-virtual thunk to |virtual thunk to |construction vtable for )"
)


def _origin(name: str, demangled: str) -> str:
    """The framework (``tensorflow``, ``torch``, ``python``) a symbol belongs to, or ""."""
    for prefix, origin in _PREFIXES:
        if name.startswith(prefix):
            return origin
    if demangled == name:
        return ""
    found = re.search(r"(\w+)::", _SPECIAL.sub("", demangled))
    return _NAMESPACES.get(found.group(1), "") if found else ""


_cxa_demangle: Any = None


def demangle(names: Sequence[str]) -> list[str]:
    """Each C++ name demangled (``_ZN3tsl...`` -> ``tsl::...``) by the C++ runtime's own
    ``__cxa_demangle``; a C name, or any the runtime cannot demangle, as it is."""
    global _cxa_demangle
    if _cxa_demangle is None:
        try:
            runtime = ctypes.CDLL(ctypes.util.find_library("stdc++") or "libstdc++.so.6")
            _cxa_demangle = runtime.__cxa_demangle
            _cxa_demangle.restype = ctypes.c_void_p
            _cxa_demangle.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p]
            _cxa_demangle.argtypes.append(ctypes.POINTER(ctypes.c_int))
        except (OSError, AttributeError):
            _cxa_demangle = False
    if not _cxa_demangle:
        return list(names)
    libc = ctypes.CDLL(None)
    libc.free.argtypes = [ctypes.c_void_p]
    out: list[str] = []
    for name in names:
        status = ctypes.c_int(-1)
        result = _cxa_demangle(name.encode(), None, None, ctypes.byref(status))
        if status.value == 0 and result:
            out.append(ctypes.string_at(result).decode("utf-8", "replace"))
            libc.free(result)
        else:
            out.append(name)
    return out


def _expand(entries: Iterable[str], origin: Path) -> tuple[str, ...]:
    return tuple(
        os.path.normpath(e.replace("${ORIGIN}", str(origin)).replace("$ORIGIN", str(origin)))
        for e in entries
    )


class Process:
    """A Python process of ``env`` that has imported ``frameworks``: what it has loaded
    (by soname and file name) and its global scope. ``tree``/``install`` map a wheel
    unpacked in folder ``tree`` onto where it would be installed (``install``), so that a
    run path of one of its libraries finds both its own files and the environment's."""

    def __init__(
        self,
        env: Environment,
        frameworks: Iterable[Framework] = (),
        tree: Path | None = None,
        install: Path | None = None,
    ) -> None:
        self.env, self.tree, self.install = env, tree, install
        self.loaded: dict[str, Path] = {}
        self.global_scope: list[Path] = []
        self.frameworks = list(frameworks)
        interpreter = Path(env.interpreter.executable)
        self._make_global(self._load(interpreter)[0])
        for framework in self.frameworks:
            for library in framework.global_libraries:
                self._make_global(self._load(library)[0])
            for library in framework.local_libraries:
                self._load(library)

    def _make_global(self, objects: list[Path]) -> None:
        self.global_scope += [p for p in objects if p not in self.global_scope]

    def _load(self, root: Path) -> tuple[list[Path], list[tuple[str, Path]]]:
        """Load ``root`` and its closure into this process."""
        order, missing, names = self.closure(root)
        self.loaded.update(names)
        return order, missing

    def _folders(self, entries: tuple[str, ...]) -> tuple[str, ...]:
        """Run path folders, each of the unpacked wheel's followed by where it installs."""
        if self.tree is None or self.install is None:
            return entries
        out: list[str] = []
        for entry in entries:
            out.append(entry)
            if Path(entry).is_relative_to(self.tree):
                out.append(str(self.install / Path(entry).relative_to(self.tree)))
        return tuple(out)

    def closure(self, root: Path) -> tuple[list[Path], list[tuple[str, Path]], dict[str, Path]]:
        """``root`` and every library it needs, breadth first as ``ld.so`` loads them; the
        needed names not found (name, needed by); and the names (soname, file name) under
        which the new ones are loaded."""
        root = Path(os.path.realpath(root))
        order, missing = [root], list[tuple[str, Path]]()
        names: dict[str, Path] = {}
        inherited: dict[Path, tuple[str, ...]] = {root: ()}
        position = 0
        while position < len(order):
            current = order[position]
            position += 1
            library = read_library(current)
            if current not in self.loaded.values():
                names.setdefault(current.name, current)
                if library.soname:
                    names.setdefault(library.soname, current)
            paths = self._folders(_expand(library.runpath, current.parent))
            rpath = (paths if library.rpath_only else ()) + inherited[current]
            runpath = () if library.rpath_only else paths
            for name in library.needed:
                found = self.loaded.get(name) or names.get(name)
                if found is None:
                    found = self.env.search.find(name, rpath, runpath)
                if found is None:
                    missing.append((name, current))
                    continue
                found = Path(os.path.realpath(found))
                names.setdefault(name, found)
                if found not in inherited:
                    inherited[found] = rpath
                    order.append(found)
        return order, missing, names

    def check(self, library: Path, label: str) -> list[Problem]:
        """Every reason ``library`` (shown as ``label``) would not load in this process."""
        order, missing, names = self.closure(library)
        problems = [
            Problem(
                "needed",
                label,
                f"needs {name}, found nowhere the dynamic linker looks"
                + ("" if who == order[0] else f" (needed by {who.name})"),
            )
            for name, who in missing
        ]
        imports = read_imports(library)
        # A file either reader refuses (past its limits) is not known to load: never "works".
        refused = imports.problem or read_library(library).problem
        if refused:
            return [*problems, Problem("elf", label, f"unreadable ELF file: {refused}")]
        if missing:  # the loader stops there; symbols from the missing library are noise
            return problems
        provider = {**self.loaded, **names}
        reported: set[tuple[str, str]] = set()
        for file, versions in sorted(imports.needs.items()):
            if file not in provider:
                continue
            defined = self.env.exported(provider[file]).versions
            lacking = [v for v in versions if v not in defined]
            if defined and lacking:
                problems.append(_version_problem(label, file, provider[file], lacking, defined))
                reported.update((file, v) for v in lacking)
        scope = self.global_scope + [p for p in order if p not in self.global_scope]
        pending = [r for r in imports.references if (r.file, r.version) not in reported]
        for path in scope:
            if not pending:
                break
            exports = self.env.exported(path)
            found = exports.find({r.name for r in pending})
            pending = [
                r
                for r in pending
                if r.name not in found or not _matches(r, found[r.name], exports.versioned)
            ]
        return problems + self._local_only(label, scope, pending)

    def _local_only(self, label: str, scope: list[Path], pending: list[Reference]) -> list[Problem]:
        """Problems for the missing symbols: first those that a library loaded locally (by a
        framework's import) exports, which the library would see only by needing it."""
        problems: list[Problem] = []
        for path in dict.fromkeys(self.loaded.values()):
            if not pending or path in scope:
                continue
            exports = self.env.exported(path)
            found = exports.find({r.name for r in pending})
            there = [
                r
                for r in pending
                if r.name in found and _matches(r, found[r.name], exports.versioned)
            ]
            if there:
                pending = [r for r in pending if r not in there]
                owner = next((f.label for f in self.frameworks if path in self._loaded_by(f)), "")
                count = _count(there)
                problems.append(
                    Problem(
                        "symbol",
                        label,
                        f"{count} exported only by {path.name}, which "
                        + (f"{owner}'s import loads" if owner else "the process loads")
                        + f" locally: the library must need it (DT_NEEDED {path.name}): "
                        + "; ".join(_shown(there)),
                    )
                )
        return problems + self._symbol_problems(label, pending)

    def _loaded_by(self, framework: Framework) -> set[Path]:
        own = Process(self.env, [framework])
        return set(own.loaded.values()) - set(Process(self.env).loaded.values())

    def _symbol_problems(self, label: str, pending: list[Reference]) -> list[Problem]:
        names = sorted({r.name for r in pending})
        groups: dict[str, list[str]] = {}
        tensorflow = any(f.kind.name == "tensorflow" for f in self.frameworks)
        for name, readable in zip(names, demangle(names), strict=True):
            shown = name if readable == name else f"{name} ({readable})"
            origin = _origin(name, readable)
            if origin == "absl" and not tensorflow:  # TensorFlow's copy, when it runs
                origin = ""
            groups.setdefault(origin.replace("absl", "tensorflow"), []).append(shown)
        return [
            Problem("symbol", label, f"{_count(shown)} {self._where(origin)}: " + "; ".join(shown))
            for origin, shown in sorted(groups.items())
        ]

    def _where(self, origin: str) -> str:
        """Whom a group of missing symbols was looked for in, for the problem's detail."""
        if origin == "python":
            python = self.env.interpreter
            return f"that this Python ({python.implementation} {python.version}) does not export"
        if origin:
            framework = self.env.frameworks.get(origin)
            if framework is None:
                return f"that would come from {origin}, which is not installed"
            if framework not in self.frameworks:
                return (
                    f"that would come from {framework.label}, which it neither needs nor declares"
                )
            return f"that {framework.label} does not export"
        return "that nothing in its scope exports"


def _count(items: Sequence[object]) -> str:
    return f"{len(items)} undefined symbol{'s' if len(items) > 1 else ''}"


def _shown(references: list[Reference]) -> list[str]:
    """Each name, with its demangled form when it differs."""
    names = sorted({r.name for r in references})
    return [n if d == n else f"{n} ({d})" for n, d in zip(names, demangle(names), strict=True)]


def _matches(reference: Reference, definitions: list[tuple[str, bool]], versioned: bool) -> bool:
    """Whether one of a library's definitions of a name satisfies ``reference``, as glibc's
    ``check_match`` decides: a versioned reference takes the same version (or a library
    without version information), an unversioned one any definition not hidden."""
    if not versioned:
        return True
    if reference.version:
        return any(v == reference.version or (not v and not hidden) for v, hidden in definitions)
    return any(not hidden for _, hidden in definitions)


def _version_problem(
    label: str, file: str, path: Path, lacking: list[str], defined: frozenset[str]
) -> Problem:
    prefixes = {v.split("_", 1)[0] for v in lacking}

    def key(version: str) -> tuple[int, ...]:
        return tuple(int(p) for p in re.findall(r"\d+", version))

    newest = [
        max((v for v in defined if v.split("_", 1)[0] == p), key=key, default=f"no {p}")
        for p in sorted(prefixes)
    ]
    return Problem(
        "version",
        label,
        f"needs {', '.join(sorted(lacking, key=key))} of {file}; {path} has up to "
        + ", ".join(newest),
    )
