"""Blobs in an S3-compatible object store (AWS S3, MinIO, Ceph, moto's server), via boto3.

``s3://BUCKET/PREFIX?endpoint_url=http://host:9000&region=us-east-1&redirect=1`` names it
(``storage_url``). Credentials come from boto3's own chain (``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``, ``~/.aws``, an instance role), never from the URL. Objects are
named like the local store's files (``PREFIX/ab/cd/abcd...``), by the SHA-256 of their
bytes, so an object is written once and never changes. Downloads are answered by a redirect
to a presigned URL (``redirect=1``, the default: the bytes go from the store to pip, whose
hash check is unchanged) or streamed through the server (``redirect=0``). boto3 is the
``s3`` extra.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from opmarket.web.storage._local import StorageError, check_key

__all__ = ["S3FileStore", "s3_store_from_url"]

_CHUNK = 256 * 1024


def _missing(exc: Exception) -> bool:
    response = getattr(exc, "response", None) or {}
    code = str(response.get("Error", {}).get("Code", ""))
    return code in ("404", "NoSuchKey", "NotFound")


class S3FileStore:
    """The storage interface over one bucket (and key prefix) of an S3-compatible store."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        redirect: bool = True,
        presign_s: int = 300,
        client: Any = None,
    ) -> None:
        if client is None:
            try:
                import boto3
            except ImportError:
                raise StorageError(
                    f"storage s3://{bucket}: boto3 is not installed (pip install 'opmarket[s3]')"
                ) from None
            from botocore.config import Config

            # Signature version 4: what AWS and MinIO require of presigned URLs today.
            client = boto3.client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=region,
                config=Config(signature_version="s3v4"),
            )
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.redirect = redirect
        self.presign_s = presign_s

    def _key(self, digest: str) -> str:
        check_key(digest)
        return f"{self.prefix}{digest[:2]}/{digest[2:4]}/{digest}"

    def _exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if _missing(exc):
                return False
            raise StorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        return True

    def put_file(self, path: Path, digest: str) -> None:
        """Upload the file at ``path`` as blob ``digest`` unless the object is there
        (``digest`` is trusted, as by the local store)."""
        key = self._key(digest)
        if self._exists(key):
            return
        try:
            self.client.upload_file(str(path), self.bucket, key)
        except Exception as exc:
            raise StorageError(f"s3://{self.bucket}/{key}: cannot write: {exc}") from exc

    def put_bytes(self, data: bytes) -> str:
        """Store ``data`` and return its key, its SHA-256; an object already there is kept."""
        digest = hashlib.sha256(data).hexdigest()
        key = self._key(digest)
        if not self._exists(key):
            try:
                self.client.put_object(Bucket=self.bucket, Key=key, Body=data)
            except Exception as exc:
                raise StorageError(f"s3://{self.bucket}/{key}: cannot write: {exc}") from exc
        return digest

    def size(self, digest: str) -> int:
        """The object's size in bytes; StorageError when it is missing."""
        key = self._key(digest)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if _missing(exc):
                raise StorageError(f"no blob {digest}") from None
            raise StorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        return int(head["ContentLength"])

    def read(self, digest: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        """The bytes ``[start, end)`` of the object, in chunks of 256 KiB; StorageError
        when it is missing, raised by this call rather than on iteration."""
        key = self._key(digest)
        if end is not None and end <= start:
            return iter(())
        extra = {}
        if start or end is not None:
            extra["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key, **extra)
        except Exception as exc:
            if _missing(exc):
                raise StorageError(f"no blob {digest}") from None
            raise StorageError(f"s3://{self.bucket}/{key}: {exc}") from exc
        return self._chunks(answer["Body"])

    @staticmethod
    def _chunks(body: Any) -> Iterator[bytes]:
        try:
            yield from body.iter_chunks(_CHUNK)
        finally:
            body.close()

    def local_path(self, digest: str) -> Path | None:
        """None: the object is not on this machine's disk."""
        return None

    def download_url(self, digest: str) -> str | None:
        """A presigned GET URL for the object, valid ``presign_s`` seconds (None when the
        store was configured to stream, ``redirect=0``)."""
        if not self.redirect:
            return None
        return str(
            self.client.generate_presigned_url(
                "get_object",
                Params={"Bucket": self.bucket, "Key": self._key(digest)},
                ExpiresIn=self.presign_s,
            )
        )

    def delete(self, digest: str) -> None:
        """Remove the object; no error when it is already gone."""
        key = self._key(digest)
        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except Exception as exc:
            if not _missing(exc):
                raise StorageError(f"s3://{self.bucket}/{key}: cannot delete: {exc}") from exc


def s3_store_from_url(url: str) -> S3FileStore:
    """The store ``s3://BUCKET/PREFIX?endpoint_url=...&region=...&redirect=0|1`` names."""
    parsed = urlparse(url)
    if not parsed.netloc:
        raise StorageError(f"storage URL {url!r}: no bucket (s3://BUCKET/PREFIX)")
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    unknown = set(query) - {"endpoint_url", "region", "redirect", "presign_s"}
    if unknown:
        raise StorageError(
            f"storage URL {url!r}: unknown parameter(s) {', '.join(sorted(unknown))}"
        )
    if query.get("redirect", "1") not in ("0", "1"):
        raise StorageError(f"storage URL {url!r}: redirect must be 0 or 1")
    try:
        presign_s = int(query.get("presign_s", "300"))
    except ValueError:
        raise StorageError(f"storage URL {url!r}: presign_s must be whole seconds") from None
    return S3FileStore(
        parsed.netloc,
        parsed.path,
        endpoint_url=query.get("endpoint_url"),
        region=query.get("region"),
        redirect=query.get("redirect", "1") == "1",
        presign_s=presign_s,
    )
