"""File downloads: validated wheels and their core metadata (PEP 658).

Range, If-Range and HEAD are Starlette's ``FileResponse``; the one change is that a Range
header it cannot parse (``bytes=5-3``, ``lines=1-2``) is ignored, as RFC 9110 section 14.2
says, so the answer is the whole file (200) where Starlette would say 400.
"""

from __future__ import annotations

import os

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse, StreamingResponse
from sqlalchemy import select
from starlette.datastructures import Headers
from starlette.responses import FileResponse, MalformedRangeHeader, RangeNotSatisfiable
from starlette.types import Receive, Scope, Send

from opmarket.web._errors import HTTPError
from opmarket.web._state import StateDep
from opmarket.web.catalog._models import File, FileStatus
from opmarket.web.storage._local import StorageError

__all__ = ["router"]

router = APIRouter(tags=["files"])


class _Download(FileResponse):
    """A blob from the local store, with Range, If-Range and HEAD; invalid ranges ignored."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        wanted = Headers(scope=scope).get("range")
        if wanted is not None and self.stat_result is not None:
            try:
                self._parse_range_header(wanted, self.stat_result.st_size)
            except MalformedRangeHeader:
                headers = [(k, v) for k, v in scope["headers"] if k != b"range"]
                scope = {**scope, "headers": headers}
            except RangeNotSatisfiable:
                pass  # a valid range past the end: Starlette answers 416, as it should
        await super().__call__(scope, receive, send)


@router.get(
    "/files/{sha256}/{filename}",
    operation_id="download_file",
    summary="Download a validated wheel, or its METADATA (name + .metadata)",
)
@router.head(
    "/files/{sha256}/{filename}",
    operation_id="download_file_head",
    summary="The headers of a download",
)
def download(sha256: str, filename: str, state: StateDep) -> Response:
    metadata = filename.endswith(".metadata")
    wheel_name = filename.removesuffix(".metadata") if metadata else filename
    with state.db.engine.connect() as conn:
        row = conn.execute(
            select(File.sha256, File.metadata_sha256, File.status).where(
                File.filename == wheel_name, File.sha256 == sha256
            )
        ).first()
    if row is None or row.status != FileStatus.VALIDATED:
        raise HTTPError(404, "not-found", f"no validated file {wheel_name!r} with that hash")
    key = row.metadata_sha256 if metadata else row.sha256
    missing = HTTPError(404, "not-found", f"{filename!r} is missing from the store")
    headers = {"ETag": f'"{key}"', "Cache-Control": "public, max-age=31536000, immutable"}
    media = "text/plain; charset=utf-8" if metadata else "application/octet-stream"
    elsewhere = state.storage.download_url(key)
    if elsewhere is not None:  # an object store: the client fetches it there (same bytes)
        return RedirectResponse(elsewhere, status_code=302, headers={"Cache-Control": "no-store"})
    path = state.storage.local_path(key)
    if path is None:  # a remote store: the whole file, streamed
        try:
            size = state.storage.size(key)
            chunks = state.storage.read(key)
        except StorageError:
            raise missing from None
        headers["Content-Length"] = str(size)
        return StreamingResponse(chunks, headers=headers, media_type=media)
    try:
        stat_result = os.stat(path)
    except FileNotFoundError:
        raise missing from None
    return _Download(path, headers=headers, media_type=media, stat_result=stat_result)
