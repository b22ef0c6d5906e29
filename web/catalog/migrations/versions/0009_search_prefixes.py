"""SQLite's full-text index keeps prefixes of every length from 1 to 12 characters (0006
kept 2 and 3): a search word is a prefix (``conv`` finds ``convgemm``), and FTS5 answers a
prefix of a length it has no index for by reading and merging the lists of every word that
starts with it. At 100,000 projects that cost 8-12 ms for two words of four letters or
more (``vision embed``, ``conv gemm``) and 16-30 ms for one letter, against 1-2 ms from a
prefix index. The index grows from about 22 to 57 MB at that size.

The table is made again with the new prefixes and filled from ``project_summaries`` (its
external content); the triggers of 0006 name it, and keep it from then on.

PostgreSQL: nothing changes. Its GIN index keeps lexemes in order, so a prefix of any length
is one range of that index.

Revision ID: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def _make(prefixes: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        return
    op.execute("DROP TABLE project_search")
    op.execute(
        "CREATE VIRTUAL TABLE project_search USING fts5(name, summary, ops, "
        f"content='project_summaries', content_rowid='project_id', prefix='{prefixes}')"
    )
    op.execute("INSERT INTO project_search(project_search) VALUES ('rebuild')")


def upgrade() -> None:
    _make(" ".join(str(n) for n in range(1, 13)))


def downgrade() -> None:
    _make("2 3")
