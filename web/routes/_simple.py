"""The simple repository API as pip, uv and twine use it: PEP 503 HTML and PEP 691 JSON,
API version 1.1 (PEP 700), PEP 658/714 core metadata, PEP 592 yanking. Only validated files
are listed; pages are rendered once per change of their project (its serial)."""

from __future__ import annotations

import hashlib
import html
import json
import logging
import re
from collections.abc import Sequence
from datetime import datetime

from fastapi import APIRouter, Request, Response
from packaging.utils import canonicalize_name
from sqlalchemy import and_, func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, defer
from starlette.concurrency import run_in_threadpool

from opmarket.registry._metadata import version_key
from opmarket.web._errors import HTTPError
from opmarket.web._state import AppState
from opmarket.web.catalog._models import File, FileStatus, Project, Release
from opmarket.web.catalog._queries import listed_projects
from opmarket.web.routes._cache import INDEX, read_changes
from opmarket.web.routes._negotiate import HTML, JSON_V1, OFFERED, negotiate
from opmarket.web.routes._upstream import not_here
from opmarket.web.routes._variant_files import variant_links

__all__ = ["API_VERSION", "file_url", "router"]

API_VERSION = "1.1"
router = APIRouter(tags=["simple"])
log = logging.getLogger("opmarket.web")

#: A valid project name (PEP 508 / the core metadata's Name): ASCII letters and digits,
#: with ``.``, ``_`` and ``-`` inside.
_PROJECT_NAME = re.compile(r"[A-Z0-9]([A-Z0-9._-]*[A-Z0-9])?", re.IGNORECASE | re.ASCII)


def file_url(sha256: str, filename: str) -> str:
    return f"/files/{sha256}/{filename}"


def _when(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _answer(request: Request, body: bytes, content_type: str) -> Response:
    """The page, or 304 when the client's copy (If-None-Match) is current."""
    etag = f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'
    headers = {"Vary": "Accept", "Cache-Control": "max-age=60", "ETag": etag}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=304, headers=headers)
    media = f"{content_type}; charset=utf-8" if content_type == HTML else content_type
    return Response(body, media_type=media, headers=headers)


def _chosen(request: Request) -> str:
    chosen = negotiate(request.headers.get("accept"), request.query_params.get("format"))
    if chosen is None:
        raise HTTPError(
            406, "not-acceptable", "acceptable here: " + ", ".join(OFFERED), {"Vary": "Accept"}
        )
    return chosen


def _state(request: Request) -> AppState:
    state = request.app.state.opmarket
    assert isinstance(state, AppState)
    return state


_GENERATION = select(func.count(Project.id), func.coalesce(func.sum(Project.serial), 0))


def _sync(state: AppState) -> None:
    state.pages.sync(*read_changes(state.db.engine))


async def _cached(state: AppState, key: str) -> tuple[bytes, bytes] | None:
    if state.pages.due():
        try:
            await run_in_threadpool(_sync, state)
        except SQLAlchemyError as exc:  # a page kept is served: it needs no database
            if state.pages.get(key) is None:
                raise
            state.pages.postpone()
            log.warning("serving a kept page: the change log could not be read (%s)", exc)
    return state.pages.get(key)


# The two pages pip and uv fetch most: async, no dependencies, served from memory.
@router.get("/simple/", summary="The index of projects (PEP 503 / 691)")
async def index(request: Request) -> Response:
    chosen = _chosen(request)
    state = _state(request)
    pages = await _cached(state, INDEX)
    if pages is None:
        pages = await run_in_threadpool(_index_pages, state)
    return _answer(request, pages[1] if chosen == JSON_V1 else pages[0], chosen)


def _index_pages(state: AppState) -> tuple[bytes, bytes]:
    seen = state.pages.generation
    with state.db.engine.connect() as conn:
        count, total = conn.execute(_GENERATION).one()
        rows = listed_projects(conn)  # the catalog's summary rows (web._queries)
    doc = {"meta": {"api-version": API_VERSION}, "projects": [{"name": n} for n, _ in rows]}
    links = "".join(
        f'<a href="/simple/{html.escape(norm)}/">{html.escape(name)}</a><br>\n'
        for name, norm in rows
    )
    page = (
        '<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" '
        f'content="{API_VERSION}"><title>Simple index</title></head>\n<body>\n'
        f"{links}</body></html>\n"
    )
    return state.pages.keep(
        INDEX, (int(count), int(total)), page.encode(), json.dumps(doc).encode(), seen=seen
    )


