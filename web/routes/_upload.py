"""``/legacy/``: the upload form that twine and ``uv publish`` send (never a redirect)."""

from __future__ import annotations

import dataclasses
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import ClientDisconnect

from opmarket.web._auth import Uploader, UploaderDep
from opmarket.web._errors import HTTPError
from opmarket.web._limits import FORM_OVERHEAD
from opmarket.web._publish import Accepted, Form, accept_upload
from opmarket.web._state import AppState, StateDep
from opmarket.web.validation._verdict import upload_answer

__all__ = ["router"]

router = APIRouter(tags=["upload"])


def _field(form: Any, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""


@router.post("/legacy/", summary="Upload a wheel (twine, uv publish)")
@router.post("/legacy", include_in_schema=False)
async def upload(request: Request, state: StateDep, who: UploaderDep) -> Response:
    limit = state.settings.max_upload_bytes
    declared = request.headers.get("content-length", "")
    if not declared.isdigit():
        # The form parser spools files to disk before we see them: an upload of unknown
        # length could fill it. twine and uv send the length.
        raise HTTPError(411, "length-required", "send Content-Length with the upload")
    if int(declared) > limit + FORM_OVERHEAD:
        raise HTTPError(413, "too-large", f"the upload is larger than the limit of {limit} bytes")
    # Received and checked under a slot (429/503 over the caps); no database connection is
    # held meanwhile, nor while the answer waits for the verdict, which needs no slot.
    with state.uploads.slot(who.token_id):
        accepted = await _receive(request, state, who)
    body = {
        "filename": accepted.filename,
        "sha256": accepted.sha256,
        "project": accepted.project,
        "status": accepted.status,
        "message": "uploaded; validation queued"
        if accepted.new
        else "identical file already uploaded",
    }
    return await upload_answer(
        state, who.user.name, body, accepted.new, gone=_disconnected(request)
    )


async def _disconnected(request: Request) -> None:
    """Ends when the client has disconnected (the body was read whole before)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _receive(request: Request, state: AppState, who: Uploader) -> Accepted:
    """Read the form, then check and store the upload (HTTPError says why not)."""
    try:
        async with request.form(max_files=1, max_fields=500) as form:
            content = form.get("content")
            if not isinstance(content, UploadFile) or not content.filename:
                raise HTTPError(400, "no-file", "the form has no file in 'content'")
            fields = Form(
                action=_field(form, ":action"),
                protocol_version=_field(form, "protocol_version"),
                name=_field(form, "name"),
                version=_field(form, "version"),
                filetype=_field(form, "filetype"),
                filename=content.filename,
                sha256=_field(form, "sha256_digest"),
                md5=_field(form, "md5_digest"),
                blake2_256=_field(form, "blake2_256_digest"),
            )
            if any("\0" in value for value in dataclasses.astuple(fields)):
                # No name, version or digest has one, and PostgreSQL refuses it in a string.
                raise HTTPError(400, "bad-form", "the upload form has a NUL character")
            return await run_in_threadpool(accept_upload, state, who, fields, content.file)
    except HTTPError:
        raise
    except ClientDisconnect:  # the client went away mid-upload: nobody to answer
        raise HTTPError(400, "truncated", "the upload ended before its body did") from None
    except ValueError as exc:  # a malformed multipart body
        raise HTTPError(400, "bad-form", f"unreadable upload form: {exc}") from None
