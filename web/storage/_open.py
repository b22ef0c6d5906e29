"""The store a ``storage_url`` names: the local store or an S3-compatible one; a module of its
own because the S3 store builds on the local one's key checks."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from opmarket.web.storage._local import LocalFileStore, Storage, StorageError
from opmarket.web.storage._s3 import s3_store_from_url

__all__ = ["storage_from_url"]


def storage_from_url(url: str) -> Storage:
    """The store a ``storage_url`` names: ``file:///path`` or ``s3://bucket/prefix?...``."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        return LocalFileStore(Path(unquote(parsed.path)))
    if parsed.scheme == "s3":
        return s3_store_from_url(url)
    raise StorageError(
        f"storage URL {url!r}: use file:///path or s3://bucket/prefix (an S3-compatible store)"
    )
