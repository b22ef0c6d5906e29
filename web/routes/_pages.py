"""The catalog's HTML pages (Jinja2, autoescaped, no JavaScript)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from packaging.utils import canonicalize_name
from pydantic import Field
from starlette.concurrency import run_in_threadpool

from opmarket.web._state import AppState, app_state
from opmarket.web.catalog._catalog import OpDetail, PackageDetail, SearchError, get_op
from opmarket.web.catalog._hosted import HOSTED
from opmarket.web.catalog._models import FileStatus
from opmarket.web.catalog._search import SearchQuery
from opmarket.web.catalog._showcase import readme_html
from opmarket.web.routes._results import (
    cached_result,
    cached_search,
    kept_package,
    look_at_changes,
    package_details,
)

__all__ = ["router"]

router = APIRouter(include_in_schema=False)
_env = Environment(
    loader=FileSystemLoader(Path(__file__).parent.parent / "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)

DEVICES = ("CPU", "GPU")
DTYPES = (
    "float",
    "double",
    "half",
    "bfloat16",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)
STATUSES = (FileStatus.VALIDATED, FileStatus.PENDING, FileStatus.REJECTED, HOSTED)
PER_PAGE = 50


def _render(request: Request, name: str, code: int = 200, **context: Any) -> HTMLResponse:
    base = str(request.base_url).rstrip("/")
    page = _env.get_template(name).render(
        index_url=f"{base}/simple/", upload_url=f"{base}/legacy/", **context
    )
    return HTMLResponse(page, status_code=code)


class HomeQuery(SearchQuery):
    """The search's filters, and which page of the listing."""

    page: int = Field(default=1, ge=1)


@router.get("/")
async def home(
    request: Request,
    *,
    asked: Annotated[HomeQuery, Query()],
) -> HTMLResponse:
    q, device, dtype, status, page = asked.q, asked.device, asked.dtype, asked.status, asked.page
    cuda, compute_capability = asked.cuda, asked.compute_capability
    gpu = {"cuda": cuda, "compute_capability": compute_capability}  # _gpu_index's filters
    state = app_state(request)
    seen = state.pages.generation  # the page is kept only if the catalog stays as it is
    try:  # kept until the catalog changes, as the JSON API's (opmarket.web.routes._results)
        found, _ = await cached_search(state, asked, offset=(page - 1) * PER_PAGE, limit=PER_PAGE)
    except SearchError as exc:
        return _render(request, "bad_request.html", 400, why=str(exc))
    # The page itself too (rendering 50 rows costs more than the search does, once kept),
    # per base URL, as the search has it: dropped with it.
    key = ("home", str(request.base_url), q, device, dtype, status, page, *gpu.values())
    kept = state.pages.get_result(key)
    if kept is not None:
        return HTMLResponse(kept[1])
    query = urlencode(
        {k: v for k, v in (("q", q), ("device", device), ("dtype", dtype), ("status", status)) if v}
        | {k: v for k, v in gpu.items() if v}
    )
    pages = max((found.total + PER_PAGE - 1) // PER_PAGE, 1)
    if found.capped:  # at least this many: there is a next page while this one is full
        pages = max(pages, page + (len(found.packages) == PER_PAGE))
    rendered = await run_in_threadpool(  # not on the event loop: it takes milliseconds
        _render,
        request,
        "home.html",
        packages=found.packages,
        total=found.total,
        capped=found.capped,
        q=q,
        device=device,
        dtype=dtype,
        status=status,
        cuda=cuda,
        compute_capability=compute_capability,
        devices=DEVICES,
        dtypes=DTYPES,
        statuses=STATUSES,
        page=page,
        pages=pages,
        query=query,
    )
    state.pages.keep_result(key, None, bytes(rendered.body), seen=seen)
    return rendered


#: How many renderings of one project's page (one per base URL the clients use, from their
#: Host header) are kept: the least recently used goes first, so made-up Host headers cannot
#: keep the real host's page out.
PAGES_PER_PROJECT = 4


@router.get("/project/{name}/")
async def package(name: str, request: Request) -> HTMLResponse:
    """A project's page, rendered once per change of the project (kept with its simple
    pages, see :mod:`opmarket.web.routes._cache`) for each of a few base URLs."""
    state = app_state(request)
    normalized = str(canonicalize_name(name))
    key = f"project page {request.base_url}"
    await look_at_changes(state)
    seen = state.pages.generation  # the page is kept only if the project stays as it is
    page = state.pages.get_file(normalized, key, kind="page")
    if page is not None:
        return HTMLResponse(page)
    details = kept_package(state, normalized)  # the JSON API's, kept alike
    return await run_in_threadpool(_package, state, request, name, details, key=key, seen=seen)


def _package(
    state: AppState, request: Request, name: str, details: bytes | None, *, key: str, seen: object
) -> HTMLResponse:
    """The page from the project's details (read first when they are not kept: one
    crossing to a thread for a page not kept, not two)."""
    if details is None:
        details = package_details(state, str(canonicalize_name(name)))
    if details is None:
        return _render(request, "missing.html", 404, what=f"package {name}")
    found = PackageDetail.model_validate_json(details)
    readme = readme_html(state.storage, found.readme_sha256)
    page = _render(request, "package.html", p=found, readme=Markup(readme))
    state.pages.keep_file(
        found.normalized, key, bytes(page.body), seen=seen, kind="page", most=PAGES_PER_PROJECT
    )
    return page


@router.get("/op/{name}/")
async def op(name: str, request: Request) -> HTMLResponse:
    hit = await cached_result(
        app_state(request), ("op", name), partial(get_op, name=name), OpDetail
    )
    if hit is None:
        return _render(request, "missing.html", 404, what=f"op {name}")
    return await run_in_threadpool(_render, request, "op.html", op=hit[0])
