"""The layout of an ELF file, read without loading it and trusting no number in it: its
header, its section headers (read a block at a time and never kept), its program headers
(the PT_LOAD segments, those not executable apart, PT_DYNAMIC), its dynamic table, and the
tables the dynamic linker finds from that table (symbols, names, hashes, versions),
described as section headers so that :mod:`._elf` and :mod:`._elfsymbols` read them as
they read sections.

The dynamic linker never looks at sections: it finds the dynamic table through PT_DYNAMIC
and each table through the dynamic table's addresses (``DT_STRTAB``, ``DT_SYMTAB``, ...),
mapped to the file through the PT_LOAD segments. So do these readers, for the tables it
reads, whenever the file has a PT_DYNAMIC: a library whose section headers were stripped
(``sstrip``) or lie still loads and still needs its libraries and symbols. The number of
dynamic symbols is ``DT_HASH``'s ``nchain``, or the end of the highest ``DT_GNU_HASH``
chain. Sections are read for the rest (``.nv_fatbin``), and for the dynamic tables of a
file without PT_DYNAMIC. A file with neither has nothing.

Every read lies inside the file and inside the segment it is in; at most
:data:`MAX_SECTIONS` section headers, :data:`MAX_SEGMENTS` program headers,
:data:`MAX_DYNAMIC` dynamic entries and :data:`MAX_SYMBOLS` dynamic symbols are read (a
linked library has tens, ten, tens and at most a few hundred thousand); past a limit, or
where the file breaks the format, :class:`_Refused` says why. Section headers that break
the format or :data:`MAX_SECTIONS` (the wrong entry size, a table past the file's end) are
set aside when the file has PT_LOAD segments, as the loader never reads them: the file is
then read as one without section headers; a file without segments is refused.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import BinaryIO

import numpy

__all__ = ["MAX_DYNAMIC", "MAX_SECTIONS", "MAX_SEGMENTS", "MAX_SYMBOLS"]

#: The most section headers read (extended numbering included); a linked library has tens.
MAX_SECTIONS = 65_535
#: The most program headers read; a linked library has about ten.
MAX_SEGMENTS = 1_024
#: The most dynamic entries read before ``DT_NULL``; a linked library has tens.
MAX_DYNAMIC = 4_096
#: The most dynamic symbols read; libtensorflow_cc.so.2 has about 450,000.
MAX_SYMBOLS = 1 << 22

_MAGIC = b"\x7fELF"
_DYN = {1: "iI", 2: "qQ"}  # d_tag, d_val
_XNUM = 0xFFFF  # e_shstrndx (e_phnum): the number is in section 0's sh_link (sh_info)
# Per ELF class (1: 32-bit, 2: 64-bit): the header after e_ident, a section header, a
# program header and where in its tuple its type, offset, address and file size are.
_HEADER = {1: "HHIIIIIHHHHHH", 2: "HHIQQQIHHHHHH"}
_SECTION = {1: "IIIIIIIIII", 2: "IIQQQQIIQQ"}
_PROGRAM = {1: "IIIIIIII", 2: "IIQQQQQQ"}
_PH_FIELDS = {1: (0, 1, 2, 4), 2: (0, 2, 3, 5)}
_PH_FLAGS = {1: 6, 2: 1}  # where p_flags is
_PF_X = 1
# A dynamic symbol, and where in its tuple its name, info, other and section index are.
_SYMBOL = {1: ("IIIBBH", (0, 3, 4, 5)), 2: ("IBBHQQ", (0, 1, 2, 3))}
_SYMBOL_SIZE = {1: 16, 2: 24}
_MAX_NAME = 64 * 1024  # bytes of one name
# Where in a section header's tuple its name, type, offset, size, link and info are.
_SH_NAME, _SH_TYPE, _SH_OFFSET, _SH_SIZE, _SH_LINK, _SH_INFO = 0, 1, 4, 5, 6, 7
_PT_LOAD, _PT_DYNAMIC = 1, 2
_SHT_STRTAB, _SHT_HASH, _SHT_DYNAMIC, _SHT_DYNSYM = 3, 5, 6, 11
_SHT_GNU_HASH, _SHT_VERDEF, _SHT_VERNEED, _SHT_VERSYM = (
    0x6FFFFFF6,
    0x6FFFFFFD,
    0x6FFFFFFE,
    0x6FFFFFFF,
)
#: The section types whose tables the dynamic linker finds from the dynamic segment.
_DYNAMIC_KINDS = frozenset(
    {
        _SHT_STRTAB,
        _SHT_HASH,
        _SHT_DYNAMIC,
        _SHT_DYNSYM,
        _SHT_GNU_HASH,
        _SHT_VERDEF,
        _SHT_VERNEED,
        _SHT_VERSYM,
    }
)
_DT_HASH, _DT_STRTAB, _DT_SYMTAB, _DT_STRSZ, _DT_SYMENT = 4, 5, 6, 10, 11
_DT_GNU_HASH, _DT_VERSYM, _DT_VERDEF, _DT_VERNEED = 0x6FFFFEF5, 0x6FFFFFF0, 0x6FFFFFFC, 0x6FFFFFFE
_DYNSTR = -1  # sh_link of a table found from the dynamic segment: its string table
_MAX_VERSIONS = 256 * 1024  # bytes read of a version table, whose size no entry gives
_BLOCK = 64 * 1024  # bytes of headers (or hash entries) read at once
_BAD = (OSError, struct.error, ValueError, IndexError, OverflowError)
_ODD = bytes(i & 1 for i in range(256))


class _Refused(ValueError):
    """The file is ELF but breaks the format or one of this module's limits."""


