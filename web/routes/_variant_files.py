"""The index's side of PEP 825 variant wheels: ``{name}-{version}-variants.json`` served
beside a project's simple pages (``/simple/{project}/{name}-{version}-variants.json``),
linked from those pages with its sha256 as the PEP asks, and the upload check that keeps a
release's variant metadata consistent.

The file is generated from the release's validated variant wheels (PEP 825 allows either
that or an upload by the author), merged in the order they were published, once per change
of the project (kept with its simple pages, see :mod:`opmarket.web.routes._cache`); it grows as
more variant wheels of the release are validated, so an installer that locked its hash
sees a change then, but a label never changes its meaning: every upload of a variant
wheel, a rejected one's again included, is checked against the release's others, and
the caps of :mod:`opmarket.web.wheels._variants` bound its size. Installers that know no
variants skip both the file (not a distribution) and the variant wheels (their six-part
names are not valid wheel names to them).
"""

from __future__ import annotations

import hashlib
import html
import json
import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol

from fastapi import APIRouter, Request, Response
from packaging.utils import canonicalize_name
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from opmarket.web._errors import HTTPError
from opmarket.web._state import AppState
from opmarket.web.catalog._models import File, FileStatus, Project, Release
from opmarket.web.routes._cache import read_changes
from opmarket.web.wheels._filename import WheelName
from opmarket.web.wheels._inspect import WheelInfo
from opmarket.web.wheels._variants import (
    VariantError,
    VariantsFile,
    check_consistent,
    variants_file,
)

__all__ = ["check_release_variants", "release_variants", "router", "variant_links"]

router = APIRouter(tags=["simple"])

#: How many releases' variants.json files of one project are kept (least recently used out).
VARIANTS_PER_PROJECT = 32


def _published_order() -> tuple[Any, Any]:
    """The order files were published in, for queries: by validation date, a file not yet
    validated (NULL) after every validated one, then by id. ``_published`` is the same in
    Python; every merge and check of a release's variant wheels uses one of the two."""
    return File.validated.asc().nulls_last(), File.id.asc()


class Published(Protocol):
    """What a release's variants are merged from: a validated file's row (a
    :class:`~opmarket.web.catalog._models.File`, or the columns the simple pages read)."""

    @property
    def id(self) -> int: ...
    @property
    def filename(self) -> str: ...
    @property
    def validated(self) -> datetime | None: ...
    @property
    def variant(self) -> dict[str, Any] | None: ...


def _published(f: Published) -> tuple[bool, datetime, int]:
    return (f.validated is None, f.validated or datetime.min, f.id)


def release_variants(name: str, rows: Sequence[tuple[Published, str]]) -> dict[str, VariantsFile]:
    """The variants.json of each release among ``rows`` (validated files and their
    versions) that has variant wheels, by version; each merged in the order they were
    published (validated), so a later wheel never changes what a label meant."""
    by_version: dict[str, list[tuple[str, dict[str, Any]]]] = defaultdict(list)
    for f, version in sorted(rows, key=lambda row: _published(row[0])):
        if f.variant is not None:
            by_version[version].append((f.filename, f.variant))
    found = {}
    for version, items in by_version.items():
        made = merged(name, version, items)
        if made is not None:
            found[version] = made
    return found


#: How many merges ``merged`` remembers (least recently used out).
MERGES_KEPT = 256
_merges: OrderedDict[str, VariantsFile | None] = OrderedDict()
_building: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def merged(name: str, version: str, items: list[tuple[str, dict[str, Any]]]) -> VariantsFile | None:
    """:func:`~opmarket.web.wheels._variants.variants_file` of these inputs, merged once: the
    simple page's render and the variants.json route ask for the same release's, and
    requests that find neither kept come at once. Keyed by a digest of the inputs, so a
    merge remembered is never stale; one build per key at a time, the others wait for it."""
    key = hashlib.sha256(json.dumps([name, version, items], sort_keys=True).encode()).hexdigest()
    with _guard:
        if key in _merges:
            _merges.move_to_end(key)
            return _merges[key]
        lock = _building.setdefault(key, threading.Lock())
    with lock:
        with _guard:
            if key in _merges:
                return _merges[key]
        made = variants_file(name, version, items)
        with _guard:
            _merges[key] = made
            while len(_merges) > MERGES_KEPT:
                _merges.popitem(last=False)
            _building.pop(key, None)
    return made


