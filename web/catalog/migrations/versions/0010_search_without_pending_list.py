"""PostgreSQL: the search's GIN index (0006) takes each change into its tree at once
(``fastupdate = off``), and what its pending list holds now goes there.

With PostgreSQL's default (``fastupdate = on``) new and changed summaries wait in the
index's pending list, unsorted, until a vacuum or until the list reaches 4 MB; every search
that reads the index reads the whole list too. After seeding 100,000 projects it held
about 6,000 entries in 258 pages, which every search through the index read again (up to
3 ms of a rare word's 7 at that size). The catalog changes a project at a time (an upload,
a verdict, a yank): taking the few words of each change into the tree costs it little.

SQLite: nothing changes.

Revision ID: 0010
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

INDEX = "ix_project_summaries_search"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"ALTER INDEX {INDEX} SET (fastupdate = off)")
    op.execute(f"SELECT gin_clean_pending_list('{INDEX}'::regclass)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"ALTER INDEX {INDEX} RESET (fastupdate)")
