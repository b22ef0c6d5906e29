"""What the catalog shows, as typed data: the HTML pages and the JSON API read the same."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from packaging.utils import canonicalize_name
from pydantic import BaseModel
from sqlalchemy import ColumnElement, bindparam, select
from sqlalchemy.orm import Session

from opmarket.registry._metadata import version_key
from opmarket.web.catalog._hosted import HOSTED
from opmarket.web.catalog._models import (
    File,
    KernelEntry,
    OpEntry,
    Project,
    ProjectSummary,
    Release,
    User,
)
from opmarket.web.catalog._queries import search, search_words
from opmarket.web.catalog._search import MAX_OFFSET, MAX_QUERY, SearchError, SearchQuery
from opmarket.web.catalog._showcase import python_calls
from opmarket.web.gpu._index import gpu_filter
from opmarket.web.routes._simple import file_url
from opmarket.web.wheels._filename import WheelName

__all__ = [
    "MAX_OFFSET",
    "MAX_QUERY",
    "FileInfo",
    "KernelInfo",
    "OpDetail",
    "OpInfo",
    "PackageDetail",
    "PackageSummary",
    "Provider",
    "SearchError",
    "SearchResult",
    "get_op",
    "get_package",
    "search_key",
    "search_packages",
]


class KernelInfo(BaseModel):
    op: str
    device: str
    dtypes: str
    status: str  # passed, failed, skipped, "gpu: not run"
    message: str = ""


class OpInfo(BaseModel):
    name: str
    signature: str
    summary: str = ""
    python: str = ""  # the Python call with defaults: clip(x, *, clip_min=0.0, clip_max=6.0)


class FileInfo(BaseModel):
    filename: str
    version: str
    url: str
    sha256: str
    size: int
    uploaded: datetime
    status: str  # pending, validated, rejected; hosted (by the operator, not validated)
    yanked: bool
    yanked_reason: str
    devices: list[str]  # badges: the devices it has kernels for
    log: str
    steps: list[dict[str, Any]]
    compat: dict[str, Any] | None
    # The static GPU checks' findings, null without device code: cuda, sass, ptx,
    # min_compute_capability (and min_driver, manylinux, libraries, tools).
    gpu: dict[str, Any] | None = None
    variant: str | None = None  # a PEP 825 variant wheel's label
    # Which Pythons and framework releases its native code loads with: rows of python,
    # implementation, framework, version, works, problems ([]: no native code; null: not
    # checked). See web/validation/_loads.py.
    loads_with: list[dict[str, Any]] | None = None
    python_tag: str = ""  # the wheel's tags, from its file name
    abi_tag: str = ""
    platform_tag: str = ""


class PackageSummary(BaseModel):
    name: str
    normalized: str
    summary: str
    latest: str
    status: str
    ops: list[str]
    devices: list[str]


class PackageDetail(PackageSummary):
    owner: str
    versions: list[str]
    files: list[FileInfo]
    op_details: list[OpInfo]
    kernels: list[KernelInfo]
    readme_sha256: str = ""  # the newest file's METADATA, whose README the page renders


class Provider(BaseModel):
    package: str
    normalized: str
    version: str
    filename: str
    status: str
    signature: str
    kernels: list[KernelInfo]


class OpDetail(BaseModel):
    name: str
    summary: str
    providers: list[Provider]


def _summary(row: ProjectSummary) -> PackageSummary:
    return PackageSummary(
        name=row.name,
        normalized=row.normalized,
        summary=row.summary,
        latest=row.latest_version,
        status=row.status,
        ops=[o for o in row.ops.split("\n") if o],
        devices=row.devices.split(),
    )


class SearchResult(BaseModel):
    total: int
    offset: int
    packages: list[PackageSummary]
    # True when total is a lower bound: a search with words (q) or that combines filters
    # (status with anything, say) stops counting at 1,000 matches; the pages go on.
    capped: bool = False
    # The cursor of the next page (pass it as ``after``): the last package's normalized
    # name when this page is full, else None (this page is the last).
    next_after: str | None = None


#: No filter: every package.
_ANY = SearchQuery()


def search_key(
    query: SearchQuery, *, offset: int = 0, limit: int = 100, after: str = ""
) -> tuple[object, ...]:
    """What a search's result depends on (``q`` by its words, ``device`` and ``dtype`` in
    the case they are compared in): equal keys, equal results (:func:`search_packages`'s
    arguments). SearchError when the search is refused (a filter longer than
    :data:`MAX_QUERY`, ``offset`` past :data:`MAX_OFFSET`)."""
    fields = (
        ("q", query.q),
        ("device", query.device),
        ("dtype", query.dtype),
        ("status", query.status),
        ("after", after),
    )
    for field, value in fields:
        if len(value) > MAX_QUERY:
            raise SearchError(
                f"{field} is {len(value)} characters long, more than {MAX_QUERY}: {value[:40]!r}..."
            )
    if offset > MAX_OFFSET:
        raise SearchError(f"the listing ends at {MAX_OFFSET:,} packages; {offset:,} is past it")
    words = tuple(search_words(query.q))
    gpu = (query.cuda[:MAX_QUERY], query.compute_capability[:MAX_QUERY])
    device, dtype = query.device.upper(), query.dtype.lower()
    return ("search", words, device, dtype, query.status, offset, limit, *gpu, after)


def search_packages(
    session: Session,
    query: SearchQuery = _ANY,
    *,
    where: Iterable[ColumnElement[bool]] = (),
    offset: int = 0,
    limit: int = 100,
    after: str = "",
) -> SearchResult:
    """Packages whose name, summary or ops have words starting with the words of the
    query's ``q``, whose latest file has kernels for its ``device`` and ``dtype``, has its
    ``status`` and device code for its ``cuda`` and ``compute_capability`` (every filter
    optional; ``where``: more SQL predicates on ProjectSummary), by name, ``limit``
    of them from ``offset`` (after the cursor ``after``, a normalized name, when given: see
    ``next_after``), all in SQL (opmarket.web.catalog._queries). SearchError when a filter
    is longer than :data:`MAX_QUERY` or ``offset`` is past :data:`MAX_OFFSET`."""
    search_key(query, offset=offset, after=after)  # SearchError
    gpu_match = gpu_filter(query.cuda[:MAX_QUERY], query.compute_capability[:MAX_QUERY])
    if gpu_match is not None:  # CUDA major, runs on compute capability X.Y (_gpu_index)
        where = [*where, gpu_match]
    page = search(session, query, where=where, offset=offset, limit=limit, after=after)
    full = len(page.rows) == limit
    return SearchResult(
        total=page.total,
        offset=offset,
        packages=[_summary(r) for r in page.rows],
        capped=page.capped,
        next_after=page.rows[-1].normalized if full and page.rows else None,
    )


def _file_info(f: File, version: str, hosted: bool, devices: list[str]) -> FileInfo:
    wheel = WheelName.parse(f.filename)  # stored files passed inspect_wheel's checks
    result = f.result or {}
    steps = result.get("steps", [])
    compat = result.get("compat")
    return FileInfo(
        filename=f.filename,
        version=version,
        url=file_url(f.sha256, f.filename),
        sha256=f.sha256,
        size=f.size,
        uploaded=f.uploaded,
        status=HOSTED if hosted else f.status,
        yanked=f.yanked,
        yanked_reason=f.yanked_reason,
        devices=devices,
        log=f.log,
        steps=steps if isinstance(steps, list) else [],
        compat=compat if isinstance(compat, dict) else None,
        gpu=f.gpu,
        loads_with=f.loads_with,
        variant=wheel.variant,
        **wheel.tag_parts,
    )


def _kernel(k: KernelEntry) -> KernelInfo:
    return KernelInfo(op=k.op, device=k.device, dtypes=k.dtypes, status=k.status, message=k.message)


# get_package's four queries, built once: built on every call they cost about a third of
# its CPU (a package page not kept is mostly this function).
_PACKAGE = (
    select(ProjectSummary, User.name, Project.hosted)
    .join(Project, Project.id == ProjectSummary.project_id)
    .join(User, User.id == Project.owner_id)
    .where(ProjectSummary.normalized == bindparam("normalized"))
)
_RELEASES = (  # a release without files still names its version
    select(Release.version, File)
    .select_from(Release)
    .outerjoin(File, File.release_id == Release.id)
    .where(Release.project_id == bindparam("project_id"))
)
_KERNELS = (
    select(
        KernelEntry.file_id,
        KernelEntry.op,
        KernelEntry.device,
        KernelEntry.dtypes,
        KernelEntry.status,
        KernelEntry.message,
    )
    .join(File, KernelEntry.file_id == File.id)
    .join(Release, File.release_id == Release.id)
    .where(Release.project_id == bindparam("project_id"))
    .order_by(KernelEntry.file_id, KernelEntry.id)
)
_OPS = (
    select(OpEntry.op, OpEntry.signature, OpEntry.summary)
    .where(OpEntry.file_id == bindparam("file_id"))
    .order_by(OpEntry.op)
)


def get_package(session: Session, name: str) -> PackageDetail | None:
    """One package's page in four queries on this project alone: its summary row with its
    owner, its releases with their files, the kernels of those files (plain rows), and the
    ops of the latest file."""
    found = session.execute(_PACKAGE, {"normalized": str(canonicalize_name(name))}).first()
    if found is None:
        return None
    row, owner, hosted = found
    releases = session.execute(_RELEASES, {"project_id": row.project_id}).all()
    kernels: dict[int, list[KernelInfo]] = defaultdict(list)
    for k in session.execute(_KERNELS, {"project_id": row.project_id}):
        kernels[k.file_id].append(
            KernelInfo(
                op=k.op, device=k.device, dtypes=k.dtypes, status=k.status, message=k.message
            )
        )
    files = sorted(
        ((f, version) for version, f in releases if f is not None),
        key=lambda fv: (version_key(fv[1]), fv[0].filename),
        reverse=True,
    )
    latest = next((f for f, _ in files if f.id == row.latest_file_id), None)
    ops = session.execute(_OPS, {"file_id": latest.id}).all() if latest else []
    calls = python_calls(latest.opset) if latest else {}
    return PackageDetail(
        **_summary(row).model_dump(),
        owner=owner,
        versions=sorted({version for version, _ in releases}, key=version_key, reverse=True),
        files=[
            _file_info(f, version, hosted, sorted({k.device for k in kernels[f.id]}))
            for f, version in files
        ],
        op_details=[
            OpInfo(name=o.op, signature=o.signature, summary=o.summary, python=calls.get(o.op, ""))
            for o in ops
        ],
        kernels=kernels[latest.id] if latest else [],
        readme_sha256=latest.metadata_sha256 if latest else "",
    )


def get_op(session: Session, name: str) -> OpDetail | None:
    """Which files provide the op ``name``, with their kernels for it: two queries of plain
    rows (the op's entries with their file, release and project; its kernels in those
    files), no objects loaded."""
    rows = session.execute(
        select(
            OpEntry.file_id,
            OpEntry.signature,
            OpEntry.summary,
            File.filename,
            File.status,
            Release.version,
            Project.name,
            Project.normalized,
        )
        .join(File, OpEntry.file_id == File.id)
        .join(Release, File.release_id == Release.id)
        .join(Project, Release.project_id == Project.id)
        .where(OpEntry.op == name)
        .order_by(OpEntry.id)
    ).all()
    if not rows:
        return None
    by_file = {r.file_id: r for r in rows}  # the last entry of a file, as it was
    kernels: dict[int, list[KernelInfo]] = defaultdict(list)
    for k in session.execute(
        select(KernelEntry)
        .where(
            KernelEntry.op == name,
            KernelEntry.file_id.in_(select(OpEntry.file_id).where(OpEntry.op == name)),
        )
        .order_by(KernelEntry.id)
    ).scalars():
        kernels[k.file_id].append(_kernel(k))
    providers = [
        Provider(
            package=r.name,
            normalized=r.normalized,
            version=r.version,
            filename=r.filename,
            status=r.status,
            signature=r.signature,
            kernels=kernels[r.file_id],
        )
        for r in sorted(by_file.values(), key=lambda r: (r.normalized, version_key(r.version)))
    ]
    return OpDetail(name=name, summary=rows[0].summary, providers=providers)
