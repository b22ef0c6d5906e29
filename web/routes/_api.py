"""The catalog as JSON (``/api/...``), documented by the OpenAPI schema at /openapi.json."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import Field

from opmarket.web._errors import HTTPError
from opmarket.web._state import app_state
from opmarket.web.catalog._catalog import (
    OpDetail,
    PackageDetail,
    SearchError,
    SearchResult,
    get_op,
)
from opmarket.web.catalog._search import SearchQuery
from opmarket.web.routes._results import cached_package, cached_result, cached_search

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


# Answered from memory until the catalog changes (opmarket.web.routes._results): the search,
# and its JSON, are computed once per change.
@router.get("/packages", summary="Search packages", response_model=SearchResult)
async def packages(request: Request, query: Annotated[PackagesQuery, Query()]) -> Response:
    try:
        found = await cached_search(
            app_state(request), query, offset=query.offset, limit=query.limit, after=query.after
        )
    except SearchError as exc:
        raise HTTPError(400, "bad-query", str(exc)) from None
    return Response(found[1], media_type="application/json")


@router.get(
    "/packages/{name}",
    summary="One package: versions, files, ops, validation",
    responses=_ERRORS,
    response_model=PackageDetail,
)
async def package(name: str, request: Request) -> Response:
    found = await cached_package(app_state(request), name)  # kept until the project changes
    if found is None:
        raise HTTPError(404, "not-found", f"no package {name!r}")
    return Response(found, media_type="application/json")


@router.get(
    "/ops/{name}",
    summary="Which packages provide an op, kernels per device and dtype",
    responses=_ERRORS,
    response_model=OpDetail,
)
async def op(name: str, request: Request) -> Response:
    found = await cached_result(
        app_state(request), ("op", name), partial(get_op, name=name), OpDetail
    )
    if found is None:
        raise HTTPError(404, "not-found", f"no op {name!r}")
    return Response(found[1], media_type="application/json")
