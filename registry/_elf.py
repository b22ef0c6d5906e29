"""What a shared library says about itself, read from its ELF file without loading it: the
symbols it exports (``.dynsym``, what ``dlsym`` can find), the libraries it needs and its
run paths (``DT_NEEDED``, ``DT_RPATH``/``DT_RUNPATH``: what ``readelf -d`` lists), and the
bytes of a section by name (``.nv_fatbin``, for :mod:`~opmarket.registry._gpubinary`).

opmarket's one ELF reader (the standard library's ``struct``), not a dependency: it needs
the section headers and the few sections asked for, read with a few seeks, so a library of
hundreds of megabytes is not read whole. 32- and 64-bit, either byte order. A file that is
not ELF, or whose section headers were stripped away (``sstrip``), has nothing here.

The index reads uploaded libraries with it, so it trusts no number in the file: every read
lies inside the file, only the first section of each kind (or name) is read (a linker
writes one), a name is at most 64 KiB long, each name is decoded once, and the names
decoded from a table add up to at most four times its size (entries pointing again and
again into one long name are a bad file). Its work is then linear in the file's size.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

__all__ = ["Library", "dynamic_symbols", "needed_libraries", "read_library"]

_MAGIC = b"\x7fELF"
_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_DT_NEEDED, _DT_RPATH, _DT_RUNPATH = 1, 15, 29
_DYN = {1: "iI", 2: "qQ"}  # d_tag, d_val
_SHN_UNDEF = 0
_SHN_XINDEX = 0xFFFF  # e_shstrndx: the index is in section 0's sh_link
_BINDINGS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
_VISIBLE = (0, 3)  # STV_DEFAULT, STV_PROTECTED
# Per ELF class (1: 32-bit, 2: 64-bit): the header after e_ident, a section header, a symbol,
# and where in a symbol's tuple its name, info, other and section index are.
_HEADER = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_SECTION = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
_SYMBOL = {1: ("IIIBBH", (0, 3, 4, 5)), 2: ("IBBHQQ", (0, 1, 2, 3))}
# Where in a section header's tuple its type, offset, size and link are.
_SH_NAME, _SH_TYPE, _SH_OFFSET, _SH_SIZE, _SH_LINK = 0, 1, 4, 5, 6
_MAX_NAME = 64 * 1024
_BAD = (OSError, struct.error, ValueError, IndexError, OverflowError)


def dynamic_symbols(path: Path) -> frozenset[str]:
    """The names of the functions and objects the library at ``path`` exports: defined,
    global or weak, default or protected visibility. Empty for a file that is not ELF, is
    truncated or cannot be read."""
    try:
        with open(path, "rb") as f:
            return _read(f)
    except _BAD:
        return frozenset()


@dataclass(frozen=True, slots=True)
class Library:
    """A shared library's dynamic section and the sections asked for by name: ``needed``
    (DT_NEEDED sonames, in the dynamic linker's order), ``runpath`` (DT_RPATH and
    DT_RUNPATH entries, split at ``:``), ``sections`` (name -> bytes, for those present)."""

    needed: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    sections: dict[str, bytes] = field(default_factory=dict)


def read_library(path: Path, sections: tuple[str, ...] = ()) -> Library:
    """The :class:`Library` facts of the file at ``path``, with the bytes of the first
    section of each name in ``sections``. Empty for a file that is not ELF, is truncated or
    cannot be read."""
    try:
        with open(path, "rb") as f:
            found = _sections(f)
            if found is None:
                return Library()
            klass, order, headers, shstrndx = found
            needed: list[str] = []
            runpath: list[str] = []
            dynamic = _with_strings(f, headers, _SHT_DYNAMIC)
            if dynamic is not None:
                strings, table = dynamic
                name_at = _Names(strings)
                entry = struct.Struct(order + _DYN[klass])
                done: set[tuple[int, int]] = set()  # an entry repeated adds nothing
                for offset in range(0, len(table) - entry.size + 1, entry.size):
                    tag, value = entry.unpack_from(table, offset)
                    if tag == 0:  # DT_NULL ends the table
                        break
                    if (tag, value) in done:
                        continue
                    done.add((tag, value))
                    if tag == _DT_NEEDED:
                        needed.append(name_at(value))
                    elif tag in (_DT_RPATH, _DT_RUNPATH):
                        runpath.extend(p for p in name_at(value).split(":") if p)
            named: dict[str, bytes] = {}
            if sections and shstrndx < len(headers):
                names_sh = headers[shstrndx]
                names = _Names(_exact(f, names_sh[_SH_SIZE], names_sh[_SH_OFFSET]))
                for sh in headers:
                    name = names(sh[_SH_NAME]) if sh[_SH_NAME] < len(names.strings) else ""
                    if name in sections and name not in named:
                        named[name] = _exact(f, sh[_SH_SIZE], sh[_SH_OFFSET])
            return Library(tuple(needed), tuple(runpath), named)
    except _BAD:
        return Library()


def needed_libraries(path: Path) -> tuple[str, ...]:
    """The sonames the library at ``path`` needs (``DT_NEEDED``), in the order the dynamic
    linker loads them. Empty for a file that is not ELF, is truncated or cannot be read."""
    return read_library(path).needed


def _sections(f: BinaryIO) -> tuple[int, str, list[tuple[int, ...]], int] | None:
    """The ELF class, byte order, section headers and the index of the section names'
    section of the open file; None if not ELF."""
    ident = f.read(16)
    if len(ident) < 16 or ident[:4] != _MAGIC or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    klass = ident[4]
    order = "<" if ident[5] == 1 else ">"
    header = struct.Struct(order + _HEADER[klass])
    fields = header.unpack(_exact(f, header.size))
    shoff, shentsize, shnum, shstrndx = fields[5], fields[10], fields[11], fields[12]
    section = struct.Struct(order + _SECTION[klass])
    if shoff == 0 or shentsize < section.size:
        return None
    if shnum == 0 or shstrndx == _SHN_XINDEX:  # extended numbering: in section 0
        first = section.unpack(_exact(f, section.size, shoff))
        shnum = shnum or first[_SH_SIZE]
        shstrndx = first[_SH_LINK] if shstrndx == _SHN_XINDEX else shstrndx
    table = _exact(f, shentsize * shnum, shoff)
    headers = [section.unpack_from(table, i * shentsize) for i in range(shnum)]
    return klass, order, headers, shstrndx


def _with_strings(
    f: BinaryIO, sections: list[tuple[int, ...]], kind: int
) -> tuple[bytes, bytes] | None:
    """The first section of type ``kind``: the string table it links to, and its own
    bytes; None when there is none."""
    sh = next((sh for sh in sections if sh[_SH_TYPE] == kind), None)
    if sh is None:
        return None
    strtab = sections[sh[_SH_LINK]]
    return _exact(f, strtab[_SH_SIZE], strtab[_SH_OFFSET]), _exact(f, sh[_SH_SIZE], sh[_SH_OFFSET])


class _Names:
    """The NUL-terminated names of one string table, each decoded once; ValueError for a
    name past :data:`_MAX_NAME` bytes, or once the names decoded add up to more than four
    times the table (a linker's names do not overlap much; a hostile file can point
    thousands of entries at one long name)."""

    def __init__(self, strings: bytes) -> None:
        self.strings = strings
        self.budget = 4 * len(strings) + _MAX_NAME
        self.seen: dict[int, str] = {}

    def __call__(self, start: int) -> str:
        found = self.seen.get(start)
        if found is not None:
            return found
        end = self.strings.index(b"\0", start, start + _MAX_NAME)
        self.budget -= end - start + 1
        if self.budget < 0:
            raise ValueError("string table names overlap past any linker's")
        name = self.seen[start] = self.strings[start:end].decode("utf-8", "replace")
        return name


def _read(f: BinaryIO) -> frozenset[str]:
    found = _sections(f)
    if found is None:
        return frozenset()
    klass, order, sections, _ = found
    symbol_format, (name_at, info_at, other_at, shndx_at) = _SYMBOL[klass]
    symbol = struct.Struct(order + symbol_format)
    names: set[str] = set()
    dynsym = _with_strings(f, sections, _SHT_DYNSYM)
    if dynsym is None:
        return frozenset()
    strings, symbols = dynsym
    name_of = _Names(strings)
    for offset in range(symbol.size, len(symbols) - symbol.size + 1, symbol.size):
        entry = symbol.unpack_from(symbols, offset)  # entry 0 is the null symbol
        if (
            entry[shndx_at] == _SHN_UNDEF
            or entry[info_at] >> 4 not in _BINDINGS
            or entry[other_at] & 3 not in _VISIBLE
        ):
            continue
        names.add(name_of(entry[name_at]))
    return frozenset(names)


def _exact(f: BinaryIO, size: int, at: int | None = None) -> bytes:
    """``size`` bytes from ``at`` (else from where ``f`` is); ValueError unless all of them
    lie inside the file, so no number in a hostile file makes it read more than it has."""
    start = f.tell() if at is None else at
    if start < 0 or size < 0 or start + size > os.fstat(f.fileno()).st_size:
        raise ValueError("truncated ELF file")
    f.seek(start)
    return f.read(size)
