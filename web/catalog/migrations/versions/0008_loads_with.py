"""Files get their "loads with" table: which Pythons and framework releases their native
code loads with (see opmarket.web.validation._loads).

``files.loads_with``: JSON, a list of rows ``{"python", "implementation", "framework",
"version", "works", "problems"}``; ``[]`` for a file without native code; null for a file
not checked (rejected, or validated before this revision: checked when uploaded again).

Revision ID: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.add_column(sa.Column("loads_with", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.drop_column("loads_with")
