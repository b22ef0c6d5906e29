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

from opmarket.registry._elf import read_library

__all__ = ["DeviceCode", "arch_key", "read_device_code"]

_FATBIN_MAGIC = 0xBA55ED50
_KIND_PTX, _KIND_ELF = 1, 2


@dataclass(frozen=True, slots=True)
class DeviceCode:
    """A shared library's CUDA facts: ``sass`` (``sm_80``...) and ``ptx`` (``compute_75``...)
    sorted by architecture (:func:`arch_key`), ``needed`` its DT_NEEDED names, ``runpath``
    its run paths. Read here from the ELF file, or by the index from ``cuobjdump``'s
    listing (which leaves ``needed`` and ``runpath`` empty)."""

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


def arch_key(name: str) -> tuple[int, str]:
    """The sort key of an architecture name: by its number (``sm_80`` before ``sm_100a``)."""
    digits = "".join(ch for ch in name.partition("_")[2] if ch.isdigit())
    return (int(digits or 0), name)


def read_device_code(path: Path) -> DeviceCode:
    """The CUDA facts of the ELF shared library at ``path`` (read by :mod:`._elf`); an
    empty DeviceCode for a file that is not ELF, is truncated or cannot be read."""
    library = read_library(path, (".nv_fatbin",))
    sass: set[str] = set()
    ptx: set[str] = set()
    if ".nv_fatbin" in library.sections:
        _fatbins(library.sections[".nv_fatbin"], sass, ptx)
    return DeviceCode(
        tuple(sorted(sass, key=arch_key)),
        tuple(sorted(ptx, key=arch_key)),
        library.needed,
        library.runpath,
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
