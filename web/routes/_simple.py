"""The simple repository API as pip, uv and twine use it: PEP 503 HTML and PEP 691 JSON,
API version 1.1 (PEP 700), PEP 658/714 core metadata, PEP 592 yanking. Only validated files
are listed; pages are rendered once per change of their project (its serial), and so is the
answer for a name that is not listed. A kept page is answered by :class:`KeptPages`, in
front of the routes: the route's work (matching, parameters, a response object) costs
several times the page's own."""

from __future__ import annotations

import functools
import html
import json
import logging
import re
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

from fastapi import APIRouter, Request, Response
from packaging.utils import canonicalize_name
from sqlalchemy import and_, bindparam, func, select
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from opmarket.registry._metadata import version_key
from opmarket.web._errors import HTTPError
from opmarket.web._state import AppState
from opmarket.web.catalog._models import File, FileStatus, Project, Release
from opmarket.web.catalog._queries import listed_projects
from opmarket.web.routes._cache import INDEX, read_changes
from opmarket.web.routes._kept import Answer, Refusal, answer
from opmarket.web.routes._negotiate import HTML, HTML_V1, JSON_V1, OFFERED, negotiate
from opmarket.web.routes._upstream import not_here
from opmarket.web.routes._variant_files import variant_links

__all__ = ["API_VERSION", "KeptPages", "file_url", "router"]

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


def _answer(request: Request, pages: tuple[Answer, Answer], chosen: str) -> Response:
    """The page, or 304 when the client's copy (If-None-Match) is current."""
    page = pages[1] if chosen == JSON_V1 else pages[0]
    return page.response(chosen, request.headers.get("if-none-match", ""))


#: The content type for each Accept header seen (clients send a few different ones).
_negotiated: Callable[[str | None], str | None] = functools.lru_cache(maxsize=256)(negotiate)


def _chosen(request: Request) -> str:
    fmt = request.query_params.get("format")
    accept = request.headers.get("accept")
    chosen = negotiate(accept, fmt) if fmt else _negotiated(accept)
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


async def _cached(state: AppState, key: str) -> tuple[Answer, Answer] | None:
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
    return _answer(request, pages, chosen)


def _pair(html_page: str, doc: object) -> tuple[Answer, Answer]:
    return answer(html_page.encode(), HTML, HTML_V1), answer(json.dumps(doc).encode(), JSON_V1)


def _index_pages(state: AppState) -> tuple[Answer, Answer]:
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
    return state.pages.keep(INDEX, (int(count), int(total)), *_pair(page, doc), seen=seen)


@router.get("/simple/{project}/", summary="One project's files (PEP 503 / 691 / 700)")
async def project_page(project: str, request: Request) -> Response:
    chosen = _chosen(request)
    if not _PROJECT_NAME.fullmatch(project):  # never a redirect, nor a header, for such a name
        raise HTTPError(404, "not-found", f"{project!r} is not a valid project name")
    state = _state(request)
    normalized = str(canonicalize_name(project))
    pages = await _cached(state, normalized)
    if pages is None:
        missing = state.pages.get_missing(normalized)
        if isinstance(missing, Refusal):
            raise missing.error()  # a new one: a raised one collects tracebacks
        pages = await run_in_threadpool(_project_pages, state, normalized)
    return _answer(request, pages, chosen)


class _Shown(NamedTuple):
    """The columns of a validated file that the simple pages show."""

    id: int
    filename: str
    sha256: str
    requires_python: str
    metadata_sha256: str
    yanked: bool
    yanked_reason: str
    size: int
    uploaded: datetime
    validated: datetime | None
    variant: dict[str, Any] | None


#: One query, built once (built on every miss it cost more CPU than running it): the
#: project (a row even without releases) with the shown columns of its validated files,
#: plain rows, no objects.
_PROJECT_FILES = (
    select(Project.serial, Release.version, *(getattr(File, c) for c in _Shown._fields))
    .select_from(Project)
    .outerjoin(Release, Release.project_id == Project.id)
    .outerjoin(File, and_(File.release_id == Release.id, File.status == FileStatus.VALIDATED))
    .where(Project.normalized == bindparam("normalized"))
    .order_by(File.filename)
)


def _project_pages(state: AppState, normalized: str) -> tuple[Answer, Answer]:
    seen = state.pages.generation
    with state.db.engine.connect() as conn:
        rows = conn.execute(_PROJECT_FILES, {"normalized": normalized}).all()
    files = [(_Shown._make(row[2:]), str(row.version)) for row in rows if row.id is not None]
    if files:
        return state.pages.keep(normalized, rows[0].serial, *_render(normalized, files), seen=seen)
    if rows:
        missing = HTTPError(404, "not-found", f"no validated files for {normalized!r}")
    else:
        missing = not_here(state.settings, normalized)  # 404, or 307 to the upstream
    state.pages.keep_missing(normalized, Refusal.of(missing), seen=seen)
    raise missing


def _render(name: str, rows: Sequence[tuple[_Shown, str]]) -> tuple[Answer, Answer]:
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
    return _pair(page, doc)


class KeptPages:
    """ASGI middleware: ``GET /simple/`` and ``GET /simple/<name>/`` answered from the page
    cache, with the answers the routes keep (the same bytes and headers), when the page, or
    the name's "not found", is kept and the change log is not due for a look. Anything else
    (a query string, nothing acceptable, a page not kept, the log due) goes on to the
    routes, which read the log and render."""

    def __init__(self, app: ASGIApp, state: AppState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            kept = self._kept(scope)
            if kept is not None:
                await kept(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def _kept(self, scope: Scope) -> Response | None:
        path: str = scope["path"]
        if not path.startswith("/simple/") or scope.get("root_path") or self.state.pages.due():
            return None
        if path == "/simple/":
            key = INDEX
        else:
            name = path[len("/simple/") : -1]
            if not path.endswith("/") or not _PROJECT_NAME.fullmatch(name):
                return None
            key = str(canonicalize_name(name))
        accept = if_none_match = None  # the first of each, as the routes read them
        for header, value in scope["headers"]:
            if header == b"accept" and accept is None:
                accept = value.decode("latin-1")
            elif header == b"if-none-match" and if_none_match is None:
                if_none_match = value.decode("latin-1")
        chosen = _negotiated(accept)
        if chosen is None:
            return None
        pages = self.state.pages.get(key)
        if pages is not None:
            page = pages[1] if chosen == JSON_V1 else pages[0]
            return page.response(chosen, if_none_match or "")
        missing = self.state.pages.get_missing(key) if key else None
        return missing.response() if isinstance(missing, Refusal) else None
