"""Where files live: a storage interface and its content-addressed local implementation.

Blobs are named by the SHA-256 of their bytes, so a blob is written once and never changes.
``storage_from_url`` (``_open``) picks the implementation from the settings' ``storage_url``:
``file:///path`` is this module's local store, ``s3://bucket/prefix?...`` an S3-compatible
object store (``_s3``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from opmarket.sdk import OpmarketError

__all__ = [
    "LocalFileStore",
    "Storage",
    "StorageError",
    "check_key",
    "copy_out",
]

_CHUNK = 256 * 1024


class StorageError(OpmarketError, RuntimeError):
    """A blob is missing or the store cannot be written."""


class Storage(Protocol):
    """A content-addressed blob store; keys are SHA-256 hex digests."""

    def put_file(self, path: Path, digest: str) -> None:
        """Store the file at ``path`` whose SHA-256 is ``digest`` (the file may be moved)."""

    def put_bytes(self, data: bytes) -> str:
        """Store ``data``; its key."""

    def size(self, digest: str) -> int:
        """The blob's size in bytes; StorageError when missing."""

    def read(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes ``[start, end)`` of the blob, in chunks."""

    def local_path(self, digest: str) -> Path | None:
        """A path to read the blob from directly, when the store is local."""

    def download_url(self, digest: str) -> str | None:
        """A URL that clients may download the blob from instead (a presigned one), if any."""

    def delete(self, digest: str) -> None:
        """Remove the blob (only for blobs no committed row names)."""


def copy_out(storage: Storage, digest: str, target: Path) -> Path:
    """Write the blob ``digest`` to the file ``target`` (a job's private copy); ``target``."""
    with open(target, "wb") as out:
        for chunk in storage.read(digest):
            out.write(chunk)
    return target


def check_key(digest: str) -> str:
    """``digest`` when it is a SHA-256 hex digest (a blob's key); StorageError otherwise."""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise StorageError(f"not a sha256 key: {digest!r}")
    return digest


class LocalFileStore:
    """Blobs under ``root/ab/cd/abcd...``, written to a temporary name then renamed."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def _path(self, digest: str) -> Path:
        check_key(digest)
        return self.root / digest[:2] / digest[2:4] / digest

    def put_file(self, path: Path, digest: str) -> None:
        """Copy the file at ``path`` in as blob ``digest``, synced, unless the blob is there.

        ``digest`` is trusted: it is not checked against the file's contents.
        """
        target = self._path(digest)
        if target.exists():
            return
        tmp = self._temporary(target)
        try:
            shutil.copyfile(path, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            tmp.replace(target)
        finally:
            tmp.unlink(missing_ok=True)

    @staticmethod
    def _temporary(target: Path) -> Path:
        """A new empty file beside ``target``, unique to this call: two threads storing one
        blob at once each write their own and the last rename wins, with the same bytes."""
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(fd)
        return Path(name)

    def put_bytes(self, data: bytes) -> str:
        """Store ``data`` and return its key, its SHA-256; a blob already there is kept."""
        digest = hashlib.sha256(data).hexdigest()
        target = self._path(digest)
        if not target.exists():
            tmp = self._temporary(target)
            try:
                tmp.write_bytes(data)
                tmp.replace(target)
            finally:
                tmp.unlink(missing_ok=True)
        return digest

    def size(self, digest: str) -> int:
        """The blob's size in bytes; StorageError when it is missing."""
        try:
            return self._path(digest).stat().st_size
        except FileNotFoundError:
            raise StorageError(f"no blob {digest}") from None

    def read(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes ``[start, end)`` of the blob, in chunks of 256 KiB.

        StorageError when it is missing, raised by this call rather than on iteration.
        """
        path = self._path(digest)
        if not path.is_file():
            raise StorageError(f"no blob {digest}")
        return self._chunks(path, start, end)

    @staticmethod
    def _chunks(path: Path, start: int, end: int | None) -> Iterator[bytes]:
        with open(path, "rb") as f:
            f.seek(start)
            left = None if end is None else end - start
            while left is None or left > 0:
                chunk = f.read(_CHUNK if left is None else min(_CHUNK, left))
                if not chunk:
                    return
                if left is not None:
                    left -= len(chunk)
                yield chunk

    def local_path(self, digest: str) -> Path | None:
        """Where the blob is, or would be, on disk; the file is not checked to exist."""
        return self._path(digest)

    def download_url(self, digest: str) -> str | None:
        """None: the server sends local blobs itself."""
        return None

    def delete(self, digest: str) -> None:
        """Remove the blob; no error when it is already gone."""
        self._path(digest).unlink(missing_ok=True)
