"""The symbols a shared library takes and gives, with their versions, as the dynamic linker
sees them, read from its ELF file without loading it: what it imports (undefined symbols
of global binding, each with the version and file its ``.gnu.version_r`` names) and the
versions it needs of each file (``GLIBCXX_3.4.30`` of ``libstdc++.so.6``); what it exports,
looked up by name through its ``.gnu.hash`` table as the dynamic linker does (so a framework
of 800 MB with half a million symbols costs a few reads per name, not a read of its names),
and the versions it defines (``.gnu.version_d``).

The tables (``DT_SYMTAB``, ``DT_GNU_HASH``, ``DT_VERSYM``, ``DT_VERNEED``, ``DT_VERDEF``) are
found as the dynamic linker finds them, through the program headers (:mod:`._elffile`), so
stripped or lying section headers change nothing; a file without PT_DYNAMIC is read through
its sections. Built on :mod:`._elffile`'s rules for files that may be hostile: every read
lies inside the file, chains of version entries are followed at most as many steps as their
table has room for, and no name is read past 64 KiB.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from opmarket.registry._elffile import (
    _BAD,
    _MAX_NAME,
    _SH_OFFSET,
    _SH_SIZE,
    _SHT_DYNSYM,
    _SHT_GNU_HASH,
    _SHT_VERDEF,
    _SHT_VERNEED,
    _SHT_VERSYM,
    _SYMBOL,
    _Elf,
    _exact,
    _Refused,
)

__all__ = ["Exports", "Imports", "Reference", "elf_kind", "read_imports"]

_STB_GLOBAL = 1
_EXPORTED_BINDINGS = (1, 2, 10)  # STB_GLOBAL, STB_WEAK, STB_GNU_UNIQUE
_VISIBLE = (0, 3)  # STV_DEFAULT, STV_PROTECTED
_VER_FLG_BASE, _VER_FLG_WEAK = 1, 2
_HIDDEN = 0x8000


@dataclass(frozen=True, slots=True)
class Reference:
    """An undefined symbol the library needs: its name, and the version (``GLIBC_2.34``)
    and file (``libc.so.6``) its version entry names, "" when it has none."""

    name: str
    version: str = ""
    file: str = ""


@dataclass(frozen=True, slots=True)
class Imports:
    """What a library takes from others: ``references`` (undefined symbols of global
    binding; weak ones may stay unresolved and are left out), ``needs`` (file -> the
    versions of it that must exist, weak ones left out), ``problem`` when it could not be
    read (then the rest is empty)."""

    references: tuple[Reference, ...] = ()
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    problem: str = ""


def elf_kind(path: Path) -> tuple[int, int] | None:
    """The ELF class (1: 32-bit, 2: 64-bit) and machine (``e_machine``) of the file, None
    when it is not ELF or cannot be read: the dynamic linker skips a library of another
    kind where it searches."""
    try:
        with open(path, "rb") as f:
            ident = f.read(20)
    except OSError:
        return None
    if len(ident) < 20 or ident[:4] != b"\x7fELF" or ident[5] not in (1, 2):
        return None
    (machine,) = struct.unpack_from("<H" if ident[5] == 1 else ">H", ident, 18)
    return ident[4], machine


def read_imports(path: Path) -> Imports:
    """The :class:`Imports` of the library at ``path``; empty for a file that is not ELF."""
    try:
        with open(path, "rb") as f:
            elf = _Elf.parse(f)
            return Imports() if elf is None else _imports(elf)
    except _BAD as exc:
        return Imports(problem=str(exc) or type(exc).__name__)


class Exports:
    """The symbols one library exports, looked up by name (:meth:`find`), and the version
    names it defines (:attr:`versions`). A file that cannot be read exports nothing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.versions: frozenset[str] = frozenset()
        self.versioned = False  # it has a .gnu.version table: references match by version
        self._names: dict[int, str] = {}  # version index -> name, for named versions
        self._all: dict[str, list[tuple[str, bool]]] | None = None  # without a .gnu.hash
        self._hash: tuple[int, int, int, int, bytes, bytes, bytes] | None = None
        self._sections: dict[int, tuple[int, ...]] = {}
        try:
            with open(path, "rb") as f:
                elf = _Elf.parse(f)
                if elf is not None:
                    self._index(elf)
        except _BAD:
            self._all = {}

    def _index(self, elf: _Elf) -> None:
        found = self._sections = elf.find((_SHT_DYNSYM, _SHT_GNU_HASH, _SHT_VERDEF, _SHT_VERSYM))
        if _SHT_VERDEF in found:
            self._names = _verdef(elf, found[_SHT_VERDEF])
            self.versions = frozenset(self._names.values())
        self.versioned = _SHT_VERSYM in found
        if _SHT_DYNSYM not in found:
            self._all = {}
        elif _SHT_GNU_HASH in found:
            self._hash_table(elf, found[_SHT_GNU_HASH])
        else:
            self._all = {}
            for index, name, _ in _symbols(elf, found[_SHT_DYNSYM], defined=True):
                self._all.setdefault(name, []).append(self._version(elf, index))

    def _hash_table(self, elf: _Elf, sh: tuple[int, ...]) -> None:
        data = elf.read(sh)
        nbuckets, symoffset, bloom_size, shift = struct.unpack_from(elf.order + "IIII", data)
        word = 8 if elf.klass == 2 else 4
        bloom_end = 16 + bloom_size * word
        buckets_end = bloom_end + 4 * nbuckets
        if nbuckets == 0 or bloom_size == 0 or buckets_end > len(data):
            raise _Refused("a .gnu.hash table larger than its section")
        self._hash = (
            nbuckets,
            symoffset,
            shift,
            word,
            data[16:bloom_end],
            data[bloom_end:buckets_end],
            data[buckets_end:],
        )

    def _version(self, elf: _Elf, index: int) -> tuple[str, bool]:
        """The version name ("" for none) and hidden flag of symbol ``index``."""
        sh = self._sections.get(_SHT_VERSYM)
        if sh is None or 2 * index + 2 > sh[_SH_SIZE]:
            return "", False
        raw = _exact(elf.f, elf.size, 2, sh[_SH_OFFSET] + 2 * index)
        (value,) = struct.unpack(elf.order + "H", raw)
        return self._names.get(value & 0x7FFF, ""), bool(value & _HIDDEN)

    def find(self, names: Iterable[str]) -> dict[str, list[tuple[str, bool]]]:
        """For each of ``names`` this library defines (and exports): its definitions, as
        (version name or "", hidden)."""
        wanted = list(names)
        if self._all is not None:
            return {n: self._all[n] for n in wanted if n in self._all}
        found: dict[str, list[tuple[str, bool]]] = {}
        try:
            with open(self.path, "rb") as f:
                elf = _Elf.parse(f)
                if elf is None:
                    return {}
                for name in wanted:
                    definitions = self._lookup(elf, name)
                    if definitions:
                        found[name] = definitions
        except _BAD:
            return found
        return found

    def _lookup(self, elf: _Elf, name: str) -> list[tuple[str, bool]]:
        assert self._hash is not None
        nbuckets, symoffset, shift, word, bloom, buckets, chains = self._hash
        encoded = name.encode()
        h = 5381
        for byte in encoded:
            h = (h * 33 + byte) & 0xFFFFFFFF
        bits = word * 8
        at = (h // bits) % (len(bloom) // word)
        (mask,) = struct.unpack_from(elf.order + ("Q" if word == 8 else "I"), bloom, at * word)
        if not (mask >> (h % bits)) & 1 or not (mask >> ((h >> shift) % bits)) & 1:
            return []
        (index,) = struct.unpack_from(elf.order + "I", buckets, 4 * (h % nbuckets))
        if index < symoffset:
            return []
        found: list[tuple[str, bool]] = []
        dynsym = self._sections[_SHT_DYNSYM]
        symbol_format, (name_at, info_at, other_at, shndx_at) = _SYMBOL[elf.klass]
        symbol = struct.Struct(elf.order + symbol_format)
        strings = elf.linked(dynsym)
        while 4 * (index - symoffset) + 4 <= len(chains):
            (chained,) = struct.unpack_from(elf.order + "I", chains, 4 * (index - symoffset))
            if chained | 1 == h | 1:
                at_entry = dynsym[_SH_OFFSET] + index * symbol.size
                entry = symbol.unpack(_exact(elf.f, elf.size, symbol.size, at_entry))
                if (
                    entry[shndx_at] != 0
                    and entry[info_at] >> 4 in _EXPORTED_BINDINGS
                    and entry[other_at] & 3 in _VISIBLE
                    and entry[name_at] + len(encoded) < strings[_SH_SIZE]
                    and _exact(
                        elf.f,
                        elf.size,
                        len(encoded) + 1,
                        strings[_SH_OFFSET] + entry[name_at],
                    )
                    == encoded + b"\0"
                ):
                    found.append(self._version(elf, index))
            if chained & 1:
                break
            index += 1
        return found


def _symbols(elf: _Elf, sh: tuple[int, ...], *, defined: bool) -> Iterable[tuple[int, str, int]]:
    """(index, name, binding) of each dynamic symbol that is defined and exported
    (``defined``) or undefined, of global or weak binding."""
    symbol_format, (name_at, info_at, other_at, shndx_at) = _SYMBOL[elf.klass]
    symbol = struct.Struct(elf.order + symbol_format)
    strings = elf.read(elf.linked(sh))
    table = elf.read(sh)
    budget = 4 * len(strings) + _MAX_NAME  # names overlapping past any linker's are refused
    seen: dict[int, str] = {}
    for index in range(1, len(table) // symbol.size):
        entry = symbol.unpack_from(table, index * symbol.size)
        binding = entry[info_at] >> 4
        if (entry[shndx_at] != 0) != defined or binding not in _EXPORTED_BINDINGS:
            continue
        if defined and entry[other_at] & 3 not in _VISIBLE:
            continue
        start = entry[name_at]
        name = seen.get(start)
        if name is None:
            end = strings.index(b"\0", start, start + _MAX_NAME)
            budget -= end - start + 1
            if budget < 0:
                raise _Refused("symbol names overlap past any linker's")
            name = seen[start] = strings[start:end].decode("utf-8", "replace")
        if name:
            yield index, name, binding


def _string(strings: bytes, offset: int) -> str:
    end = strings.index(b"\0", offset, offset + _MAX_NAME)
    return strings[offset:end].decode("utf-8", "replace")


def _verdef(elf: _Elf, sh: tuple[int, ...]) -> dict[int, str]:
    """Version index -> name of each version the library defines, the base (its soname)
    left out."""
    data = elf.read(sh)
    strings = elf.read(elf.linked(sh))
    names: dict[int, str] = {}
    at = 0
    for _ in range(len(data) // 20):
        _, flags, index, count, _, aux, following = struct.unpack_from(
            elf.order + "HHHHIII", data, at
        )
        if count and not flags & _VER_FLG_BASE:
            (name,) = struct.unpack_from(elf.order + "I", data, at + aux)
            names[index] = _string(strings, name)
        if following == 0:
            break
        at += following
    return names


def _imports(elf: _Elf) -> Imports:
    found = elf.find((_SHT_DYNSYM, _SHT_VERNEED, _SHT_VERSYM))
    versions: dict[int, tuple[str, str]] = {}  # version index -> (file, version)
    needs: dict[str, tuple[str, ...]] = {}
    if _SHT_VERNEED in found:
        versions, needs = _verneed(elf, found[_SHT_VERNEED])
    if _SHT_DYNSYM not in found:
        return Imports(needs=needs)
    versym = elf.read(found[_SHT_VERSYM]) if _SHT_VERSYM in found else b""
    references: list[Reference] = []
    for index, name, binding in _symbols(elf, found[_SHT_DYNSYM], defined=False):
        if binding != _STB_GLOBAL:
            continue
        version, file = "", ""
        if 2 * index + 2 <= len(versym):
            (value,) = struct.unpack_from(elf.order + "H", versym, 2 * index)
            file, version = versions.get(value & 0x7FFF, ("", ""))
        references.append(Reference(name, version, file))
    return Imports(tuple(references), needs)


def _verneed(
    elf: _Elf, sh: tuple[int, ...]
) -> tuple[dict[int, tuple[str, str]], dict[str, tuple[str, ...]]]:
    """Version index -> (file, version) of every version the library needs, and file ->
    the versions it must have (weak ones left out)."""
    data = elf.read(sh)
    strings = elf.read(elf.linked(sh))
    versions: dict[int, tuple[str, str]] = {}
    needs: dict[str, list[str]] = {}
    at, steps = 0, len(data) // 16
    while steps > 0:
        _, count, file_at, aux, following = struct.unpack_from(elf.order + "HHIII", data, at)
        file = _string(strings, file_at)
        entry = at + aux
        for _ in range(min(count, steps)):
            steps -= 1
            _, flags, index, name_at, next_aux = struct.unpack_from(
                elf.order + "IHHII", data, entry
            )
            version = _string(strings, name_at)
            versions[index & 0x7FFF] = (file, version)
            if not flags & _VER_FLG_WEAK:
                needs.setdefault(file, []).append(version)
            if next_aux == 0:
                break
            entry += next_aux
        steps -= 1
        if following == 0:
            break
        at += following
    return versions, {file: tuple(v) for file, v in needs.items()}
