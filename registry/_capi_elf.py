"""What a shared library exports, read from its ELF dynamic symbol table (``.dynsym``)
without loading it: the symbols ``dlsym`` can find; and the libraries it needs (its
``DT_NEEDED`` entries, what ``readelf -d`` lists as NEEDED).

A small reader of its own (the standard library's ``struct``), not a dependency: it needs
the section headers, the one ``SHT_DYNSYM`` section and the string table it links to, read
with a few seeks, so a library of hundreds of megabytes is not read whole. 32- and 64-bit,
either byte order. A file that is not ELF, or whose section headers were stripped away
(``sstrip``), exports nothing here.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

__all__ = ["dynamic_symbols", "needed_libraries"]

_MAGIC = b"\x7fELF"
_SHT_DYNSYM = 11
_SHT_DYNAMIC = 6
_DT_NEEDED = 1
_DYN = {1: "iI", 2: "qQ"}  # d_tag, d_val
_SHN_UNDEF = 0
_BINDINGS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
_VISIBLE = (0, 3)  # STV_DEFAULT, STV_PROTECTED
# Per ELF class (1: 32-bit, 2: 64-bit): the header after e_ident, a section header, a symbol,
# and where in a symbol's tuple its name, info, other and section index are.
_HEADER = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_SECTION = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
_SYMBOL = {1: ("IIIBBH", (0, 3, 4, 5)), 2: ("IBBHQQ", (0, 1, 2, 3))}
# Where in a section header's tuple its type, offset, size and link are.
_SH_TYPE, _SH_OFFSET, _SH_SIZE, _SH_LINK = 1, 4, 5, 6


def dynamic_symbols(path: Path) -> frozenset[str]:
    """The names of the functions and objects the library at ``path`` exports: defined,
    global or weak, default or protected visibility. Empty for a file that is not ELF, is
    truncated or cannot be read."""
    try:
        with open(path, "rb") as f:
            return _read(f)
    except (OSError, struct.error, ValueError, IndexError):
        return frozenset()


def needed_libraries(path: Path) -> tuple[str, ...]:
    """The sonames the library at ``path`` needs (``DT_NEEDED``), in the order the dynamic
    linker loads them. Empty for a file that is not ELF, is truncated or cannot be read."""
    try:
        with open(path, "rb") as f:
            found = _sections(f)
            if found is None:
                return ()
            klass, order, sections = found
            entry = struct.Struct(order + _DYN[klass])
            needed: list[str] = []
            for sh in sections:
                if sh[_SH_TYPE] != _SHT_DYNAMIC:
                    continue
                strings, table = _with_strings(f, sections, sh)
                for offset in range(0, len(table) - entry.size + 1, entry.size):
                    tag, value = entry.unpack_from(table, offset)
                    if tag == 0:  # DT_NULL ends the table
                        break
                    if tag == _DT_NEEDED:
                        end = strings.index(b"\0", value)
                        needed.append(strings[value:end].decode("utf-8", "replace"))
            return tuple(needed)
    except (OSError, struct.error, ValueError, IndexError):
        return ()


def _sections(f: BinaryIO) -> tuple[int, str, list[tuple[int, ...]]] | None:
    """The ELF class, byte order and section headers of the open file; None if not ELF."""
    ident = f.read(16)
    if len(ident) < 16 or ident[:4] != _MAGIC or ident[4] not in (1, 2) or ident[5] not in (1, 2):
        return None
    klass = ident[4]
    order = "<" if ident[5] == 1 else ">"
    header = struct.Struct(order + _HEADER[klass])
    fields = header.unpack(_exact(f, header.size))
    shoff, shentsize, shnum = fields[5], fields[10], fields[11]
    section = struct.Struct(order + _SECTION[klass])
    if shoff == 0 or shentsize < section.size:
        return None
    if shnum == 0:  # extended numbering: the count is in section 0's size
        f.seek(shoff)
        shnum = section.unpack(_exact(f, section.size))[_SH_SIZE]
    f.seek(shoff)
    table = _exact(f, shentsize * shnum)
    return klass, order, [section.unpack_from(table, i * shentsize) for i in range(shnum)]


def _with_strings(
    f: BinaryIO, sections: list[tuple[int, ...]], sh: tuple[int, ...]
) -> tuple[bytes, bytes]:
    """The string table a section links to, and the section's own bytes."""
    strtab = sections[sh[_SH_LINK]]
    f.seek(strtab[_SH_OFFSET])
    strings = _exact(f, strtab[_SH_SIZE])
    f.seek(sh[_SH_OFFSET])
    return strings, _exact(f, sh[_SH_SIZE])


def _read(f: BinaryIO) -> frozenset[str]:
    found = _sections(f)
    if found is None:
        return frozenset()
    klass, order, sections = found
    symbol_format, (name_at, info_at, other_at, shndx_at) = _SYMBOL[klass]
    symbol = struct.Struct(order + symbol_format)
    names: set[str] = set()
    for sh in sections:
        if sh[_SH_TYPE] != _SHT_DYNSYM:
            continue
        strings, symbols = _with_strings(f, sections, sh)
        for offset in range(symbol.size, len(symbols) - symbol.size + 1, symbol.size):
            entry = symbol.unpack_from(symbols, offset)  # entry 0 is the null symbol
            if (
                entry[shndx_at] == _SHN_UNDEF
                or entry[info_at] >> 4 not in _BINDINGS
                or entry[other_at] & 3 not in _VISIBLE
            ):
                continue
            start = entry[name_at]
            end = strings.index(b"\0", start)
            names.add(strings[start:end].decode("utf-8", "replace"))
    return frozenset(names)


def _exact(f: BinaryIO, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated ELF file")
    return data
