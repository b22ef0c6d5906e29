"""The catalog's queries, in SQL: the per-project summary and how it is kept, full-text
search, the device and dtype filters, paging. The HTML catalog, the JSON API and the simple
index read these; nothing here loads every project.

Search is full text on both databases: SQLite's FTS5 table ``project_search`` and a
PostgreSQL ``tsvector`` column with a GIN index (both made by migration 0006) over a
project's name, summary and the op names of its latest file. A query is split into words
(letters and digits); every word must start a word of the project (``doub`` finds
``opm-double``, ``test>double`` finds the op ``Test>Double``). PostgreSQL counts matches
through a second GIN index, of every prefix of every word and of the devices (migration
0011), where two words, or a word and a device, meet before any row is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from packaging.utils import canonicalize_name
from sqlalchemy import (
    ColumnElement,
    Connection,
    Integer,
    and_,
    cast,
    delete,
    func,
    insert,
    literal,
    literal_column,
    select,
    table,
    text,
    true,
)
from sqlalchemy.dialects.postgresql import TSQUERY
from sqlalchemy.orm import Session

from opmarket.registry._metadata import version_key
from opmarket.web._status import HOSTED
from opmarket.web.catalog._models import (
    File,
    FileStatus,
    KernelEntry,
    OpEntry,
    Project,
    ProjectKernel,
    ProjectSummary,
    Release,
)
from opmarket.web.catalog._search import SearchQuery

__all__ = [
    "Page",
    "dtypes_of",
    "listed_projects",
    "refresh_summary",
    "search",
    "search_words",
    "summary_of",
]

S = ProjectSummary
_WORD = re.compile(r"[^\W_]+")


def search_words(q: str) -> list[str]:
    """The words of a search, lower case: runs of letters and digits (at most 16)."""
    return _WORD.findall(q.lower())[:16]


def dtypes_of(dtypes: str) -> set[str]:
    """The dtypes a kernel entry's binding names: ``"T=float|double, U=int32"`` gives
    float, double and int32; a binding without type attributes gives ``{""}``."""
    out = {
        t.strip().lower()
        for part in dtypes.split(",")
        if "=" in part
        for t in part.split("=", 1)[1].split("|")
        if t.strip()
    }
    return out or {""}


def _latest(rows: Sequence[tuple[int, str, str, datetime]]) -> tuple[int, str, str] | None:
    """(file id, version, status) of the newest validated file, else of the newest file."""
    if not rows:
        return None
    ordered = sorted(rows, key=lambda r: (version_key(r[1]), r[3], r[0]))
    validated = [r for r in ordered if r[2] == FileStatus.VALIDATED]
    fid, version, status, _ = (validated or ordered)[-1]
    return fid, version, status


def refresh_summary(session: Session | Connection, project_id: int) -> None:
    """Recompute one project's summary row and its (device, dtype) rows from its files;
    call it in the transaction that changed the project (upload, verdict, yank).

    The project's row is locked first (FOR UPDATE; SQLite has one writer anyway), so two
    transactions refreshing one project take turns, and the second reads what the first
    committed instead of both rewriting the same rows from stale reads."""
    project = session.execute(
        select(Project.name, Project.normalized, Project.summary, Project.hosted)
        .where(Project.id == project_id)
        .with_for_update()
    ).one()
    files = session.execute(
        select(File.id, Release.version, File.status, File.uploaded)
        .join(Release, File.release_id == Release.id)
        .where(Release.project_id == project_id)
    ).all()
    latest = _latest([tuple(r) for r in files])  # type: ignore[misc]
    ops: list[str] = []
    pairs: set[tuple[str, str]] = set()
    if latest is not None:
        ops = sorted(set(session.scalars(select(OpEntry.op).where(OpEntry.file_id == latest[0]))))
        for device, dtypes in session.execute(
            select(KernelEntry.device, KernelEntry.dtypes)
            .where(KernelEntry.file_id == latest[0])
            .distinct()
        ):
            pairs |= {(device, t) for t in dtypes_of(dtypes)}
    session.execute(delete(ProjectKernel).where(ProjectKernel.project_id == project_id))
    session.execute(delete(S).where(S.project_id == project_id))
    session.execute(
        insert(S).values(
            project_id=project_id,
            name=project.name,
            normalized=project.normalized,
            summary=project.summary,
            latest_file_id=latest[0] if latest else None,
            latest_version=latest[1] if latest else "",
            status=HOSTED if project.hosted else latest[2] if latest else FileStatus.PENDING,
            listed=any(r[2] == FileStatus.VALIDATED for r in files),
            ops="\n".join(ops),
            devices=" ".join(sorted({d for d, _ in pairs})),
        )
    )
    if pairs:
        session.execute(
            insert(ProjectKernel),
            [{"project_id": project_id, "device": d, "dtype": t} for d, t in sorted(pairs)],
        )


def _text_match(dialect: str, words: list[str], *, scan: bool = False) -> ColumnElement[bool]:
    if dialect == "postgresql":
        query = " & ".join(f"{w}:*" for w in words)
        return literal_column("project_summaries.search").op("@@")(
            func.to_tsquery(literal_column("'simple'"), query)
        )
    match = " ".join(f'"{w}"*' for w in words)
    rowids = (
        select(literal_column("rowid", Integer))
        .select_from(table("project_search"))
        .where(text("project_search MATCH :match").bindparams(match=match))
    )
    # Scanning in name order, "+ 0" keeps SQLite from reading the matches by rowid first.
    return (S.project_id + 0 if scan else S.project_id).in_(rowids)


def _kernel_conditions(device: str, dtype: str) -> list[ColumnElement[bool]]:
    conditions = []
    if device:
        conditions.append(ProjectKernel.device == device.upper())
    if dtype:
        conditions.append(ProjectKernel.dtype == dtype.lower())
    return conditions


def _kernel_match(device: str, dtype: str, *, per_row: bool) -> ColumnElement[bool]:
    """The device/dtype filter: a set of project ids (cheap when it is small), or per row a
    lookup in project_kernels' primary key (cheap when rows are read in name order anyway
    and most match)."""
    conditions = _kernel_conditions(device, dtype)
    if per_row:
        return (
            select(ProjectKernel.project_id)
            .where(ProjectKernel.project_id == S.project_id, *conditions)
            .exists()
        )
    return S.project_id.in_(select(ProjectKernel.project_id).where(and_(*conditions)))


def _names_device(device: str) -> ColumnElement[bool]:
    """The summary's ``devices`` (its latest file's devices, space-separated) has ``device``
    among them: tested in the row already read, where project_kernels needs a lookup per
    row. A device name with a space in it could make it true for a project without that
    device, never false for one with it: a cheap test before the exact one, not instead."""
    padded = literal(" ") + S.devices + literal(" ")
    return func.strpos(padded, f" {device.upper()} ") > 0


def _device_match(session: Session, device: str, dtype: str) -> list[ColumnElement[bool]]:
    """PostgreSQL's device (and dtype) filter: the devices column, then project_kernels'
    primary key for the rows that pass, unless the devices column says it all (a device
    alone, without a space, when no kernel's device has a space in it: migration 0011's
    partial index tells, in one lookup)."""
    names = _names_device(device)
    if not dtype and " " not in device and not _spaced_devices(session):
        return [names]
    return [names, _kernel_match(device, dtype, per_row=True)]


def _spaced_devices(session: Session) -> bool:
    """Whether a kernel's device has a space in it (the condition of 0011's partial index,
    written out: a bound parameter would not prove it)."""
    found = session.scalar(text("SELECT 1 FROM project_kernels WHERE device LIKE '% %' LIMIT 1"))
    return found is not None


#: PostgreSQL's index of every prefix of every word, and of the devices (migration 0011):
#: the counts of searches whose words are all ASCII letters and digits (one word each to
#: PostgreSQL's parser, as to ours) of at most PREFIX_MOST characters read it.
PREFIX_MOST = 12
_ASCII_WORD = re.compile(r"[a-z0-9]+")
#: A word PostgreSQL's parser reads as two: a number with an exponent, then letters
#: (``1e5abc`` is ``1e5 <-> abc``, a phrase, which the prefix index, without positions,
#: never matches).
_SPLIT_WORD = re.compile(r"[0-9]+e[0-9]+[a-z]")
_PREFIXES: ColumnElement[str] = literal_column(
    "opmarket_search_prefixes(project_summaries.name || ' ' || project_summaries.summary"
    " || ' ' || project_summaries.ops, project_summaries.devices)"
)


def _prefix_match(words: list[str], device: str) -> ColumnElement[bool] | None:
    """The words (and the device) as exact words of the prefix index: ``conv gemm`` is two
    lists read side by side, where ``conv:* & gemm:*`` merges 60 lists per word first;
    None when a word is not one the index holds. A device is `` GPU`` there (no word
    starts with a space), from the devices column: a device name with a space in it is
    not one word of it, so such a device is left to the caller's exact test alone."""
    if not all(
        len(w) <= PREFIX_MOST and _ASCII_WORD.fullmatch(w) and not _SPLIT_WORD.match(w)
        for w in words
    ):
        return None
    query: ColumnElement[object] = func.to_tsquery(literal_column("'simple'"), " & ".join(words))
    if device and " " not in device:
        name = f" {device.upper()}".replace("\\", "\\\\").replace("'", "''")
        query = query.op("&&")(cast(literal(f"'{name}'"), TSQUERY))
    return _PREFIXES.op("@@")(query)


