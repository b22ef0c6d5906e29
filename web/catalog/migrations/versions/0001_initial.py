"""The first catalog: users, tokens, projects, releases, files, ops, kernels, jobs.

Revision ID: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(100), nullable=False, unique=True),
        sa.Column("created", sa.DateTime, nullable=False),
    )
    op.create_table(
        "tokens",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("user_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False, unique=True),
        sa.Column("project", sa.String(200), nullable=True),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.Column("last_used", sa.DateTime, nullable=True),
    )
    op.create_table(
        "projects",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("normalized", sa.String(200), nullable=False, unique=True),
        sa.Column("owner_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("serial", sa.Integer, nullable=False),
    )
    op.create_table(
        "releases",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("project_id", sa.Integer, sa.ForeignKey("projects.id"), nullable=False),
        sa.Column("version", sa.String(100), nullable=False),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.UniqueConstraint("project_id", "version"),
    )
    op.create_table(
        "files",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("release_id", sa.Integer, sa.ForeignKey("releases.id"), nullable=False),
        sa.Column("filename", sa.String(300), nullable=False, unique=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger, nullable=False),
        sa.Column("requires_python", sa.String(200), nullable=False),
        sa.Column("metadata_sha256", sa.String(64), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("uploaded", sa.DateTime, nullable=False),
        sa.Column("uploader_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("yanked", sa.Boolean, nullable=False),
        sa.Column("yanked_reason", sa.Text, nullable=False),
        sa.Column("validated", sa.DateTime, nullable=True),
        sa.Column("log", sa.Text, nullable=False),
        sa.Column("result", sa.JSON, nullable=True),
        sa.Column("opset", sa.Text, nullable=False),
    )
    op.create_table(
        "op_entries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("file_id", sa.Integer, sa.ForeignKey("files.id"), nullable=False, index=True),
        sa.Column("op", sa.String(200), nullable=False, index=True),
        sa.Column("signature", sa.Text, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
    )
    op.create_table(
        "kernel_entries",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("file_id", sa.Integer, sa.ForeignKey("files.id"), nullable=False, index=True),
        sa.Column("op", sa.String(200), nullable=False, index=True),
        sa.Column("device", sa.String(20), nullable=False),
        sa.Column("dtypes", sa.String(200), nullable=False),
        sa.Column("status", sa.String(40), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
    )
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("payload", sa.JSON, nullable=False),
        sa.Column("status", sa.String(20), nullable=False, index=True),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("worker", sa.String(100), nullable=False),
        sa.Column("created", sa.DateTime, nullable=False),
        sa.Column("started", sa.DateTime, nullable=True),
        sa.Column("finished", sa.DateTime, nullable=True),
        sa.Column("error", sa.Text, nullable=False),
    )


def downgrade() -> None:
    for table in (
        "jobs",
        "kernel_entries",
        "op_entries",
        "files",
        "releases",
        "projects",
        "tokens",
        "users",
    ):
        op.drop_table(table)
