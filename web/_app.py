"""The app factory: one settings object in, a FastAPI app with every router out."""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from opmarket import __version__
from opmarket.web._errors import install_error_handlers
from opmarket.web._jobs import JobQueue, Worker
from opmarket.web._limits import BodyLimits, configure
from opmarket.web._settings import Settings
from opmarket.web._state import AppState
from opmarket.web.catalog._db import Database
from opmarket.web.routes import _api, _files, _pages, _simple, _upload, _variant_files
from opmarket.web.routes._cache import PageCache
from opmarket.web.storage._open import storage_from_url
from opmarket.web.validation._job import validation_worker
from opmarket.web.validation._owned import reserved_names

__all__ = ["app_from_environment", "create_app", "open_state"]

log = logging.getLogger("opmarket.web")


def open_state(settings: Settings) -> AppState:
    """Database (migrated), store and queue for ``settings``."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    db = Database(
        settings.database,
        pool_size=settings.database_pool_size,
        max_overflow=settings.database_pool_overflow,
    )
    return AppState(
        settings=settings,
        db=db,
        storage=storage_from_url(settings.storage),
        queue=JobQueue(db),
        pages=PageCache(settings.index_cache_ttl_s),
    )


def create_app(settings: Settings | None = None) -> FastAPI:
    """The marketplace for ``settings`` (default: read from the environment).

    It also sets this process's limits on request heads, which the server's protocol
    (:class:`~opmarket.web._limits.LimitedHttpToolsProtocol`) applies.
    """
    settings = settings or Settings()
    state = open_state(settings)
    configure(settings.head_limits())

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        worker: Worker | None = None
        # What every upload checks its name against, read once while the first requests
        # come (they wait for it rather than each reading every distribution).
        threading.Thread(
            target=reserved_names,
            args=(settings.allowed_names,),
            name="opmarket-names",
            daemon=True,
        ).start()
        if settings.validation_workers:
            worker = validation_worker(state, settings.validation_workers)
            worker.start()
        try:
            yield
        finally:
            if worker is not None:
                worker.stop()
            state.db.dispose()

    app = FastAPI(
        title="opmarket",
        version=__version__,
        lifespan=lifespan,
        description="A pip-compatible index of validated op/kernel plugin wheels: the simple "
        "repository API (PEP 503/691/700/658/714/592), uploads at /legacy/ (twine, uv "
        "publish), and the catalog as JSON. Errors are "
        '`{"error": {"status": int, "code": str, "message": str}}`.',
    )
    app.state.opmarket = state
    install_error_handlers(app)
    # Inside BodyLimits (added after it: the outer one), which refuses a NUL in the URL.
    app.add_middleware(_simple.KeptPages, state=state)
    app.add_middleware(
        BodyLimits,
        max_bytes=settings.max_body_bytes,
        max_upload_bytes=settings.max_upload_bytes,
        timeout_s=settings.body_timeout_s,
        deadline_s=settings.body_deadline_s,
    )
    for module in (_simple, _files, _upload, _api, _pages, _variant_files):
        app.include_router(module.router)
    # Editable installs link each file into place: follow those links (the folder is ours).
    app.mount(
        "/static",
        StaticFiles(directory=Path(__file__).with_name("static"), follow_symlink=True),
        name="static",
    )
    return app


def app_from_environment() -> FastAPI:
    """For ``uvicorn --factory opmarket.web:app_from_environment`` (settings from OPMARKET_*)."""
    from opmarket.web._serverlog import log_to_stderr

    log_to_stderr()
    return create_app(Settings())