def variant_links(
    project: str, rows: Sequence[tuple[Published, str]]
) -> tuple[str, list[dict[str, Any]]]:
    """The simple pages' entries for the variants.json files of ``rows``: HTML anchors and
    PEP 691 file objects (same URL and sha256)."""
    anchors, entries = [], []
    for _version, made in sorted(release_variants(project, rows).items()):
        url = f"/simple/{project}/{made.filename}"
        href = f"{html.escape(url)}#sha256={made.sha256}"
        anchors.append(f'<a href="{href}">{html.escape(made.filename)}</a><br>\n')
        entries.append(
            {
                "filename": made.filename,
                "url": url,
                "hashes": {"sha256": made.sha256},
                "size": len(made.content),  # PEP 700 asks every file's size
            }
        )
    return "".join(anchors), entries


def check_release_variants(session: Session, info: WheelInfo) -> None:
    """HTTPError 400 when the variant wheel ``info`` contradicts the variant metadata of
    its release's other variant wheels (not rejected ones), in upload order, or would
    pass the caps of :func:`~opmarket.web.wheels._variants.check_consistent`."""
    if info.variant is None:
        return
    rows = session.execute(
        select(File.filename, File.variant)
        .join(Release)
        .join(Project)
        .where(
            Project.normalized == info.normalized,
            File.variant.is_not(None),
            File.status != FileStatus.REJECTED,
            File.filename != info.filename,
        )
        .order_by(*_published_order())
    ).all()
    from packaging.version import Version

    released = [
        (r.filename, r.variant)
        for r in rows
        if r.variant is not None and WheelName.parse(r.filename).version == Version(info.version)
    ]
    try:
        check_consistent(released, info.filename, info.variant)
    except VariantError as exc:
        raise HTTPError(400, "variant-conflict", str(exc)) from None


@router.get(
    "/simple/{project}/{filename}",
    summary="A release's variants.json (PEP 825 index-level metadata)",
)
async def variants_json(project: str, filename: str, request: Request) -> Response:
    state: AppState = request.app.state.opmarket
    normalized = str(canonicalize_name(project))
    if not filename.endswith("-variants.json"):
        raise HTTPError(404, "not-found", f"no file {filename!r} under /simple/{normalized}/")
    if state.pages.due():
        await run_in_threadpool(state.pages.sync, *read_changes(state.db.engine))
    content = state.pages.get_file(normalized, filename, kind="variants")
    if content is None:
        content = await run_in_threadpool(_build, state, normalized, filename)
    return Response(content, media_type="application/json")


def _build(state: AppState, normalized: str, filename: str) -> bytes:
    """The variants.json named ``filename``, from the validated variant wheels of its one
    release, kept until the project changes."""
    seen = state.pages.generation
    prefix = re.sub(r"[-_.]+", "_", normalized) + "-"
    version = filename.removeprefix(prefix).removesuffix("-variants.json")
    if not filename.startswith(prefix):
        raise HTTPError(404, "not-found", f"no {filename!r} for {normalized!r}")
    with state.db.session() as session:
        rows = session.execute(
            select(File.filename, File.variant)
            .join(Release)
            .join(Project)
            .where(
                Project.normalized == normalized,
                Release.version == version,
                File.status == FileStatus.VALIDATED,
                File.variant.is_not(None),
            )
            .order_by(*_published_order())
        ).all()
    made = merged(normalized, version, [(r.filename, r.variant) for r in rows])
    if made is None or made.filename != filename:
        raise HTTPError(404, "not-found", f"no {filename!r} for {normalized!r}")
    return state.pages.keep_file(
        normalized, filename, made.content, seen=seen, kind="variants", most=VARIANTS_PER_PROJECT
    )
