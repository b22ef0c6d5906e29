"""Alembic migrations of the catalog (``opmarket.web.catalog:migrations``); revisions are written by
hand in ``versions/`` and applied by ``opmarket.web.catalog._db.migrate``."""
