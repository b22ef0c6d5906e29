"""The catalog as JSON (``/api/...``), documented by the OpenAPI schema at /openapi.json."""

from __future__ import annotations

from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from opmarket.web._catalog import (
    OpDetail,
    PackageDetail,
    SearchError,
    SearchResult,
    get_op,
    get_package,
)
from opmarket.web._errors import HTTPError
from opmarket.web._results import cached_result, cached_search
from opmarket.web._state import SessionDep, app_state

__all__ = ["router"]

router = APIRouter(prefix="/api", tags=["catalog"])

# Typed as FastAPI's ``responses`` parameter is.
_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": 'Not found: `{"error": {"status", "code", "message"}}`'}
}


# Answered from memory until the catalog changes (opmarket.web._results): the search, and
# its JSON, are computed once per change.
@router.get("/packages", summary="Search packages", response_model=SearchResult)
async def packages(  # noqa: PLR0917  (each query parameter is an argument)
    request: Request,
    q: Annotated[str, Query(description="part of a package or op name")] = "",
    device: Annotated[str, Query(description="CPU or GPU: has kernels for it")] = "",
    dtype: Annotated[str, Query(description="e.g. float, int32: has kernels for it")] = "",
    status: Annotated[str, Query(description="pending, validated or rejected")] = "",
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    cuda: Annotated[str, Query(description="a CUDA major, e.g. 13: has device code for it")] = "",
    compute_capability: Annotated[
        str, Query(description="e.g. 8.6: has device code that runs on such a GPU")
    ] = "",
    after: Annotated[str, Query(description="a cursor: the next_after of the previous page")] = "",
) -> Response:
    try:
        found = await cached_search(
            app_state(request),
            q,
            device,
            dtype,
            status,
            offset=offset,
            limit=limit,
            cuda=cuda,
            compute_capability=compute_capability,
            after=after,
        )
    except SearchError as exc:
        raise HTTPError(400, "bad-query", str(exc)) from None
    return Response(found[1], media_type="application/json")


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
    response_model=OpDetail,
)
async def op(name: str, request: Request) -> Response:
    found = await cached_result(
        app_state(request), ("op", name), partial(get_op, name=name), OpDetail
    )
    if found is None:
        raise HTTPError(404, "not-found", f"no op {name!r}")
    return Response(found[1], media_type="application/json")
