"""What a CUDA shared library carries, read from its ELF file without a GPU toolkit: the
libraries it needs (``DT_NEEDED``), its run paths, and the device code in its fat binaries
(``.nv_fatbin``): SASS for which ``sm_XY``, PTX for which ``compute_XY``.

The fat binary container (as nvcc writes it, one per translation unit, concatenated in the
section): a 16-byte header (magic ``0xBA55ED50``, version 1, header size, then the size of
the entries that follow), then entries, each a header (kind 1 = PTX, 2 = ELF/SASS; its own
size at offset 4, the payload size at offset 8, the architecture's number, ``80`` for
sm_80, at offset 28) followed by its payload. Only those fields are read; payloads are
neither decompressed nor parsed. The index's validation asks ``cuobjdump`` the same
question and compares; doctor uses this reader, so a user's machine needs no toolkit.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

__all__ = ["DeviceCode", "read_device_code"]

_ELF_MAGIC = b"\x7fELF"
_FATBIN_MAGIC = 0xBA55ED50
_SHT_DYNAMIC = 6
_DT_NEEDED, _DT_RPATH, _DT_RUNPATH = 1, 15, 29
_KIND_PTX, _KIND_ELF = 1, 2


@dataclass(frozen=True, slots=True)
class DeviceCode:
    """A shared library's CUDA facts: ``sass`` (``sm_80``...) and ``ptx`` (``compute_75``...)
    sorted by architecture, ``needed`` its DT_NEEDED names, ``runpath`` its run paths."""

    sass: tuple[str, ...] = ()
    ptx: tuple[str, ...] = ()
    needed: tuple[str, ...] = ()
    runpath: tuple[str, ...] = ()

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


def _arch_key(name: str) -> tuple[int, str]:
    digits = "".join(ch for ch in name.partition("_")[2] if ch.isdigit())
    return (int(digits or 0), name)


def read_device_code(path: Path) -> DeviceCode:
    """The CUDA facts of the ELF shared library at ``path``; an empty DeviceCode for a file
    that is not a 64-bit little-endian ELF, is truncated or cannot be read."""
    try:
        with open(path, "rb") as f:
            return _read(f)
    except (OSError, struct.error, ValueError, IndexError):
        return DeviceCode()


def _read(f: BinaryIO) -> DeviceCode:
    ident = f.read(16)
    if len(ident) < 16 or ident[:4] != _ELF_MAGIC or ident[4] != 2 or ident[5] != 1:
        return DeviceCode()  # CUDA libraries are 64-bit little-endian
    header = struct.unpack("<HHIQQQIHHHHHH", _exact(f, 48))
    shoff, shentsize, shnum, shstrndx = header[5], header[10], header[11], header[12]
    if shoff == 0 or shentsize < 64:
        return DeviceCode()
    f.seek(shoff)
    table = _exact(f, shentsize * shnum)
    sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
    names_sh = sections[shstrndx]
    f.seek(names_sh[4])
    names = _exact(f, names_sh[5])
    sass: set[str] = set()
    ptx: set[str] = set()
    needed: list[str] = []
    runpath: list[str] = []
    for sh in sections:
        name = names[sh[0] : names.index(b"\0", sh[0])].decode("ascii", "replace")
        if name == ".nv_fatbin":
            f.seek(sh[4])
            _fatbins(_exact(f, sh[5]), sass, ptx)
        elif sh[1] == _SHT_DYNAMIC:
            f.seek(sh[4])
            dynamic = _exact(f, sh[5])
            strtab = sections[sh[6]]
            f.seek(strtab[4])
            strings = _exact(f, strtab[5])
            for offset in range(0, len(dynamic) - 15, 16):
                tag, value = struct.unpack_from("<qQ", dynamic, offset)
                if tag in (_DT_NEEDED, _DT_RPATH, _DT_RUNPATH):
                    text = strings[value : strings.index(b"\0", value)].decode("utf-8", "replace")
                    if tag == _DT_NEEDED:
                        needed.append(text)
                    else:
                        runpath.extend(p for p in text.split(":") if p)
    return DeviceCode(
        tuple(sorted(sass, key=_arch_key)),
        tuple(sorted(ptx, key=_arch_key)),
        tuple(needed),
        tuple(runpath),
    )


def _fatbins(data: bytes, sass: set[str], ptx: set[str]) -> None:
    """Collect the architectures of every entry of every container in ``data``."""
    start = 0
    while start + 16 <= len(data):
        magic, _version, header_size, fat_size = struct.unpack_from("<IHHQ", data, start)
        if magic != _FATBIN_MAGIC:
            start += 8  # containers are 8-byte aligned; skip padding
            continue
        entry, end = start + header_size, start + header_size + fat_size
        while entry + 32 <= min(end, len(data)):
            kind, _, entry_size, payload = struct.unpack_from("<HHIQ", data, entry)
            (arch,) = struct.unpack_from("<I", data, entry + 28)
            if kind == _KIND_ELF:
                sass.add(f"sm_{arch}")
            elif kind == _KIND_PTX:
                ptx.add(f"compute_{arch}")
            if entry_size == 0:
                break
            entry += entry_size + payload
        start = max(end, start + 16)


def _exact(f: BinaryIO, size: int) -> bytes:
    data = f.read(size)
    if len(data) != size:
        raise ValueError("truncated ELF file")
    return data
