"""A change log of the catalog, for the page caches of many processes.

Every insert of a project and every bump of its serial (upload, verdict, yank) adds a row
naming the project, by a trigger, so no code path can forget it. A server process reads
``max(id)`` (one index lookup) at most once a second and, when it moved, only the rows
after the last one it saw: its cost follows the changes, not the number of projects.

Revision ID: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

_SQLITE = [
    "CREATE TRIGGER catalog_change_insert AFTER INSERT ON projects "
    "BEGIN INSERT INTO catalog_changes (project) VALUES (NEW.normalized); END",
    "CREATE TRIGGER catalog_change_serial AFTER UPDATE OF serial ON projects "
    "BEGIN INSERT INTO catalog_changes (project) VALUES (NEW.normalized); END",
]
_POSTGRESQL = [
    "CREATE FUNCTION opmarket_catalog_change() RETURNS trigger LANGUAGE plpgsql AS $$ "
    "BEGIN INSERT INTO catalog_changes (project) VALUES (NEW.normalized); RETURN NULL; END $$",
    "CREATE TRIGGER catalog_change_insert AFTER INSERT ON projects "
    "FOR EACH ROW EXECUTE FUNCTION opmarket_catalog_change()",
    "CREATE TRIGGER catalog_change_serial AFTER UPDATE OF serial ON projects "
    "FOR EACH ROW EXECUTE FUNCTION opmarket_catalog_change()",
]


def upgrade() -> None:
    op.create_table(
        "catalog_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("project", sa.String(200), nullable=False),
        sqlite_autoincrement=True,  # ids never reused, even after old rows are deleted
    )
    dialect = op.get_bind().dialect.name
    for statement in _POSTGRESQL if dialect == "postgresql" else _SQLITE:
        op.execute(statement)


def downgrade() -> None:
    op.execute(
        "DROP TRIGGER IF EXISTS catalog_change_insert ON projects"
        if op.get_bind().dialect.name == "postgresql"
        else "DROP TRIGGER IF EXISTS catalog_change_insert"
    )
    op.execute(
        "DROP TRIGGER IF EXISTS catalog_change_serial ON projects"
        if op.get_bind().dialect.name == "postgresql"
        else "DROP TRIGGER IF EXISTS catalog_change_serial"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS opmarket_catalog_change()")
    op.drop_table("catalog_changes")
