"""What a CUDA shared library carries, read from its ELF file without a GPU toolkit: the
libraries it needs (``DT_NEEDED``), its run paths, and the device code in its fat binaries:
SASS for which ``sm_XY``, PTX for which ``compute_XY``.

The fat binary container (as nvcc writes it, one per translation unit, concatenated in the
``.nv_fatbin`` section): a 16-byte header (magic ``0xBA55ED50``, version 1, header size, then
the size of the entries that follow), then entries, each a header (kind 1 = PTX, 2 =
ELF/SASS; its own size at offset 4, the payload size at offset 8, the architecture's number,
``80`` for sm_80, at offset 28) followed by its payload. Only those fields are read; payloads
are neither decompressed nor parsed. The index's validation asks ``cuobjdump`` the same
question and compares; doctor uses this reader, so a user's machine needs no toolkit.

The CUDA runtime never looks at sections: the library's constructor registers each fatbin
(``__cudaRegisterFatBinary``) by a pointer into the loaded image, whichever segment holds
it. So the fatbins are found as they are loaded: by their magic in the file bytes of every
PT_LOAD segment, executable ones included (a linker without ``-z separate-code``, as
binutils before 2.31, puts ``.rodata`` and ``.nv_fatbin`` in the code segment). Where the
sections agree with the segments (every loaded one, ``SHF_ALLOC`` with file bytes, lies in
a PT_LOAD segment at the address its header gives) the ``.nv_fatbin`` section is read as
``cuobjdump`` reads it and its bytes are not searched again; the rest of the loaded bytes
are searched all the same, so a fatbin in a section of another name is found, but for
``__nv_relfatbin``: relocatable device code (``-rdc``) kept for a later device link, which
the runtime never registers (stripped of its section headers, a library's relocatable code
can no longer be told apart, and counts). Section
headers that are stripped (``sstrip``, a zeroed ``e_shoff``), lie, or cannot be read at
all (the wrong entry size, a table past the file's end, more than :data:`MAX_SECTIONS
<opmarket.registry._elffile.MAX_SECTIONS>`) are not used; a library with segments is then
read from them alone, as the loader reads it. A file without segments (an object file) is
read through its section. A magic counts only where a whole container follows: version 1,
a 16-byte header, a size within its segment, and entries of at least 32 bytes that fill it
exactly; any other is passed over. A found container is skipped whole, so its bytes are
not searched. The search is bounded: at most :data:`MAX_SCANNED` bytes searched,
:data:`MAX_FATBINS` containers, :data:`MAX_ENTRIES` entries read and :data:`MAX_STRAYS`
magics passed over; past a limit the library is not read (:attr:`DeviceCode.problem` says
why). Where each container lies is kept (:attr:`DeviceCode.fatbins`), so the index can
hand ``cuobjdump`` the fatbins of a library it cannot read itself.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from opmarket.registry._elf import _named_headers, read_library
from opmarket.registry._elffile import (
    _BAD,
    _SH_OFFSET,
    _SH_SIZE,
    _SH_TYPE,
    _Elf,
    _exact,
    _Refused,
)

__all__ = [
    "MAX_ENTRIES",
    "MAX_FATBINS",
    "MAX_SCANNED",
    "MAX_STRAYS",
    "DeviceCode",
    "EntryBudget",
    "arch_key",
    "read_device_code",
]

#: The most bytes of loaded data searched for fatbins (those of the fatbins found aside).
MAX_SCANNED = 1 << 30
#: The most fatbin containers found by the scan; nvcc writes one per translation unit.
MAX_FATBINS = 65_536
#: The most fatbin entries read by the scan (one per architecture and kind of a container).
MAX_ENTRIES = 1 << 20
#: The most magics the scan passes over that begin no whole container.
MAX_STRAYS = 1_024

_FATBIN_MAGIC = 0xBA55ED50
_RELOCATABLE = "__nv_relfatbin"
_MAGIC = struct.pack("<I", _FATBIN_MAGIC)
_KIND_PTX, _KIND_ELF = 1, 2
_SH_FLAGS, _SH_ADDR = 2, 3  # where in a section header's tuple its flags and address are
_SHF_ALLOC, _SHT_NOBITS = 2, 8
_MAX_PAIRS = 1 << 20  # sections times segments matched; past it the segments are searched
_ENTRY = 32  # the bytes of an entry header read: up to its architecture
_HEADER = struct.Struct("<IHHQ")  # a container's: magic, version, header size, size


@dataclass(frozen=True, slots=True)
class DeviceCode:
    """A shared library's CUDA facts: ``sass`` (``sm_80``...) and ``ptx`` (``compute_75``...)
    sorted by architecture (:func:`arch_key`), ``needed`` its DT_NEEDED names, ``runpath``
    its run paths. Read here from the ELF file, or by the index from ``cuobjdump``'s
    listing (which leaves ``needed`` and ``runpath`` empty). ``problem``: why an ELF file
    was not read (then all else is empty), "" when it was; ``fatbins``: where the fatbin
    containers read lie in the file (offset, size), in file order. Equality ignores both."""

    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    needed: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()
    problem: str = field(default="", compare=False)
    fatbins: tuple[tuple[int, int], ...] = field(default=(), compare=False, repr=False)

    @property
    def cuda_runtime(self) -> int | None:
        """The CUDA runtime major it links shared (``libcudart.so.13`` -> 13), or None."""
        for name in self.needed:
            if name.startswith("libcudart.so."):
                major = name.removeprefix("libcudart.so.").partition(".")[0]
                if major.isdigit():
                    return int(major)
        return None

    @property
    def has_device_code(self) -> bool:
        """Whether it carries any SASS or PTX."""
        return bool(self.sass or self.ptx)


def arch_key(name: str) -> tuple[int, str]:
    """The sort key of an architecture name: by its number (``sm_80`` before ``sm_100a``)."""
    digits = "".join(ch for ch in name.partition("_")[2] if ch.isdigit())
    return (int(digits or 0), name)


class EntryBudget:
    """Fatbin entries left to read, shared by every read it is given to: each read makes its
    own of :data:`MAX_ENTRIES` by default; the index gives one to all of a wheel's
    libraries, which it reads in its own process (so a wheel of many libraries dense with
    entries costs one library's worth of CPU, not one per library)."""

    def __init__(self, entries: int | None = None, where: str = "") -> None:
        self.total = MAX_ENTRIES if entries is None else entries
        self.left, self.where = self.total, where

    def take(self, where: str) -> None:
        """Count one entry read; past the budget the read is refused."""
        self.left -= 1
        if self.left < 0:
            raise _Refused(f"more than {self.total} fatbin entries {self.where or where}")


def read_device_code(path: Path, budget: EntryBudget | None = None) -> DeviceCode:
    """The CUDA facts of the ELF shared library at ``path`` (read by :mod:`._elf`); an
    empty DeviceCode for a file that is not ELF, is truncated or cannot be read, or breaks
    a limit (then with its ``problem``). ``budget``: the entries it may read (shared with
    other reads given the same one), :data:`MAX_ENTRIES` of its own by default."""
    budget = EntryBudget() if budget is None else budget
    library = read_library(path)
    if library.problem:
        return DeviceCode(problem=library.problem)
    sass: set[str] = set()
    ptx: set[str] = set()
    found: list[tuple[int, int]] = []
    try:
        with open(path, "rb") as f:
            elf = _Elf.parse(f)
            if elf is not None:
                _collect(elf, sass, ptx, found, budget)
    except _BAD as exc:
        return DeviceCode(problem=str(exc) or type(exc).__name__)
    return DeviceCode(
        tuple(sorted(sass, key=arch_key)),
        tuple(sorted(ptx, key=arch_key)),
        library.needed,
        library.runpath,
        fatbins=tuple(sorted(found)),
    )


def _collect(
    elf: _Elf,
    sass: set[str],
    ptx: set[str],
    found: list[tuple[int, int]],
    budget: EntryBudget,
) -> None:
    """Collect the architectures (and the places, into ``found``) of the fatbins the
    runtime would find in ``elf``: those of its ``.nv_fatbin`` section when its sections
    agree with its segments, and those of the rest of its loaded bytes."""
    if not elf.loads:  # an object file: sections are all there is
        section = _named_headers(elf, (".nv_fatbin",)).get(".nv_fatbin")
        if section is not None:
            _section(elf, section, sass, ptx, found, budget=budget)
        return
    try:
        named = _named_headers(elf, (".nv_fatbin", _RELOCATABLE))
        section = named.get(".nv_fatbin")
        trusted = section is not None and _covered(elf) is not None
    except _BAD:  # section names past the file, say: the loader never reads them
        named, section, trusted = {}, None, False
    skip: list[list[int]] = []
    if trusted and section is not None:
        _section(elf, section, sass, ptx, found, budget=budget)
        # __nv_relfatbin holds relocatable device code (-rdc) for a later device link:
        # the runtime never registers it, and cuobjdump does not list it as the library's.
        skip = _merged([(sh[_SH_OFFSET], sh[_SH_OFFSET] + sh[_SH_SIZE]) for sh in named.values()])
    _scan(elf, sass, ptx, skip, found, budget=budget)


def _section(
    elf: _Elf,
    section: tuple[int, ...],
    sass: set[str],
    ptx: set[str],
    found: list[tuple[int, int]],
    *,
    budget: EntryBudget,
) -> None:
    """Collect the architectures (and places) of the fatbins of ``section`` (the
    ``.nv_fatbin``), searched through a read-only map of the file, not read into memory: the
    index reads an upload's libraries in its own process, and a section may be most of a
    1 GiB file."""
    at, size = section[_SH_OFFSET], section[_SH_SIZE]
    _exact(elf.f, elf.size, 0, at + size)  # the whole section lies in the file
    if size:
        with mmap.mmap(elf.f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            _fatbins(view, sass, ptx, found, begin=at, end=at + size, budget=budget)


def _covered(elf: _Elf) -> list[list[int]] | None:
    """The file ranges of the loaded sections, merged; None when the file has no section
    headers or a loaded section does not lie in a PT_LOAD segment at its address, or it has
    more sections times segments to match than :data:`_MAX_PAIRS` (a linker's has hundreds)."""
    if elf.shnum == 0 or elf.shnum * len(elf.loads) > _MAX_PAIRS:
        return None
    ranges = []
    for sh in elf.headers():
        at, size, vaddr = sh[_SH_OFFSET], sh[_SH_SIZE], sh[_SH_ADDR]
        if not sh[_SH_FLAGS] & _SHF_ALLOC or sh[_SH_TYPE] == _SHT_NOBITS or not size:
            continue
        if not any(
            offset <= at and at + size <= offset + filesz and vaddr - start == at - offset
            for start, filesz, offset in elf.loads
        ):
            return None
        ranges.append((at, at + size))
    return _merged(ranges)


def _merged(ranges: list[tuple[int, int]]) -> list[list[int]]:
    """``ranges`` (start, end) sorted, those that overlap or touch made one."""
    merged: list[list[int]] = []
    for start, end in sorted(ranges):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    return merged


def _scan(
    elf: _Elf,
    sass: set[str],
    ptx: set[str],
    skip: list[list[int]],
    found: list[tuple[int, int]],
    *,
    budget: EntryBudget,
) -> None:
    """Collect the architectures (and places) of the fatbins in the file bytes of the
    PT_LOAD segments, but those in ``skip`` (merged ranges), each byte searched once
    however the segments overlap."""
    for _, filesz, offset in elf.loads:
        _exact(elf.f, elf.size, 0, offset + filesz)  # the segment lies in the file
    ranges, index = [], 0
    for begin, end in _merged([(offset, offset + filesz) for _, filesz, offset in elf.loads]):
        at = begin  # both lists are sorted and merged: one sweep over skip in all
        while index < len(skip) and skip[index][0] < end:
            low, high = skip[index]
            if low > at:
                ranges.append((at, low))
            at = max(at, high)
            if high > end:
                break
            index += 1
        if at < end:
            ranges.append((at, end))
    if ranges:
        with mmap.mmap(elf.f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            scan = _Scan(view, sass, ptx, found, budget)
            for start, end in ranges:
                scan.search(start, end)


class _Scan:
    """A search of a file's bytes for fatbins, its counts held against the limits."""

    def __init__(
        self,
        view: mmap.mmap,
        sass: set[str],
        ptx: set[str],
        found: list[tuple[int, int]],
        budget: EntryBudget,
    ) -> None:
        self.view, self.sass, self.ptx, self.found = view, sass, ptx, found
        self.budget = budget
        self.scanned = self.fatbins = self.strays = 0

    def search(self, at: int, end: int) -> None:
        """Collect the fatbins from ``at`` to ``end``, each found one skipped whole."""
        while at < end:
            stop = min(end, at + MAX_SCANNED - self.scanned + len(_MAGIC) - 1)
            found = self.view.find(_MAGIC, at, stop)
            self.scanned += (stop if found < 0 else found) - at
            if found < 0:
                if stop < end:
                    raise _Refused(f"more than {MAX_SCANNED} bytes to search for fatbins")
                return
            size = self.container(found, end)
            if size:
                self.fatbins += 1
                if self.fatbins > MAX_FATBINS:
                    raise _Refused(f"more than {MAX_FATBINS} fatbins in its segments")
                self.found.append((found, size))
                at = found + size
            else:
                self.strays += 1
                if self.strays > MAX_STRAYS:
                    raise _Refused(f"more than {MAX_STRAYS} fatbin magics that begin no fatbin")
                at = found + 1

    def container(self, at: int, end: int) -> int:
        """The size of the whole fatbin container at ``at``, its architectures collected;
        0 if none is there: a header other than version 1 of 16 bytes, a size past
        ``end``, or entries that do not fill it exactly."""
        if at + 16 > end:
            return 0
        _, version, header_size, fat_size = _HEADER.unpack_from(self.view, at)
        last: int = at + 16 + fat_size
        if version != 1 or header_size != 16 or fat_size < _ENTRY or last > end:
            return 0
        found: list[tuple[int, int]] = []
        entry = at + 16
        while entry < last:
            self.budget.take("in its segments")
            if entry + _ENTRY > last:
                return 0
            kind, _, entry_size, payload = struct.unpack_from("<HHIQ", self.view, entry)
            if entry_size < _ENTRY or entry + entry_size + payload > last:
                return 0
            found.append((kind, struct.unpack_from("<I", self.view, entry + 28)[0]))
            entry += entry_size + payload
        for kind, arch in found:
            if kind == _KIND_ELF:
                self.sass.add(f"sm_{arch}")
            elif kind == _KIND_PTX:
                self.ptx.add(f"compute_{arch}")
        return last - at


def _fatbins(
    data: bytes | mmap.mmap,
    sass: set[str],
    ptx: set[str],
    found: list[tuple[int, int]] | None = None,
    *,
    begin: int = 0,
    end: int | None = None,
    budget: EntryBudget | None = None,
) -> None:
    """Collect the architectures of every entry of every container in ``data`` from
    ``begin`` to ``end`` (its end by default: a ``.nv_fatbin`` section the segments agree
    with, or the map of its file; the places of its containers, offsets in ``data``, into
    ``found``), within the scan's limits: the magic is found by ``find``, not 8 bytes at a
    time in Python, and at most :data:`MAX_FATBINS` containers, :data:`MAX_ENTRIES` entries
    and :data:`MAX_STRAYS` unaligned magics are read, so a hostile section costs
    milliseconds, not minutes."""
    limit = len(data) if end is None else end
    budget = EntryBudget() if budget is None else budget
    start, fatbins, strays = begin, 0, 0
    while (start := data.find(_MAGIC, start, limit)) >= 0 and start + 16 <= limit:
        if (start - begin) % 8:  # containers are 8-byte aligned: a magic elsewhere is data
            strays += 1
            if strays > MAX_STRAYS:
                raise _Refused(f"more than {MAX_STRAYS} fatbin magics that begin no fatbin")
            start += 1
            continue
        fatbins += 1
        if fatbins > MAX_FATBINS:
            raise _Refused(f"more than {MAX_FATBINS} fatbins in its .nv_fatbin section")
        _magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, start)
        entry, last = start + header_size, start + header_size + fat_size
        if found is not None:
            found.append((start, min(last, limit) - start))
        while entry + 32 <= min(last, limit):
            budget.take("in its .nv_fatbin section")
            kind, _, entry_size, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if kind == _KIND_ELF:
                sass.add(f"sm_{arch}")
            elif kind == _KIND_PTX:
                ptx.add(f"compute_{arch}")
            if entry_size == 0:
                break
            entry += entry_size + payload
        start = max(last, start + 16)
