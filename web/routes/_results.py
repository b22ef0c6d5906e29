"""Search results, op pages and package details kept in memory
(:class:`~opmarket.web.routes._cache.PageCache`): computed once per change of the catalog,
with their JSON, so a repeated request costs a dictionary lookup and no database session.
Any change (this process's own, or another's through the change log) drops every search
result and op page; a package's details go with its project's pages, when it changes."""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from fastapi.responses import JSONResponse
from packaging.utils import canonicalize_name
from pydantic import BaseModel
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from opmarket.web._state import AppState
from opmarket.web.catalog._catalog import (
    SearchResult,
    get_package,
    search_key,
    search_packages,
)
from opmarket.web.catalog._search import SearchQuery
from opmarket.web.routes._cache import read_changes

__all__ = [
    "cached_package",
    "cached_result",
    "cached_search",
    "json_body",
    "kept_package",
    "look_at_changes",
    "package_details",
]

log = logging.getLogger("opmarket.web")
M = TypeVar("M", bound=BaseModel)


def json_body(result: BaseModel) -> bytes:
    """``result`` as FastAPI answers a route that returns it (its response model)."""
    return bytes(JSONResponse(result.model_dump(mode="json", by_alias=True)).body)


def _compute(
    state: AppState, key: tuple[object, ...], compute: Callable[[Session], M | None]
) -> tuple[M, bytes] | None:
    seen = state.pages.generation  # before reading: a change after it is not kept
    with state.db.session() as session:
        result = compute(session)
    if result is None:
        return None
    body = json_body(result)
    state.pages.keep_result(key, result, body, seen=seen)
    return result, body


async def look_at_changes(state: AppState) -> None:
    """Read the change log when it is due (at most once per ``INDEX_CACHE_TTL_S``), so
    what is kept is dropped when the catalog changed; when the database cannot be read,
    what is kept is served until the next look."""
    if state.pages.due():
        try:
            await run_in_threadpool(state.pages.sync, *read_changes(state.db.engine))
        except SQLAlchemyError as exc:  # as the simple pages: the database is asked next
            state.pages.postpone()
            log.warning("the change log could not be read (%s)", exc)


async def cached_result(
    state: AppState,
    key: tuple[object, ...],
    compute: Callable[[Session], M | None],
    model: type[M],
) -> tuple[M, bytes] | None:
    """``compute(session)``'s result (a ``model``; None: not found, never kept) and its
    JSON, kept under ``key`` until the catalog changes (the change log is read first, at
    most once per ``INDEX_CACHE_TTL_S``)."""
    await look_at_changes(state)
    hit = state.pages.get_result(key)
    if hit is not None and isinstance(hit[0], model):
        return hit[0], hit[1]
    return await run_in_threadpool(_compute, state, key, compute)


async def cached_search(
    state: AppState, query: SearchQuery, *, offset: int, limit: int, after: str = ""
) -> tuple[SearchResult, bytes]:
    """:func:`~opmarket.web.catalog._catalog.search_packages`'s result and its JSON, kept
    under its :func:`~opmarket.web.catalog._catalog.search_key` until the catalog changes.
    SearchError as search_packages raises it."""
    key = search_key(query, offset=offset, limit=limit, after=after)
    compute = partial(search_packages, query=query, offset=offset, limit=limit, after=after)
    found = await cached_result(state, key, compute, SearchResult)
    assert found is not None  # a search always has a result
    return found


#: The kind of file (:meth:`~opmarket.web.routes._cache.PageCache.keep_file`) a package's
#: details are kept as, with its project's pages.
DETAILS = "details"


def package_details(state: AppState, normalized: str) -> bytes | None:
    """The JSON of the project ``normalized``'s details (None: no such project), read from
    the database and kept (blocking: in a worker thread)."""
    seen = state.pages.generation  # before reading: a change after it is not kept
    with state.db.session() as session:
        found = get_package(session, normalized)
    if found is None:
        return None
    return state.pages.keep_file(normalized, "", json_body(found), seen=seen, kind=DETAILS)


async def cached_package(state: AppState, name: str) -> bytes | None:
    """:func:`~opmarket.web.catalog._catalog.get_package`'s JSON for the project ``name``
    (any spelling; None: no such project, never kept), kept with the project's pages until
    it changes."""
    normalized = str(canonicalize_name(name))
    await look_at_changes(state)
    body = kept_package(state, normalized)
    if body is None:
        body = await run_in_threadpool(package_details, state, normalized)
    return body


def kept_package(state: AppState, normalized: str) -> bytes | None:
    """The JSON of the project ``normalized``'s details if it is kept, else None."""
    return state.pages.get_file(normalized, "", kind=DETAILS)
