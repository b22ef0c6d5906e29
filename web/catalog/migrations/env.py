"""Alembic environment: runs on the connection that ``opmarket.web.catalog._db.migrate``
hands over."""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from opmarket.web.catalog._models import Base

connection: Connection = context.config.attributes["connection"]
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=True,  # SQLite alters tables by copying them
)
with context.begin_transaction():
    context.run_migrations()
