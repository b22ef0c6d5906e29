"""Files get what the static GPU checks found and a variant wheel's metadata; their GPU
targets get a table of their own, for the search by CUDA major and compute capability.

``files.gpu``: JSON, null for a file without device code (see opmarket.web.gpu._checks).
``files.variant``: JSON, a PEP 825 variant wheel's ``variant.json``, null for other wheels.
``gpu_targets``: one row per SASS architecture or PTX version of a file's device code.
Files validated before this revision have nulls and no rows: they are checked again when
uploaded again, like any rejected file.

Revision ID: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.add_column(sa.Column("gpu", sa.JSON(), nullable=True))
        batch.add_column(sa.Column("variant", sa.JSON(), nullable=True))
    op.create_table(
        "gpu_targets",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("file_id", sa.Integer(), sa.ForeignKey("files.id"), nullable=False),
        sa.Column("cuda_major", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(10), nullable=False),
        sa.Column("capability", sa.Integer(), nullable=False),
        sa.Column("suffix", sa.String(4), nullable=False),
    )
    op.create_index("ix_gpu_targets_file_id", "gpu_targets", ["file_id"])


def downgrade() -> None:
    op.drop_index("ix_gpu_targets_file_id", table_name="gpu_targets")
    op.drop_table("gpu_targets")
    with op.batch_alter_table("files") as batch:
        batch.drop_column("variant")
        batch.drop_column("gpu")
