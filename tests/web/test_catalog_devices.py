"""The search's device filter on both databases: PostgreSQL tests a summary's ``devices``
column before it looks the (project, device, dtype) up in project_kernels; the pages and
counts are those of project_kernels alone, device names with spaces in them included."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from opmarket.web.catalog import _queries
from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import ProjectKernel, ProjectSummary
from opmarket.web.catalog._queries import search, search_words
from opmarket.web.catalog._search import SearchQuery
from opmarket.web.catalog._seed import SEED_WORDS, seed

from .conftest import Backend


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, database: Backend) -> Iterator[Database]:
    url = database.new_url("devices")
    db = Database(url or f"sqlite:///{tmp_path_factory.mktemp('devices') / 'c.sqlite3'}")
    seed(db, 300, random_seed=11)
    yield db
    db.dispose()


def _expected(
    rows: list[ProjectSummary], pairs: set[tuple[int, str, str]], asked: SearchQuery
) -> list[str]:
    """What the search lists, by reading every summary and (device, dtype) row."""
    words = search_words(asked.q)
    device, dtype, status = asked.device, asked.dtype, asked.status
    # Each project's (device, dtype) rows, grouped once: a scan of every row per summary
    # would read the table thousands of times over.
    kernels: dict[int, list[tuple[str, str]]] = {}
    for p, d, t in pairs:
        kernels.setdefault(p, []).append((d, t))
    found = []
    for row in rows:
        text = re.findall(r"[^\W_]+", f"{row.name} {row.summary} {row.ops}".lower())
        if not all(any(t.startswith(w) for t in text) for w in words):
            continue
        if status and row.status != status:
            continue
        if (device or dtype) and not any(
            (not device or d == device.upper()) and (not dtype or t == dtype.lower())
            for d, t in kernels.get(row.project_id, ())
        ):
            continue
        found.append(row.normalized)
    return sorted(found)


@dataclass(frozen=True)
class _Scan:
    """Every summary and (project, device, dtype) row, read once: what a plain scan finds."""

    rows: list[ProjectSummary]
    pairs: set[tuple[int, str, str]]

    @classmethod
    def of(cls, session: Session) -> _Scan:
        kernels = select(ProjectKernel.project_id, ProjectKernel.device, ProjectKernel.dtype)
        return cls(
            list(session.scalars(select(ProjectSummary)).all()),
            {(p, d, t) for p, d, t in session.execute(kernels)},
        )

    def check(self, session: Session, asked: SearchQuery) -> int:
        """Search as the catalog does; its total and rows must be the scan's. The total."""
        found = search(session, asked, limit=1000)
        expected = _expected(self.rows, self.pairs, asked)
        assert (found.total, [r.normalized for r in found.rows]) == (
            len(expected),
            expected,
        ), asked
        return found.total


@pytest.mark.parametrize("scan_above", [0, 10**9])
def test_device_filters_list_what_project_kernels_holds(
    seeded: Database, monkeypatch: pytest.MonkeyPatch, scan_above: int
) -> None:
    """Words, device, dtype and status together, on every plan: a project whose devices
    are ``CPU`` and ``MY GPU`` (its ``devices`` column reads "CPU MY GPU") is not a GPU
    project, and is found by the device ``my gpu``."""
    monkeypatch.setattr(_queries, "SCAN_ABOVE", scan_above)
    with seeded.session() as session:  # rolled back at the end: other tests see the seed
        odd = session.scalars(
            select(ProjectSummary).where(ProjectSummary.devices == "CPU").limit(6)
        ).all()
        for row in odd:
            session.execute(
                update(ProjectSummary)
                .where(ProjectSummary.project_id == row.project_id)
                .values(devices="CPU MY GPU")
            )
            session.add(ProjectKernel(project_id=row.project_id, device="MY GPU", dtype="float"))
        session.flush()
        scan = _Scan.of(session)
        words = odd[0].name.split("-")[0]
        cases = [
            (q, device, dtype, status)
            for q in ("", words, "conv", "vision gemm", f"{SEED_WORDS[3]} {SEED_WORDS[5]}")
            for device in ("GPU", "my gpu", "CPU", "o'd\\u", "")
            for dtype in ("", "float", "half")
            for status in ("", "rejected")
            if device or dtype
        ]
        for q, device, dtype, status in cases:
            scan.check(session, SearchQuery(q=q, device=device, dtype=dtype, status=status))
        gpu = search(session, SearchQuery(q=words, device="GPU"), limit=1000)
        mine = search(session, SearchQuery(q=words, device="my gpu"), limit=1000)
        odd_ids = {r.project_id for r in odd if r.name.startswith(words)}
        assert odd_ids <= {r.project_id for r in mine.rows} <= {r.project_id for r in odd}
        assert odd_ids
        assert not odd_ids & {r.project_id for r in gpu.rows}
        session.rollback()


def test_words_count_alike_on_either_side_of_the_prefix_index(seeded: Database) -> None:
    """PostgreSQL counts words of ASCII letters and digits of at most 12 characters in its
    index of every prefix (0011), and any other word as before: both find what a scan of
    every summary finds, with and without a device (on SQLite, the one plan)."""
    assert _queries.PREFIX_MOST == 12
    with seeded.session() as session:
        rows = list(session.scalars(select(ProjectSummary)).all())
        ops = sorted({w for r in rows for w in re.findall(r"[^\W_]+", r.ops.lower())})
        long = next(w for w in ops if len(w) >= 13)  # an op name as one word, e.g. fusedattention
        scan = _Scan.of(session)
        words = [long[:12], long[:13], long, f"{long[:12]} {long[:4]}", "c", "1", "ünï", "ab1c2"]
        for q in words:
            for device in ("", "GPU", "cpu"):
                found = scan.check(session, SearchQuery(q=q, device=device))
                assert found or device or q in ("ünï", "ab1c2"), q


def test_words_postgresql_reads_as_two_count_as_they_list(seeded: Database) -> None:
    """PostgreSQL's parser reads ``1e5abc`` as the number ``1e5`` then ``abc`` (a phrase of
    two words, which the prefix index, without positions, never matches): such a word is
    counted as before 0011, so the count says what the page lists."""
    with seeded.session() as session:  # rolled back at the end: other tests see the seed
        odd = session.scalars(select(ProjectSummary).limit(4)).all()
        for row in odd:
            session.execute(
                update(ProjectSummary)
                .where(ProjectSummary.project_id == row.project_id)
                .values(summary="scaled by 1e5abc and 12e3x")
            )
        session.flush()
        scan = _Scan.of(session)
        for q in ("1e5abc", "1e5ab", "12e3x", "12e3x scaled", "1e5"):
            for device in ("", "CPU"):
                assert scan.check(session, SearchQuery(q=q, device=device)) or device, q
        session.rollback()
