"""``opmarket seed`` on PostgreSQL: the summaries' GIN indexes (the search's, 0006 and 0011,
which take each change into their trees at once: 0010) collect a seed's entries in their
pending lists and merge them once, and end as the migrations made them, searching as a
scan of every summary does."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy import select

from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import ProjectKernel, ProjectSummary
from opmarket.web.catalog._queries import search
from opmarket.web.catalog._search import SearchQuery
from opmarket.web.catalog._seed import seed_projects

from .postgres import PostgresServer
from .test_catalog_devices import _expected

_INDEXES = ("ix_project_summaries_search", "ix_project_summaries_prefixes")


def _indexes(db: Database) -> dict[str, tuple[object, int]]:
    """Each search index's options, and the pages of its pending list (its metapage's)."""
    with db.engine.begin() as conn:
        conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pageinspect"))
        rows = conn.execute(
            sa.text(
                "SELECT relname, reloptions, (SELECT n_pending_pages FROM gin_metapage_info("
                "get_raw_page(relname::text, 0))) FROM pg_class WHERE relname IN :names"
            ).bindparams(sa.bindparam("names", expanding=True)),
            {"names": list(_INDEXES)},
        )
        return {name: (options, int(pending)) for name, options, pending in rows}


def test_a_seed_merges_the_search_indexes_once_and_leaves_them_as_migrated(
    postgres: PostgresServer,
) -> None:
    db = Database(postgres.new_database("seed"))
    try:
        migrated = _indexes(db)
        assert migrated == {name: (["fastupdate=off"], 0) for name in _INDEXES}
        seeding = seed_projects(db, 2500, random_seed=7)
        assert next(seeding) == 2000
        assert all(pending > 0 for _, pending in _indexes(db).values())  # no tree descents
        assert list(seeding) == [2500]
        assert _indexes(db) == migrated
        stopped = seed_projects(db, 2500, random_seed=8)  # a seed given up half-way
        assert next(stopped) == 2000
        stopped.close()
        assert _indexes(db) == migrated
        with db.session() as session:
            rows = list(session.scalars(select(ProjectSummary)).all())
            pairs = {
                (p, d, t)
                for p, d, t in session.execute(
                    select(ProjectKernel.project_id, ProjectKernel.device, ProjectKernel.dtype)
                )
            }
            for q in ("conv", "vision gemm", "fused flash", "attention", "4001", "nosuch"):
                for device in ("", "GPU"):
                    asked = SearchQuery(q=q, device=device)
                    found = search(session, asked, limit=5000)
                    expected = _expected(rows, pairs, asked)
                    assert expected or device or q == "nosuch", q
                    assert [r.normalized for r in found.rows] == expected, (q, device)
                    assert found.total == min(len(expected), 1000), (q, device)
    finally:
        db.dispose()
