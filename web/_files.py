"""File downloads: validated wheels and their core metadata (PEP 658), with Range."""

from __future__ import annotations

import re

from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse
from sqlalchemy import select

from opmarket.web._errors import HTTPProblem
from opmarket.web._models import File
from opmarket.web._state import StateDep
from opmarket.web._storage import StorageError

__all__ = ["router"]

router = APIRouter(tags=["files"])
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) of a single ``bytes=`` range, None for the whole file; HTTPProblem 416
    when it cannot be satisfied. Several ranges are answered with the whole file."""
    if not header:
        return None
    m = _RANGE.match(header.strip())
    if m is None:
        return None
    first, last = m.group(1), m.group(2)
    if not first and not last:
        return None
    if not first:  # the last N bytes
        n = int(last)
        if n == 0:
            raise HTTPProblem(416, "range-not-satisfiable", "empty suffix range",
                              {"Content-Range": f"bytes */{size}"})
        return max(size - n, 0), size
    start = int(first)
    end = min(int(last) + 1, size) if last else size
    if start >= size or end <= start:
        raise HTTPProblem(416, "range-not-satisfiable",
                          f"range {header!r} is outside the file's {size} bytes",
                          {"Content-Range": f"bytes */{size}"})
    return start, end


@router.get("/files/{sha256}/{filename}", operation_id="download_file",
            summary="Download a validated wheel, or its METADATA (name + .metadata)")
@router.head("/files/{sha256}/{filename}", operation_id="download_file_head",
             summary="The headers of a download")
def download(sha256: str, filename: str, request: Request, state: StateDep) -> Response:
    metadata = filename.endswith(".metadata")
    wheel_name = filename.removesuffix(".metadata") if metadata else filename
    with state.db.engine.connect() as conn:
        row = conn.execute(select(File.sha256, File.metadata_sha256, File.status)
                           .where(File.filename == wheel_name, File.sha256 == sha256)).first()
    if row is None or row.status != "validated":
        raise HTTPProblem(404, "not-found", f"no validated file {wheel_name!r} with that hash")
    key = row.metadata_sha256 if metadata else row.sha256
    try:
        size = state.storage.size(key)
    except StorageError:
        raise HTTPProblem(404, "not-found", f"{filename!r} is missing from the store") from None
    headers = {"Accept-Ranges": "bytes", "ETag": f'"{key}"',
               "Cache-Control": "public, max-age=31536000, immutable"}
    media = "text/plain; charset=utf-8" if metadata else "application/octet-stream"
    span = _byte_range(request.headers.get("range"), size)
    if_range = request.headers.get("if-range")
    if span is not None and if_range and if_range.strip() != f'"{key}"':
        span = None
    start, end = span if span is not None else (0, size)
    headers["Content-Length"] = str(end - start)
    status = 200
    if span is not None:
        status = 206
        headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
    if request.method == "HEAD":
        return Response(status_code=status, headers=headers, media_type=media)
    return StreamingResponse(state.storage.read(key, start, end), status_code=status,
                             headers=headers, media_type=media)