class _Elf:
    """An open ELF file's class, byte order, section header table (where, how many) and,
    from its program headers, the loaded segments and where its dynamic table lies."""

    __slots__ = (
        "_table",
        "_view",
        "data",
        "dynamic",
        "f",
        "klass",
        "loads",
        "order",
        "section",
        "shnum",
        "shoff",
        "shstrndx",
        "size",
    )

    def __init__(self, f: BinaryIO, size: int, klass: int, order: str) -> None:
        self.f, self.size, self.klass, self.order = f, size, klass, order
        self.section = struct.Struct(order + _SECTION[klass])
        self.shoff, self.shnum, self.shstrndx = 0, 0, 0
        self.loads: tuple[tuple[int, int, int], ...] = ()  # PT_LOAD: vaddr, filesz, offset
        self.data: tuple[tuple[int, int, int], ...] = ()  # the PT_LOADs not executable
        self.dynamic: int | None = None  # PT_DYNAMIC's address, None without one
        self._table: tuple[list[tuple[int, int]], int | None] | None = None
        self._view: dict[int, tuple[int, ...] | None] | None = None

    @classmethod
    def parse(cls, f: BinaryIO) -> _Elf | None:
        """The file's ELF facts; None when it is not ELF."""
        size = os.fstat(f.fileno()).st_size
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != _MAGIC:
            return None
        if ident[4] not in (1, 2) or ident[5] not in (1, 2):
            return None
        klass = ident[4]
        order = "<" if ident[5] == 1 else ">"
        header = struct.Struct(order + _HEADER[klass])
        fields = header.unpack(_exact(f, size, header.size, 16))
        phoff, shoff, phentsize, phnum = fields[4], fields[5], fields[8], fields[9]
        shentsize, shnum, shstrndx = fields[10], fields[11], fields[12]
        elf = cls(f, size, klass, order)
        broken = ""
        if shoff:
            try:
                phnum = elf._sections(shoff, shentsize, shnum, shstrndx, phnum)
            except _Refused as exc:  # the loader never reads them: the segments may do
                elf.shoff, elf.shnum, elf.shstrndx, broken = 0, 0, 0, str(exc)
        if phoff and phnum:
            elf._segments(phoff, phentsize, phnum)
        if broken and not elf.loads:  # an object file: its sections are all there is
            raise _Refused(broken)
        return elf

    def _sections(self, shoff: int, shentsize: int, shnum: int, shstrndx: int, phnum: int) -> int:
        """Take the section header table at ``shoff``; the number of program headers
        (from section 0 under extended numbering). :class:`_Refused` where the table breaks
        the format or :data:`MAX_SECTIONS`."""
        self.shoff, self.shnum = shoff, 1  # section 0, for extended numbering
        if shentsize != self.section.size:  # the gABI's size; anything else is not a linker's
            raise _Refused(f"section headers of {shentsize} bytes, not {self.section.size}")
        first = self.header(0) if shnum == 0 or _XNUM in (shstrndx, phnum) else None
        if first is not None:  # extended numbering: the counts are in section 0
            shnum = shnum or first[_SH_SIZE]
            shstrndx = first[_SH_LINK] if shstrndx == _XNUM else shstrndx
            phnum = first[_SH_INFO] if phnum == _XNUM else phnum
        if shnum > MAX_SECTIONS:
            raise _Refused(f"{shnum} sections; the index reads at most {MAX_SECTIONS}")
        _exact(self.f, self.size, 0, shoff + shnum * self.section.size)  # all of it is there
        self.shnum, self.shstrndx = shnum, shstrndx
        return phnum

    def _segments(self, phoff: int, phentsize: int, phnum: int) -> None:
        """The PT_LOAD segments (and those of them not executable: :attr:`data`) and the
        (last, as ``ld.so`` takes it) PT_DYNAMIC."""
        program = struct.Struct(self.order + _PROGRAM[self.klass])
        if phentsize != program.size:
            raise _Refused(f"program headers of {phentsize} bytes, not {program.size}")
        if phnum > MAX_SEGMENTS:
            raise _Refused(f"{phnum} program headers; the index reads at most {MAX_SEGMENTS}")
        kind, offset, vaddr, filesz = _PH_FIELDS[self.klass]
        loads, data = [], []
        for ph in program.iter_unpack(_exact(self.f, self.size, phnum * program.size, phoff)):
            if ph[kind] == _PT_LOAD:
                loads.append((ph[vaddr], ph[filesz], ph[offset]))
                if not ph[_PH_FLAGS[self.klass]] & _PF_X:
                    data.append(loads[-1])
            elif ph[kind] == _PT_DYNAMIC:
                self.dynamic = ph[vaddr]
        self.loads, self.data = tuple(loads), tuple(data)

    def at(self, vaddr: int, length: int, what: str) -> tuple[int, int]:
        """The file offset of ``length`` bytes at address ``vaddr`` and the bytes of its
        segment from there: :class:`_Refused` unless a PT_LOAD segment holds them all."""
        for start, filesz, offset in self.loads:
            if start <= vaddr and vaddr + length <= start + filesz:
                room = start + filesz - vaddr
                _exact(self.f, self.size, 0, offset + (vaddr - start) + room)
                return offset + (vaddr - start), room
        raise _Refused(f"{what} at {vaddr:#x} lies in no loaded segment of the file")

    def header(self, index: int) -> tuple[int, ...]:
        """Section header ``index``."""
        if not 0 <= index < self.shnum:
            raise _Refused(f"section {index} of {self.shnum}")
        at = self.shoff + index * self.section.size
        return self.section.unpack(_exact(self.f, self.size, self.section.size, at))

    def headers(self) -> Iterator[tuple[int, ...]]:
        """Every section header in order, read a block at a time and not kept."""
        per_block = max(1, _BLOCK // self.section.size)
        for first in range(0, self.shnum, per_block):
            count = min(per_block, self.shnum - first)
            at = self.shoff + first * self.section.size
            yield from self.section.iter_unpack(
                _exact(self.f, self.size, count * self.section.size, at)
            )

    def find(self, kinds: tuple[int, ...]) -> dict[int, tuple[int, ...]]:
        """The header of each section type in ``kinds`` the file has: the dynamic linker's
        tables (:data:`_DYNAMIC_KINDS`) from the dynamic segment when there is one, as
        ``ld.so`` reads them (its section headers may be stripped or lie), else the first
        section of the type."""
        found: dict[int, tuple[int, ...]] = {}
        if self.dynamic is not None and _DYNAMIC_KINDS.intersection(kinds):
            view = self.view()
            found = {k: sh for k in kinds if k in _DYNAMIC_KINDS and (sh := view.get(k))}
            kinds = tuple(k for k in kinds if k not in _DYNAMIC_KINDS)
        if kinds:
            for sh in self.headers():
                if sh[_SH_TYPE] in kinds and sh[_SH_TYPE] not in found:
                    found[sh[_SH_TYPE]] = sh
        return found

    def first(self, kind: int) -> tuple[int, ...] | None:
        """The header of the section of type ``kind`` (as :meth:`find`), None without one."""
        return self.find((kind,)).get(kind)

    def linked(self, sh: tuple[int, ...]) -> tuple[int, ...]:
        """The header of the string table (or symbol table) section ``sh`` links to."""
        if sh[_SH_LINK] == _DYNSTR:
            strings = self.entries()[1]
            if strings is None:
                raise _Refused("names in the dynamic segment without DT_STRTAB")
            return strings
        return self.header(sh[_SH_LINK])

    def read(self, sh: tuple[int, ...]) -> bytes:
        """The bytes of the section with header ``sh``."""
        return _exact(self.f, self.size, sh[_SH_SIZE], sh[_SH_OFFSET])

    def entries(self) -> tuple[list[tuple[int, int]], tuple[int, ...] | None]:
        """The dynamic table's (tag, value) entries before its ``DT_NULL`` and the header
        of its string table (None without one): from the dynamic segment, else from the
        first dynamic section; at most :data:`MAX_DYNAMIC` entries are read."""
        if self._table is None:
            self._table = self._read_table()
        entries, link = self._table
        if self.dynamic is not None:
            return entries, _strings(self, dict(entries))
        return entries, None if link is None else self.header(link)

    def _read_table(self) -> tuple[list[tuple[int, int]], int | None]:
        entry = struct.Struct(self.order + _DYN[self.klass])
        link = None
        if self.dynamic is not None:
            at, room = self.at(self.dynamic, entry.size, "PT_DYNAMIC")
            count = room // entry.size  # past its segment's file bytes memory is zeros: DT_NULL
        else:
            sh = self.first(_SHT_DYNAMIC)
            if sh is None:
                return [], None
            at, count, link = sh[_SH_OFFSET], sh[_SH_SIZE] // entry.size, sh[_SH_LINK]
            _exact(self.f, self.size, 0, at + sh[_SH_SIZE])  # the section lies in the file
        table = _exact(self.f, self.size, min(count, MAX_DYNAMIC) * entry.size, at)
        entries = []
        for tag, value in entry.iter_unpack(table):
            if tag == 0:  # DT_NULL ends the table
                break
            entries.append((tag, value))
        else:
            if count > MAX_DYNAMIC:
                raise _Refused(
                    f"no DT_NULL in {MAX_DYNAMIC} dynamic entries, the most the index reads"
                )
        return entries, link

    def view(self) -> dict[int, tuple[int, ...] | None]:
        """The dynamic linker's tables found from the dynamic segment, by section type."""
        if self._view is None:
            if self._table is None:
                self._table = self._read_table()
            self._view = _view(self, dict(self._table[0]))  # the last of a tag counts, as in ld.so
        return self._view


def _view(elf: _Elf, tags: dict[int, int]) -> dict[int, tuple[int, ...] | None]:
    """Section headers for the tables the dynamic table ``tags`` names, each checked to lie
    in a PT_LOAD segment: the names (``DT_STRTAB``, ``DT_STRSZ`` bytes), the symbols
    (``DT_SYMTAB``, counted by the hash table), the hash tables and the version tables."""

    def header(kind: int, offset: int, size: int, entsize: int = 0) -> tuple[int, ...]:
        return (0, kind, 0, 0, offset, size, _DYNSTR, 0, 0, entsize)

    view: dict[int, tuple[int, ...] | None] = {_SHT_STRTAB: _strings(elf, tags)}
    if _DT_SYMTAB not in tags:
        return view
    entsize = tags.get(_DT_SYMENT, _SYMBOL_SIZE[elf.klass])
    if entsize != _SYMBOL_SIZE[elf.klass]:
        raise _Refused(f"dynamic symbols of {entsize} bytes, not {_SYMBOL_SIZE[elf.klass]}")
    if _DT_HASH not in tags and _DT_GNU_HASH not in tags:
        raise _Refused("dynamic symbols without DT_HASH or DT_GNU_HASH to count them")
    if _DT_GNU_HASH in tags:  # what ld.so looks names up in when there are both
        count, view[_SHT_GNU_HASH] = _gnu_hash(elf, tags[_DT_GNU_HASH])
    if _DT_HASH in tags:
        count, view[_SHT_HASH] = _hash(elf, tags[_DT_HASH])
    at = elf.at(tags[_DT_SYMTAB], count * entsize, "DT_SYMTAB")[0]
    view[_SHT_DYNSYM] = header(_SHT_DYNSYM, at, count * entsize, entsize)
    if _DT_VERSYM in tags:
        at = elf.at(tags[_DT_VERSYM], 2 * count, "DT_VERSYM")[0]
        view[_SHT_VERSYM] = header(_SHT_VERSYM, at, 2 * count)
    for tag, kind in ((_DT_VERDEF, _SHT_VERDEF), (_DT_VERNEED, _SHT_VERNEED)):
        if tag in tags:  # its chain is followed within its segment, at most _MAX_VERSIONS
            at, room = elf.at(tags[tag], 0, "a version table")
            view[kind] = header(kind, at, min(room, _MAX_VERSIONS))
    return view


def _strings(elf: _Elf, tags: dict[int, int]) -> tuple[int, ...] | None:
    """The header of the string table (``DT_STRTAB``, ``DT_STRSZ`` bytes), None without one."""
    if _DT_STRTAB not in tags:
        return None
    size = tags.get(_DT_STRSZ, 0)
    at = elf.at(tags[_DT_STRTAB], size, "DT_STRTAB")[0]
    return (0, _SHT_STRTAB, 0, 0, at, size, _DYNSTR, 0, 0, 0)


def _hash(elf: _Elf, vaddr: int) -> tuple[int, tuple[int, ...]]:
    """The number of dynamic symbols (``nchain``) and the header of the DT_HASH table."""
    at, room = elf.at(vaddr, 8, "DT_HASH")
    nbucket, nchain = struct.unpack(elf.order + "II", _exact(elf.f, elf.size, 8, at))
    _symbols_within(nchain)
    size = 8 + 4 * (nbucket + nchain)
    if size > room:
        raise _Refused("a DT_HASH table larger than its segment")
    return nchain, (0, _SHT_HASH, 0, 0, at, size, _DYNSTR, 0, 0, 4)


def _gnu_hash(elf: _Elf, vaddr: int) -> tuple[int, tuple[int, ...]]:
    """The number of dynamic symbols (one past the last of the chain of the highest
    bucket) and the header of the DT_GNU_HASH table, read a block at a time."""
    at, room = elf.at(vaddr, 16, "DT_GNU_HASH")
    nbuckets, symoffset, bloom_size, _ = struct.unpack(
        elf.order + "IIII", _exact(elf.f, elf.size, 16, at)
    )
    _symbols_within(nbuckets, "DT_GNU_HASH buckets")
    _symbols_within(symoffset)
    chains = 16 + bloom_size * (8 if elf.klass == 2 else 4) + 4 * nbuckets
    if chains > room:
        raise _Refused("a DT_GNU_HASH table larger than its segment")
    highest = 0
    for first in range(0, nbuckets, _BLOCK // 4):
        count = min(_BLOCK // 4, nbuckets - first)
        block = _exact(elf.f, elf.size, 4 * count, at + chains - 4 * (nbuckets - first))
        highest = max(highest, int(numpy.frombuffer(block, elf.order + "u4").max()))
    if highest < symoffset:  # no hashed symbol: those before symoffset are all there are
        return symoffset, (0, _SHT_GNU_HASH, 0, 0, at, chains, _DYNSTR, 0, 0, 4)
    # The chain of the highest bucket ends (its entry's low bit set) at the last symbol.
    end = chains + 4 * (highest - symoffset)
    low = 0 if elf.order == "<" else 3
    while True:
        _symbols_within(symoffset + (end - chains) // 4)
        if end + 4 > room:
            raise _Refused("a DT_GNU_HASH chain runs past its segment without an end")
        block = _exact(elf.f, elf.size, min(_BLOCK, (room - end) // 4 * 4), at + end)
        last = block[low::4].translate(_ODD).find(1)
        if last >= 0:
            end += 4 * last + 4
            count = symoffset + (end - chains) // 4
            _symbols_within(count)
            return count, (0, _SHT_GNU_HASH, 0, 0, at, end, _DYNSTR, 0, 0, 4)
        end += len(block)


def _symbols_within(count: int, what: str = "dynamic symbols") -> None:
    if count > MAX_SYMBOLS:
        raise _Refused(f"{count} {what}; the index reads at most {MAX_SYMBOLS}")


def _exact(f: BinaryIO, file_size: int, size: int, at: int) -> bytes:
    """``size`` bytes from ``at``; :class:`_Refused` unless all of them lie inside the
    file (of ``file_size`` bytes), so no number in a hostile file makes it read more than
    it has."""
    if at < 0 or size < 0 or at + size > file_size:
        raise _Refused("truncated ELF file: a section or table runs past its end")
    f.seek(at)
    return f.read(size)