@router.get("/simple/{project}/", summary="One project's files (PEP 503 / 691 / 700)")
async def project_page(project: str, request: Request) -> Response:
    chosen = _chosen(request)
    if not _PROJECT_NAME.fullmatch(project):  # never a redirect, nor a header, for such a name
        raise HTTPError(404, "not-found", f"{project!r} is not a valid project name")
    state = _state(request)
    normalized = str(canonicalize_name(project))
    pages = await _cached(state, normalized)
    if pages is None:
        pages = await run_in_threadpool(_project_pages, state, normalized)
    return _answer(request, pages[1] if chosen == JSON_V1 else pages[0], chosen)


#: File columns the simple pages never read (loading them would parse the JSON of every
#: file), as loader options built once: built on every miss they cost more than they save.
_UNSHOWN = tuple(defer(c, raiseload=True) for c in (File.log, File.result, File.opset, File.gpu))


def _project_pages(state: AppState, normalized: str) -> tuple[bytes, bytes]:
    seen = state.pages.generation
    # One query: the project (a row even without releases) with its validated files, and
    # none of the columns the pages do not show (the validation's log and result).
    release = and_(Release.project_id == Project.id)
    validated = and_(File.release_id == Release.id, File.status == FileStatus.VALIDATED)
    with state.db.engine.connect() as conn, Session(bind=conn) as session:
        rows = (
            session.execute(
                select(Project.serial, File, Release.version)
                .select_from(Project)
                .outerjoin(Release, release)
                .outerjoin(File, validated)
                .where(Project.normalized == normalized)
                .order_by(File.filename)
                .options(*_UNSHOWN)
            )
            .tuples()
            .all()
        )
    if not rows:
        raise not_here(state.settings, normalized)  # 404, or 307 to the upstream
    files = [(f, version) for _, f, version in rows if f is not None]
    if not files:
        raise HTTPError(404, "not-found", f"no validated files for {normalized!r}")
    return state.pages.keep(normalized, rows[0][0], *_render(normalized, files), seen=seen)


def _render(name: str, rows: Sequence[tuple[File, str]]) -> tuple[bytes, bytes]:
    entries: list[dict[str, object]] = []
    links: list[str] = []
    versions: set[str] = set()
    for f, version in rows:
        versions.add(version)
        url = file_url(f.sha256, f.filename)
        entry: dict[str, object] = {
            "filename": f.filename,
            "url": url,
            "hashes": {"sha256": f.sha256},
            "requires-python": f.requires_python or None,
            "core-metadata": {"sha256": f.metadata_sha256},
            "yanked": (f.yanked_reason or True) if f.yanked else False,
            "size": f.size,
            "upload-time": _when(f.uploaded),
        }
        entries.append(entry)
        attrs = [f'href="{html.escape(url)}#sha256={f.sha256}"']
        if f.requires_python:
            attrs.append(f'data-requires-python="{html.escape(f.requires_python)}"')
        attrs.append(f'data-core-metadata="sha256={f.metadata_sha256}"')
        attrs.append(f'data-dist-info-metadata="sha256={f.metadata_sha256}"')
        if f.yanked:
            attrs.append(f'data-yanked="{html.escape(f.yanked_reason)}"')
        links.append(f"<a {' '.join(attrs)}>{html.escape(f.filename)}</a><br>\n")
    variant_anchors, variant_entries = variant_links(name, rows)  # PEP 825 variants.json
    links.append(variant_anchors)
    entries.extend(variant_entries)
    doc = {
        "meta": {"api-version": API_VERSION},
        "name": name,
        "versions": sorted(versions, key=version_key),
        "files": entries,
    }
    page = (
        '<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" '
        f'content="{API_VERSION}"><title>Links for {html.escape(name)}</title></head>\n'
        f"<body>\n<h1>Links for {html.escape(name)}</h1>\n{''.join(links)}</body></html>\n"
    )
    return page.encode(), json.dumps(doc).encode()
