"""Hostile shared libraries against the ELF reader the index runs in its own process on
every uploaded library (``DT_NEEDED`` for the static GPU step): what it holds must be a
small constant times what it returns, whatever the file says (issue 20, finding 1: a 6.9
MiB upload grew the server by 2,687 MiB)."""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from opmarket.registry._elf import MAX_DYNAMIC, MAX_SECTIONS, read_library
from opmarket.web.gpu._checks import inspect_gpu

from .plugins import handmade_wheel

MiB = 1024 * 1024
#: What reading one hostile library may hold at its peak: tables of a few KiB, the names it
#: returns and one 64 KiB block. The reader before held about 10 times the file.
BOUND = 2 * MiB
_NULL = (0,) * 10


def _elf64(sections: list[tuple[int, ...]], body: bytes, shnum: int | None = None) -> bytes:
    """A little-endian 64-bit ELF header, ``body``, then the section headers given."""
    count = len(sections) if shnum is None else shnum
    header = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    header += struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, 64 + len(body), 0, 64, 0, 0, 64, count, 0
    )
    return header + body + b"".join(struct.pack("<IIQQQQIIQQ", *sh) for sh in sections)


def _dynamic_flood(entries: int) -> bytes:
    """One DT_NEEDED, then ``entries`` distinct entries of an unknown tag and no DT_NULL:
    the old reader kept a tuple of each in a set."""
    strings = b"\0libc.so.6\0"
    table = struct.pack("<qQ", 1, 1) + b"".join(
        struct.pack("<qQ", 0x6FFF_F000, i) for i in range(entries)
    )
    return _elf64(
        [
            _NULL,
            (0, 3, 0, 0, 64, len(strings), 0, 0, 0, 0),
            (0, 6, 0, 0, 64 + len(strings), len(table), 1, 0, 0, 0),
        ],
        strings + table,
    )


def _section_flood(sections: int) -> bytes:
    """Extended numbering (section 0's sh_size) naming ``sections`` sections, all there:
    the old reader unpacked each into a tuple and kept them all."""
    headers: list[tuple[int, ...]] = [(0, 0, 0, 0, 0, sections, 0, 0, 0, 0)]
    return _elf64(headers + [_NULL] * (sections - 1), b"", 0)


def _peak(read: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        read()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_flood_of_dynamic_entries_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "libflood.so"
    path.write_bytes(_dynamic_flood(512 * 1024))  # 8 MiB of dynamic entries
    found = read_library(path)
    assert found.needed == () and f"{MAX_DYNAMIC} dynamic entries" in found.problem
    assert _peak(lambda: read_library(path)) < BOUND


def test_a_flood_of_section_headers_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "libsections.so"
    path.write_bytes(_section_flood(MAX_SECTIONS + 60_000))  # 8 MiB of section headers
    found = read_library(path)
    assert found.needed == () and f"at most {MAX_SECTIONS}" in found.problem
    assert _peak(lambda: read_library(path)) < BOUND
    # Up to the limit they are read, a block at a time and not kept.
    path.write_bytes(_section_flood(MAX_SECTIONS))
    assert read_library(path).problem == ""
    assert _peak(lambda: read_library(path)) < BOUND


def test_needed_names_are_read_without_the_whole_string_table(tmp_path: Path) -> None:
    """A string table of 8 MiB holding one short soname: only the name is read."""
    strings = b"\0libcudart.so.13\0" + b"x" * (8 * MiB)
    table = struct.pack("<qQqQ", 1, 1, 0, 0)
    path = tmp_path / "libnames.so"
    path.write_bytes(
        _elf64(
            [
                _NULL,
                (0, 3, 0, 0, 64, len(strings), 0, 0, 0, 0),
                (0, 6, 0, 0, 64 + len(strings), len(table), 1, 0, 0, 0),
            ],
            strings + table,
        )
    )
    assert read_library(path).needed == ("libcudart.so.13",)
    assert _peak(lambda: read_library(path)) < BOUND


def test_the_gpu_step_fails_a_library_past_the_readers_limits_in_bounded_memory(
    tmp_path: Path,
) -> None:
    """The upload's path: a wheel whose library is a compressed dynamic-entry flood."""
    wheel = handmade_wheel(
        tmp_path, "opm-flood", "1.0", {"opm_flood/libflood.so": _dynamic_flood(512 * 1024)}
    )
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "failed", found
    assert any(f"{MAX_DYNAMIC} dynamic entries" in line for line in found.log), found.log
    assert _peak(lambda: inspect_gpu(wheel)) < 4 * BOUND
