"""Search and listing in the database: a summary row per project (latest version, status,
ops, devices), its (device, dtype) pairs, a full-text index over names, summaries and op
names (FTS5 on SQLite, kept by triggers; a generated tsvector with a GIN index on
PostgreSQL), and an index of files by release. Existing projects get their rows here.

Revision ID: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None

_FTS_COLUMNS = "name, summary, ops"
_SQLITE = [
    # External content: the text lives once, in project_summaries; rowid is project_id.
    f"CREATE VIRTUAL TABLE project_search USING fts5({_FTS_COLUMNS}, "
    "content='project_summaries', content_rowid='project_id', prefix='2 3')",
    "CREATE TRIGGER project_search_insert AFTER INSERT ON project_summaries BEGIN "
    f"INSERT INTO project_search(rowid, {_FTS_COLUMNS}) "
    "VALUES (new.project_id, new.name, new.summary, new.ops); END",
    "CREATE TRIGGER project_search_delete AFTER DELETE ON project_summaries BEGIN "
    f"INSERT INTO project_search(project_search, rowid, {_FTS_COLUMNS}) "
    "VALUES ('delete', old.project_id, old.name, old.summary, old.ops); END",
    "CREATE TRIGGER project_search_update AFTER UPDATE ON project_summaries BEGIN "
    f"INSERT INTO project_search(project_search, rowid, {_FTS_COLUMNS}) "
    "VALUES ('delete', old.project_id, old.name, old.summary, old.ops); "
    f"INSERT INTO project_search(rowid, {_FTS_COLUMNS}) "
    "VALUES (new.project_id, new.name, new.summary, new.ops); END",
]
_POSTGRESQL = [
    "ALTER TABLE project_summaries ADD COLUMN search tsvector GENERATED ALWAYS AS "
    "(to_tsvector('simple', name || ' ' || summary || ' ' || ops)) STORED",
    "CREATE INDEX ix_project_summaries_search ON project_summaries USING GIN (search)",
]


def upgrade() -> None:
    op.create_table(
        "project_summaries",
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("normalized", sa.String(200), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("latest_file_id", sa.Integer, nullable=True),
        sa.Column("latest_version", sa.String(100), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("listed", sa.Boolean, nullable=False),
        sa.Column("ops", sa.Text, nullable=False),
        sa.Column("devices", sa.String(200), nullable=False),
    )
    op.create_index("ix_project_summaries_status", "project_summaries", ["status", "normalized"])
    op.create_index("ix_project_summaries_listed", "project_summaries", ["listed", "normalized"])
    # Pages in name order; broad searches read it instead of sorting their matches.
    op.create_index(
        "ix_project_summaries_normalized", "project_summaries", ["normalized"], unique=True
    )
    op.create_table(
        "project_kernels",
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), primary_key=True),
        sa.Column("device", sa.String(20), primary_key=True),
        sa.Column("dtype", sa.String(40), primary_key=True),
    )
    op.create_index(
        "ix_project_kernels_device", "project_kernels", ["device", "dtype", "project_id"]
    )
    op.create_index("ix_project_kernels_dtype", "project_kernels", ["dtype"])
    # A project's files are found by release: without this, every package page, simple
    # page and summary refresh read the whole files table.
    op.create_index("ix_files_release_id", "files", ["release_id"])
    connection = op.get_bind()
    for statement in _POSTGRESQL if connection.dialect.name == "postgresql" else _SQLITE:
        op.execute(statement)
    from opmarket.web.catalog._queries import refresh_summary

    for project_id in connection.scalars(sa.text("SELECT id FROM projects ORDER BY id")).all():
        refresh_summary(connection, project_id)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        op.execute("DROP TABLE project_search")  # its triggers go with project_summaries
    op.drop_index("ix_files_release_id", table_name="files")
    op.drop_table("project_kernels")
    op.drop_table("project_summaries")