#: Above this many matches, SQLite reads the summaries in name order and tests each row
#: (about 50 x N / total rows read for a page) instead of sorting every match. (PostgreSQL's
#: planner makes this choice itself, from its statistics.)
SCAN_ABOVE = 1000
#: Searches with words or filters count their matches up to this many (a broad word's
#: full count reads every match: 20-30 ms on PostgreSQL at 100,000 projects, which
#: rechecks each row the GIN index finds).
COUNT_LIMIT = 1000
#: On SQLite, words with a status whose projects are at most this many (rejected and pending
#: ones, typically) read that status's index in name order, each row looked up in the text's
#: matches; with a larger status (validated) each text match is looked up by project id
#: instead. The wrong way round cost up to ten times more (every one of 19,000 matches of a
#: broad word looked up, to find 478 rejected ones).
STATUS_SCAN = 20_000


@dataclass(frozen=True)
class Page:
    """One page of a search: how many match in all (at least, when ``capped``), and the
    summary rows of this page."""

    total: int
    rows: list[ProjectSummary]
    capped: bool = False


def search(
    session: Session,
    asked: SearchQuery,
    *,
    where: Iterable[ColumnElement[bool]] = (),
    offset: int = 0,
    limit: int = 100,
    after: str = "",
) -> Page:
    """Projects matching every filter of ``asked`` but its GPU ones (``where`` takes those:
    see ``gpu._index``), by normalized name, ``limit`` from ``offset``
    among those whose normalized name sorts after ``after`` (a cursor: the last name of the
    previous page reads the next one through the name index, however deep; ``total``
    counts every match, before the cursor, up to COUNT_LIMIT for a search with words or
    filters but device and dtype: ``capped`` then, and the pages go on past it).

    ``where`` takes more predicates on :class:`ProjectSummary` (e.g. ``S.project_id.in_(
    select(...))`` over another table): the place for filters this module does not know.
    """
    q, device, dtype, status = asked.q, asked.device, asked.dtype, asked.status
    dialect = session.get_bind().dialect.name
    filters: list[ColumnElement[bool]] = list(where)
    if status:
        filters.append(S.status == status)
    words = search_words(q)
    text_match = [_text_match(dialect, words)] if words else []
    kernels = device or dtype
    # PostgreSQL's device filter, made once for the count and the page (it may ask the
    # database whether a device name has a space).
    by_device = _device_match(session, device, dtype) if device and dialect == "postgresql" else []
    may_cap = bool(filters or words)
    by_status = (
        dialect == "sqlite" and bool(words and status) and _few(session, status, STATUS_SCAN)
    )
    if by_status:
        text_match = [_text_match(dialect, words, scan=True)]
    if dialect == "sqlite" and words and not kernels and not filters:
        # Every project has one row in project_search: count there, without a join, up to
        # COUNT_LIMIT + 1 (as every search with words counts).
        match = " ".join(f'"{w}"*' for w in words)
        total = session.scalar(
            text(
                "SELECT count(*) FROM (SELECT rowid FROM project_search"
                " WHERE project_search MATCH :m LIMIT :n)"
            ),
            {"m": match, "n": COUNT_LIMIT + 1},
        )
    elif dialect == "sqlite" and words and not filters:
        # Words and kernels: read the text's matches, each looked up in project_kernels'
        # primary key, up to COUNT_LIMIT + 1 of them (not the set of every project with
        # such kernels, which grows with the catalog).
        match = " ".join(f'"{w}"*' for w in words)
        matches = (
            select(literal_column("rowid", Integer))
            .select_from(table("project_search"))
            .where(
                text("project_search MATCH :m").bindparams(m=match),
                select(ProjectKernel.project_id)
                .where(
                    ProjectKernel.project_id == literal_column("project_search.rowid"),
                    *_kernel_conditions(device, dtype),
                )
                .exists(),
            )
            .limit(COUNT_LIMIT + 1)
        )
        total = session.scalar(select(func.count()).select_from(matches.subquery()))
    elif kernels and not words and not filters:
        # One project_kernels row per (project, device, dtype): count in its index alone,
        # each project once (with both filters a project has at most one row: no DISTINCT,
        # which PostgreSQL sorts for: 16 ms for CPU and float at 100,000 projects, 6 without).
        conditions = _kernel_conditions(device, dtype)
        counted = (
            func.count() if device and dtype else func.count(ProjectKernel.project_id.distinct())
        )
        total = session.scalar(select(counted).select_from(ProjectKernel).where(*conditions))
    else:
        # Words or filters: counting every match can read tens of thousands of rows, so
        # the count stops at COUNT_LIMIT (a lower bound then: Page.capped); PostgreSQL
        # stops reading the GIN index's matches there too.
        prefixes = _prefix_match(words, device) if words and dialect == "postgresql" else None
        by_set = [*filters, *(text_match if prefixes is None else [prefixes])]
        if by_device:
            # The devices column first, then project_kernels' primary key for the rows
            # that pass: a per-row lookup for about as many rows as are counted, where a
            # semi-join read every kernel row of the device (18 of 21 ms for a word and
            # GPU at 100,000 projects).
            by_set += by_device
        elif kernels:
            by_set.append(_kernel_match(device, dtype, per_row=False))
        matches = select(S.project_id).where(*by_set)
        if may_cap:
            matches = matches.limit(COUNT_LIMIT + 1)
        total = session.scalar(select(func.count()).select_from(matches.subquery()))
    total = int(total or 0)
    capped = may_cap and total > COUNT_LIMIT
    total = min(total, COUNT_LIMIT) if capped else total
    scan = dialect == "sqlite" and (capped or total > SCAN_ABOVE) and bool(words or kernels)
    predicates = [*filters]
    if words:
        predicates.append(_text_match(dialect, words, scan=scan or by_status))
    if by_device:
        predicates += by_device
    elif kernels:
        predicates.append(_kernel_match(device, dtype, per_row=scan))
    if after:
        predicates.append(S.normalized > after)
    query = select(S).where(*predicates).order_by(S.normalized).offset(offset).limit(limit)
    return Page(total, list(session.scalars(query).all()), capped)


def _few(session: Session, status: str, most: int) -> bool:
    """Whether at most ``most`` projects have ``status`` (counted in its index, up to
    ``most + 1``)."""
    rows = select(S.project_id).where(S.status == status).limit(most + 1).subquery()
    return int(session.scalar(select(func.count()).select_from(rows)) or 0) <= most


def summary_of(session: Session, name: str) -> ProjectSummary | None:
    """The summary row of the project called ``name`` (any spelling), or None."""
    return session.scalar(select(S).where(S.normalized == str(canonicalize_name(name))))


def listed_projects(conn: Connection | Session) -> list[tuple[str, str]]:
    """(name, normalized) of every project with a validated file, by normalized name: the
    simple index, which lists them all by definition (it is cached per change)."""
    rows = conn.execute(
        select(S.name, S.normalized).where(S.listed == true()).order_by(S.normalized)
    )
    return [(r.name, r.normalized) for r in rows]
