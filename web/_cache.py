"""Rendered /simple/ pages (and the files generated beside them: a release's
variants.json) kept in memory, kept honest by the catalog's change log.

Every change that the index shows (a new project, an upload, a verdict, a yank) bumps the
project's serial, and a database trigger (migration 0007) adds a row naming the project to
``catalog_changes``. Once per ``ttl`` seconds, at most, one query reads the newest change's
id (an index lookup); when it moved, the rows after the last one seen are read and only the
pages of the projects they name are dropped, with the project index. So another process's
change (another server's upload, a worker's verdict, a CLI yank) shows within ``ttl``, and
the check's cost follows the number of changes, never the number of projects. This
process's own changes drop their pages at once.

On PostgreSQL ids are handed out when a row is inserted, not when its transaction commits:
a change can appear below an id already seen. The ids skipped over are remembered and read
again at each check until they show up (or for a minute, after which they belonged to
transactions that rolled back).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from sqlalchemy import Engine, func, or_, select

__all__ = ["INDEX", "PageCache", "prune_changes", "read_changes"]

#: The key of the project index page.
INDEX = ""

#: Seconds an id skipped over is looked for again (a transaction longer than that is rare).
GAP_S = 60.0


def read_changes(
    engine: Engine,
) -> tuple[Callable[[], tuple[int, int]], Callable[[int, Iterable[int]], list[tuple[int, str]]]]:
    """The two queries ``PageCache.sync`` needs, on ``engine``: the oldest and newest
    change's ids, and the changes after an id (or among skipped ids)."""
    from opmarket.web._models import CatalogChange

    # Two subqueries: SQLite answers a lone min() or max() from the index, not both at once.
    ends = select(
        select(func.coalesce(func.min(CatalogChange.id), 0)).scalar_subquery(),
        select(func.coalesce(func.max(CatalogChange.id), 0)).scalar_subquery(),
    )

    def last() -> tuple[int, int]:
        with engine.connect() as conn:
            oldest, newest = conn.execute(ends).one()
            return int(oldest), int(newest)

    def after(seen: int, gaps: Iterable[int]) -> list[tuple[int, str]]:
        wanted = CatalogChange.id > seen
        gaps = list(gaps)
        if gaps:
            wanted = or_(wanted, CatalogChange.id.in_(gaps))
        with engine.connect() as conn:
            return [
                (int(r.id), str(r.project))
                for r in conn.execute(select(CatalogChange.id, CatalogChange.project).where(wanted))
            ]

    return last, after


def prune_changes(engine: Engine, keep: int = 100_000) -> int:
    """Delete all but the newest ``keep`` changes (a process that had not read them yet
    drops all its pages); how many rows went."""
    from sqlalchemy import delete

    from opmarket.web._models import CatalogChange

    with engine.begin() as conn:
        newest = conn.execute(select(func.coalesce(func.max(CatalogChange.id), 0))).scalar_one()
        gone = conn.execute(delete(CatalogChange).where(CatalogChange.id <= int(newest) - keep))
    return int(getattr(gone, "rowcount", 0) or 0)


class PageCache:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._pages: dict[str, tuple[object, bytes, bytes]] = {}
        self._files: dict[str, dict[str, bytes]] = {}  # project -> file name -> its bytes
        self._checked = float("-inf")
        self._generation: int | None = None  # the newest change seen
        self._gaps: dict[int, float] = {}  # ids skipped over -> when first missed
        self._lock = threading.Lock()  # one sync at a time
        # Held while the generation moves and pages go, and by keep*: a render that began
        # before a check is never stored after it (reentrant: see the tests).
        self._store = threading.RLock()

    def due(self) -> bool:
        """Whether the change log should be read again before serving."""
        return time.monotonic() - self._checked > self.ttl

    def sync(
        self,
        read_last: Callable[[], tuple[int, int]],
        read_after: Callable[[int, Iterable[int]], list[tuple[int, str]]],
    ) -> None:
        """Unless another thread is at it: read the oldest and newest change's ids; when
        the newest moved (or ids were skipped), read those changes and drop the pages of the
        projects they name; when changes not yet read were deleted (``prune_changes``), drop
        every page. The generation moves before anything is dropped."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self.due():
                return
            oldest, newest = read_last()
            if self._generation is None or oldest > self._generation + 1:
                with self._store:
                    self._generation = newest
                    self._pages.clear()  # rendered before the first look, or changes lost
                    self._files.clear()
                self._gaps.clear()
            elif newest != self._generation or self._gaps:
                seen = self._generation
                changes = read_after(seen, self._gaps)
                got = {change_id for change_id, _ in changes}
                top = max(got | {seen})
                with self._store:
                    self._generation = top
                    for _, project in changes:
                        self._pages.pop(project, None)
                        self._files.pop(project, None)
                    if changes:
                        self._pages.pop(INDEX, None)
                now = time.monotonic()
                for change_id in got:
                    self._gaps.pop(change_id, None)
                for change_id in range(seen + 1, top):
                    if change_id not in got:
                        self._gaps.setdefault(change_id, now)
                for change_id, since in list(self._gaps.items()):
                    if now - since > GAP_S:
                        del self._gaps[change_id]
            self._checked = time.monotonic()
        finally:
            self._lock.release()

    def get(self, key: str) -> tuple[bytes, bytes] | None:
        hit = self._pages.get(key)
        return None if hit is None else (hit[1], hit[2])

    def get_file(self, project: str, filename: str) -> bytes | None:
        """A file generated for ``project`` (a release's variants.json) kept by
        :meth:`keep_file`; None when it is not kept."""
        return self._files.get(project, {}).get(filename)

    def keep_file(
        self, project: str, filename: str, body: bytes, *, seen: object, most: int = 0
    ) -> bytes:
        """Keep a file generated from ``project``'s rows, dropped with its pages; as
        :meth:`keep` does, only when no check moved the generation since ``seen``, and
        (``most``) while the project has fewer files kept."""
        with self._store:
            files = self._files.get(project, {})
            if most and len(files) >= most and filename not in files:
                return body
            if seen == self._generation and seen is not None:
                self._files.setdefault(project, {})[filename] = body
            return body

    @property
    def generation(self) -> object:
        """Read before rendering a page, handed back to ``keep``."""
        return self._generation

    def keep(
        self, key: str, serial: object, html: bytes, js: bytes, *, seen: object
    ) -> tuple[bytes, bytes]:
        """Keep a page rendered at ``serial``, unless a check moved the generation since
        the render began (``seen``): the page may predate a change the check already
        handled, so it is served once and not kept."""
        with self._store:
            if seen == self._generation and seen is not None:
                self._pages[key] = (serial, html, js)
        return html, js

    def forget(self, key: str) -> None:
        """Drop a project's page and files (and the index, which lists it)."""
        with self._store:
            self._pages.pop(key, None)
            self._files.pop(key, None)
            self._pages.pop(INDEX, None)
