"""Opening a wheel that may be hostile, and reading its members: the one way ``opmarket
install`` (a wheel's METADATA) and ``compat-check`` (a wheel's op-set) read a zip archive.

Two rules, each a :class:`BadWheel` with a one-line message when broken:

- Before zipfile reads the central directory (one ``ZipInfo`` per entry, a few hundred bytes
  each), its end record is read: more than :data:`MAX_ENTRIES` entries or a central
  directory over :data:`MAX_DIRECTORY` bytes is refused (real wheels, even PyTorch's, have
  some ten thousand entries in a few MiB).
- Whatever zipfile raises on a crafted archive (an unknown compression method, a member
  flagged encrypted, a broken deflate stream, one that ends early) is a BadWheel too:
  :data:`UNREADABLE` lists those errors for code that reads through ``zipfile.Path``.
"""

from __future__ import annotations

import os
import struct
import zipfile
import zlib
from typing import IO

from opmarket.sdk._errors import OpmarketError

__all__ = [
    "MAX_DIRECTORY",
    "MAX_ENTRIES",
    "UNREADABLE",
    "BadWheel",
    "describe",
    "open_wheel",
    "read_member",
]

#: The most entries opmarket reads of a wheel's central directory.
MAX_ENTRIES = 100_000
#: The most bytes of a wheel's central directory opmarket reads.
MAX_DIRECTORY = 8 * 1024 * 1024

#: What zipfile raises on an archive made to break it, besides BadZipFile and OSError.
UNREADABLE: tuple[type[Exception], ...] = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    NotImplementedError,  # a compression method zipfile does not know (99: AES)
    RuntimeError,  # a member flagged encrypted: "password required"
    zlib.error,  # an invalid deflate stream
    EOFError,  # a compressed stream that ends before its end marker
    OSError,
    ValueError,
    KeyError,
    struct.error,
)

_EOCD = b"PK\x05\x06"
_EOCD_SIZE = 22
_ZIP64_LOCATOR = b"PK\x06\x07"
_ZIP64_EOCD = b"PK\x06\x06"


class BadWheel(OpmarketError, ValueError):
    """A wheel opmarket cannot or will not read; the message is one line."""


def describe(exc: BaseException) -> str:
    """One line saying what went wrong reading an archive: an error from :data:`UNREADABLE`."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_directory(f: IO[bytes]) -> None:
    """Refuse a central directory larger than the caps, from the end record alone."""
    end = f.seek(0, os.SEEK_END)
    tail_size = min(end, _EOCD_SIZE + 0xFFFF)  # the record, then a comment of up to 64 KiB
    f.seek(end - tail_size)
    tail = f.read(tail_size)
    at = tail.rfind(_EOCD)
    if at < 0 or at + _EOCD_SIZE > len(tail):
        raise BadWheel("not a zip archive (no end of central directory record)")
    entries, size = struct.unpack("<xxxxxxxxxxHI", tail[at : at + 16])
    if entries == 0xFFFF or size == 0xFFFFFFFF:  # ZIP64: the real numbers are elsewhere
        record = end - tail_size + at
        if record >= 20:
            f.seek(record - 20)
            locator = f.read(20)
            if locator[:4] == _ZIP64_LOCATOR:
                (offset,) = struct.unpack("<Q", locator[8:16])
                f.seek(offset)
                zip64 = f.read(56)
                if len(zip64) == 56 and zip64[:4] == _ZIP64_EOCD:
                    entries, size = struct.unpack("<QQ", zip64[32:48])
    if entries > MAX_ENTRIES:
        raise BadWheel(f"{entries} entries, more than the {MAX_ENTRIES} opmarket reads of a wheel")
    if size > MAX_DIRECTORY:
        raise BadWheel(
            f"a central directory of {size} bytes, more than the {MAX_DIRECTORY // 2**20} MiB "
            "opmarket reads of a wheel"
        )


def open_wheel(file: str | os.PathLike[str] | IO[bytes]) -> zipfile.ZipFile:
    """``file`` as a ZipFile, once its central directory is within the caps; BadWheel
    when it is not, or is not a zip archive."""
    try:
        if isinstance(file, (str, os.PathLike)):
            with open(file, "rb") as f:
                _check_directory(f)
        else:
            _check_directory(file)
            file.seek(0)
        return zipfile.ZipFile(file)
    except BadWheel:
        raise
    except zipfile.BadZipFile:
        raise BadWheel("not a zip archive (a broken wheel?)") from None
    except UNREADABLE as exc:
        raise BadWheel(describe(exc)) from None


def read_member(archive: zipfile.ZipFile, name: str, limit: int) -> bytes:
    """Member ``name``, whole; BadWheel when it is larger than ``limit`` bytes (declared or
    inflated) or cannot be read."""
    try:
        info = archive.getinfo(name)
        if info.file_size > limit:
            raise BadWheel(f"{name}: larger than {limit // 2**20} MiB, the most opmarket reads")
        with archive.open(info) as member:
            data = member.read(limit + 1)
    except BadWheel:
        raise
    except UNREADABLE as exc:
        raise BadWheel(f"{name}: {describe(exc)}") from None
    if len(data) > limit:
        raise BadWheel(f"{name}: larger than {limit // 2**20} MiB, the most opmarket reads")
    return data
