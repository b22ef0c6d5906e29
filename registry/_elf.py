"""What a shared library says about itself, read from its ELF file without loading it: the
symbols it exports (its dynamic symbols, what ``dlsym`` can find), the libraries it needs
and its run paths (``DT_NEEDED``, ``DT_RPATH``/``DT_RUNPATH``: what ``readelf -d`` lists),
and the bytes of a section by name (``.nv_fatbin``, for :mod:`~opmarket.registry._gpubinary`).

opmarket's one ELF reader (the standard library's ``struct``), not a dependency, on
:mod:`._elffile`'s layout of the file. The dynamic table and the symbols are read as the
dynamic linker reads them: through the program headers (PT_DYNAMIC, then the tables its
entries point at in the PT_LOAD segments), never the section headers, which a loadable
library may have stripped (``sstrip``) or made lie; only a file without PT_DYNAMIC is read
through its sections. Sections by name come from the section headers. A few seeks each,
so a library of hundreds of megabytes is not read whole. 32- and 64-bit, either byte
order. A file that is not ELF, or has neither a dynamic segment nor sections, has nothing.

The index reads uploaded libraries with it, in its own process, so it trusts no number in
the file and holds only what it returns: every read lies inside the file (and inside its
segment); the section headers are read a block at a time and never kept (at most
:data:`MAX_SECTIONS` of them, extended numbering included), the program headers at most
:data:`MAX_SEGMENTS`; only the first section of each kind (or name) is read (a linker
writes one); the dynamic table is read up to its ``DT_NULL`` within :data:`MAX_DYNAMIC`
entries; and the names of ``DT_NEEDED``, ``DT_RPATH`` and ``DT_RUNPATH`` are read one by
one from the string table, each at most 64 KiB and :data:`MAX_NAMES` bytes in all, never
the whole table. Reading ``needed``/``runpath`` thus costs a bounded number of reads and a
small constant times the names it returns, whatever the file's size. Linked libraries have
tens of sections and tens of dynamic entries: a file past a limit is refused
(:attr:`Library.problem` says which).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from opmarket.registry._elffile import (
    _BAD,
    _MAX_NAME,
    _SH_NAME,
    _SH_OFFSET,
    _SH_SIZE,
    _SHT_DYNSYM,
    _SYMBOL,
    MAX_DYNAMIC,
    MAX_SECTIONS,
    MAX_SEGMENTS,
    _Elf,
    _exact,
    _Refused,
)

__all__ = [
    "MAX_DYNAMIC",
    "MAX_NAMES",
    "MAX_SECTIONS",
    "MAX_SEGMENTS",
    "Library",
    "dynamic_symbols",
    "needed_libraries",
    "read_library",
]

#: The most bytes of ``DT_NEEDED``/``DT_RPATH``/``DT_RUNPATH`` names read from one library.
MAX_NAMES = 256 * 1024

_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH = 1, 14, 15, 29
_BINDINGS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
_VISIBLE = (0, 3)  # STV_DEFAULT, STV_PROTECTED
_SHN_UNDEF = 0


def dynamic_symbols(path: Path) -> frozenset[str]:
    """The names of the functions and objects the library at ``path`` exports: defined,
    global or weak, default or protected visibility. Empty for a file that is not ELF, is
    truncated or cannot be read."""
    try:
        with open(path, "rb") as f:
            elf = _Elf.parse(f)
            return frozenset() if elf is None else _exports(elf)
    except _BAD:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Library:
    """A shared library's dynamic table and the sections asked for by name: ``needed``
    (DT_NEEDED sonames, in the dynamic linker's order), ``runpath`` (DT_RPATH and
    DT_RUNPATH entries, split at ``:``), ``sections`` (name -> bytes, for those present),
    and ``problem``: why an ELF file was not read (truncated, or past a limit such as
    :data:`MAX_DYNAMIC`), empty when it was or when the file is not ELF at all;
    ``soname`` (DT_SONAME, "" without one) and ``rpath_only``: True when ``runpath`` came
    from DT_RPATH alone, which the dynamic linker searches before ``LD_LIBRARY_PATH`` and
    for the libraries loaded on its behalf too (DT_RUNPATH: after it, for its own needs)."""

    needed: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    sections: dict[str, bytes] = field(default_factory=dict)
    problem: str = ""
    soname: str = ""
    rpath_only: bool = False


def read_library(path: Path, sections: tuple[str, ...] = ()) -> Library:
    """The :class:`Library` facts of the file at ``path``, with the bytes of the first
    section of each name in ``sections``. Empty for a file that is not ELF, is truncated or
    cannot be read, or breaks a limit (then with its ``problem``)."""
    try:
        with open(path, "rb") as f:
            elf = _Elf.parse(f)
            if elf is None:
                return Library()
            dynamic = _dynamic(elf)
            named = _named(elf, sections) if sections else {}
            return Library(
                dynamic.needed,
                dynamic.runpath,
                named,
                soname=dynamic.soname,
                rpath_only=dynamic.rpath_only,
            )
    except _BAD as exc:
        return Library(problem=str(exc) or type(exc).__name__)


def needed_libraries(path: Path) -> tuple[str, ...]:
    """The sonames the library at ``path`` needs (``DT_NEEDED``), in the order the dynamic
    linker loads them. Empty for a file that is not ELF, is truncated or cannot be read."""
    return read_library(path).needed


class _Names:
    """Names read one by one from the string table with header ``sh`` (never the whole
    table), each once; :class:`_Refused` past :data:`_MAX_NAME` bytes for one name or
    ``budget`` bytes in all."""

    def __init__(self, elf: _Elf, sh: tuple[int, ...], budget: int) -> None:
        self.elf, self.start, self.end = elf, sh[_SH_OFFSET], sh[_SH_OFFSET] + sh[_SH_SIZE]
        _exact(elf.f, elf.size, 0, self.end)  # the table lies in the file
        self.budget = budget
        self.seen: dict[int, str] = {}

    def __call__(self, offset: int) -> str:
        found = self.seen.get(offset)
        if found is not None:
            return found
        at, parts = self.start + offset, list[bytes]()
        limit = min(self.end, at + _MAX_NAME + 1)
        while True:
            if at >= limit:
                raise _Refused("a name runs past its string table or 64 KiB")
            block = _exact(self.elf.f, self.elf.size, min(4096, limit - at), at)
            end = block.find(b"\0")
            parts.append(block if end < 0 else block[:end])
            self.budget -= len(parts[-1])
            if self.budget < 0:
                raise _Refused(f"names add up to more than {MAX_NAMES} bytes")
            if end >= 0:
                break
            at += len(block)
        name = self.seen[offset] = b"".join(parts).decode("utf-8", "replace")
        return name


class _Dynamic(NamedTuple):
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    soname: str
    rpath_only: bool


def _dynamic(elf: _Elf) -> _Dynamic:
    """DT_NEEDED, DT_RPATH/DT_RUNPATH and DT_SONAME of the dynamic table."""
    entries, strings = elf.entries()
    if not entries:
        return _Dynamic((), (), "", False)
    if strings is None:
        if any(tag in (_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH) for tag, _ in entries):
            raise _Refused("DT_NEEDED (or a run path) without a string table")
        return _Dynamic((), (), "", False)
    name_at = _Names(elf, strings, MAX_NAMES)
    needed: list[str] = []
    runpath: list[str] = []
    soname, tags = "", set[int]()
    done: set[tuple[int, int]] = set()  # an entry repeated adds nothing
    wanted = (_DT_NEEDED, _DT_SONAME, _DT_RPATH, _DT_RUNPATH)
    for tag, value in entries:
        if (tag, value) in done or tag not in wanted:
            continue
        done.add((tag, value))
        tags.add(tag)
        if tag == _DT_NEEDED:
            needed.append(name_at(value))
        elif tag == _DT_SONAME:
            soname = soname or name_at(value)
        else:
            runpath.extend(p for p in name_at(value).split(":") if p)
    rpath_only = _DT_RPATH in tags and _DT_RUNPATH not in tags
    return _Dynamic(tuple(needed), tuple(runpath), soname, rpath_only)


def _named(elf: _Elf, wanted: tuple[str, ...]) -> dict[str, bytes]:
    """The bytes of the first section of each name in ``wanted``."""
    return {name: elf.read(sh) for name, sh in _named_headers(elf, wanted).items()}


def _named_headers(elf: _Elf, wanted: tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """The header of the first section of each name in ``wanted``."""
    if elf.shstrndx >= elf.shnum:
        return {}
    names = _Names(elf, elf.header(elf.shstrndx), MAX_NAMES)
    found: dict[str, tuple[int, ...]] = {}
    longest = max(map(len, wanted))
    for sh in elf.headers():
        if sh[_SH_NAME] >= names.end - names.start:
            continue
        # A name longer than every wanted one is not read whole (nor counted twice).
        probe = _exact(
            elf.f,
            elf.size,
            min(longest + 1, names.end - names.start - sh[_SH_NAME]),
            names.start + sh[_SH_NAME],
        )
        name = probe.split(b"\0", 1)[0].decode("utf-8", "replace")
        if name in wanted and name not in found:
            found[name] = sh
    return found


def _exports(elf: _Elf) -> frozenset[str]:
    symbol_format, (name_at, info_at, other_at, shndx_at) = _SYMBOL[elf.klass]
    symbol = struct.Struct(elf.order + symbol_format)
    sh = elf.first(_SHT_DYNSYM)
    if sh is None:
        return frozenset()
    strings = elf.read(elf.linked(sh))
    symbols = elf.read(sh)
    # Names decoded add up to at most four times their table: a linker's names overlap
    # little, a hostile file points thousands of symbols into one long name.
    budget = 4 * len(strings) + _MAX_NAME
    seen: dict[int, str] = {}
    names: set[str] = set()
    for offset in range(symbol.size, len(symbols) - symbol.size + 1, symbol.size):
        entry = symbol.unpack_from(symbols, offset)  # entry 0 is the null symbol
        if (
            entry[shndx_at] == _SHN_UNDEF
            or entry[info_at] >> 4 not in _BINDINGS
            or entry[other_at] & 3 not in _VISIBLE
        ):
            continue
        start = entry[name_at]
        name = seen.get(start)
        if name is None:
            end = strings.index(b"\0", start, start + _MAX_NAME)
            budget -= end - start + 1
            if budget < 0:
                raise _Refused("symbol names overlap past any linker's")
            name = seen[start] = strings[start:end].decode("utf-8", "replace")
        names.add(name)
    return frozenset(names)
