"""What request handlers share: settings, database, store, job queue; as dependencies."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from opmarket.web._jobs import JobQueue
from opmarket.web._limits import UploadSlots
from opmarket.web._settings import Settings
from opmarket.web.catalog._db import Database
from opmarket.web.routes._cache import PageCache
from opmarket.web.routes._kept import Answer
from opmarket.web.storage._local import Storage

__all__ = ["AppState", "SessionDep", "StateDep", "app_state"]


@dataclass
class AppState:
    settings: Settings
    db: Database
    storage: Storage
    queue: JobQueue
    pages: PageCache[Answer] = field(default_factory=lambda: PageCache(1.0))  # /simple/ pages
    uploads: UploadSlots = field(init=False)  # uploads in progress, under the settings' caps

    def __post_init__(self) -> None:
        self.uploads = UploadSlots(self.settings.max_uploads, self.settings.max_uploads_per_token)


def app_state(request: Request) -> AppState:
    state = request.app.state.opmarket
    assert isinstance(state, AppState)
    return state


def db_session(state: Annotated[AppState, Depends(app_state)]) -> Iterator[Session]:
    with state.db.session() as session:
        yield session


StateDep = Annotated[AppState, Depends(app_state)]
SessionDep = Annotated[Session, Depends(db_session)]
