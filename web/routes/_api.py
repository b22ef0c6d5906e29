"""The catalog as JSON (``/api/...``), documented by the OpenAPI schema at /openapi.json."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import Field

from opmarket.web._errors import HTTPError
from opmarket.web._state import SessionDep
from opmarket.web.catalog._catalog import (
    OpDetail,
    PackageDetail,
    SearchError,
    SearchResult,
    get_op,
    get_package,
    search_packages,
)
from opmarket.web.catalog._search import SearchQuery

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["catalog"])

# Typed as FastAPI's ``responses`` parameter is.
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": 'Not found: `{"error": {"status", "code", "message"}}`'}
}


class PackagesQuery(SearchQuery):
    """The search's filters, and a page of the listing: by offset or after a cursor."""

    offset: int = Field(default=0, ge=0)
    limit: int = Field(default=100, ge=1, le=1000)
    after: str = Field(default="", description="a cursor: the next_after of the previous page")


@router.get("/packages", summary="Search packages")
def packages(session: SessionDep, query: Annotated[PackagesQuery, Query()]) -> SearchResult:
    try:
        return search_packages(
            session, query, offset=query.offset, limit=query.limit, after=query.after
        )
    except SearchError as exc:
        raise HTTPError(400, "bad-query", str(exc)) from None


@router.get(
    "/packages/{name}", summary="One package: versions, files, ops, validation", responses=_ERRORS
)
def package(name: str, session: SessionDep) -> PackageDetail:
    found = get_package(session, name)
    if found is None:
        raise HTTPError(404, "not-found", f"no package {name!r}")
    return found


@router.get(
    "/ops/{name}",
    summary="Which packages provide an op, kernels per device and dtype",
    responses=_ERRORS,
)
def op(name: str, session: SessionDep) -> OpDetail:
    found = get_op(session, name)
    if found is None:
        raise HTTPError(404, "not-found", f"no op {name!r}")
    return found
