"""Alembic migrations of the catalog (``opmarket.web:migrations``); revisions are written by
hand in ``versions/`` and applied by ``opmarket.web._db.migrate``."""
