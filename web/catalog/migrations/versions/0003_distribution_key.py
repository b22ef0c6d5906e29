"""Files get a distribution key, unique: one file per (project, version, build tag, tags).

Foo_Bar-1.0, foo_bar-1.0 and foo_bar-1.0.0 were three names for one distribution and the
index served whichever came last. Rows that already collide keep their data: the later ones
get a key that says so (``#duplicate-<id>``) and stay as they are, for the owner to yank.

Revision ID: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from packaging.utils import InvalidWheelFilename, canonicalize_version, parse_wheel_filename

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def _key(filename: str) -> str | None:
    # The same rule as opmarket.web.catalog._models.distribution_key, frozen as of this revision.
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return None
    build_tag = f"{build[0]}{build[1]}" if build else ""
    return "/".join(
        (
            name,
            canonicalize_version(version, strip_trailing_zero=True),
            build_tag,
            ".".join(sorted(str(t) for t in tags)),
        )
    )


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.add_column(sa.Column("dist_key", sa.String(600), nullable=True))
    files = sa.table(
        "files",
        sa.column("id", sa.Integer),
        sa.column("filename", sa.String),
        sa.column("dist_key", sa.String),
    )
    connection = op.get_bind()
    seen: set[str] = set()
    for row in connection.execute(
        sa.select(files.c.id, files.c.filename).order_by(files.c.id)
    ).all():
        key = _key(row.filename)
        if key is not None and key in seen:
            key = f"{key}#duplicate-{row.id}"
        if key is not None:
            seen.add(key)
        connection.execute(files.update().where(files.c.id == row.id).values(dist_key=key))
    op.create_index("ix_files_dist_key", "files", ["dist_key"], unique=True)


def downgrade() -> None:
    op.drop_index("ix_files_dist_key", table_name="files")
    with op.batch_alter_table("files") as batch:
        batch.drop_column("dist_key")
