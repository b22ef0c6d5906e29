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

Search results and op pages (:meth:`PageCache.keep_result`) draw on every project, so any
change drops them all, at the same check. A project's "not found" answer
(:meth:`PageCache.keep_missing`) goes with its pages: the change that creates the project,
or validates its first file, names it.

On PostgreSQL ids are handed out when a row is inserted, not when its transaction commits:
a change can appear below an id already seen. The ids skipped over are remembered and read
again at each check until they show up (or for a minute, after which they belonged to
transactions that rolled back). A check that reads one moves the generation as any other
does: a page, or a "not found", rendered before the late change is never kept after it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sized
from typing import Generic, TypeVar

from sqlalchemy import Engine, func, or_, select

__all__ = [
    "FILE_BUDGET",
    "INDEX",
    "MISSING",
    "NAMED",
    "NAME_MOST",
    "PAGE_BUDGET",
    "RESULTS",
    "RESULT_BUDGET",
    "PageCache",
    "prune_changes",
    "read_changes",
]

#: The key of the project index page.
INDEX = ""

#: Seconds an id skipped over is looked for again (a transaction longer than that is rare).
GAP_S = 60.0


def read_changes(
    engine: Engine,
) -> tuple[Callable[[], tuple[int, int]], Callable[[int, Iterable[int]], list[tuple[int, str]]]]:
    """The two queries ``PageCache.sync`` needs, on ``engine``: the oldest and newest
    change's ids, and the changes after an id (or among skipped ids)."""
    from opmarket.web.catalog._models import CatalogChange

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

    from opmarket.web.catalog._models import CatalogChange

    # On SQLite the write lock from the start: a read, then a write, may fail under load.
    with engine.connect() as plain:
        conn = plain.execution_options(opmarket_sqlite_begin="IMMEDIATE")
        with conn.begin():
            newest = conn.execute(select(func.coalesce(func.max(CatalogChange.id), 0))).scalar_one()
            gone = conn.execute(delete(CatalogChange).where(CatalogChange.id <= int(newest) - keep))
    return int(getattr(gone, "rowcount", 0) or 0)


#: The most search results and op pages kept, and the most bytes of their JSON (a page of
#: 1,000 packages is about 250 kB): any change drops them all; past either, the oldest go.
RESULTS = 4096
RESULT_BUDGET = 16 * 1024 * 1024


#: The most bytes of generated files (project pages, variants.json) kept in all: past it the
#: least recently used go first.
FILE_BUDGET = 64 * 1024 * 1024

#: The most bytes of rendered simple pages kept (both content types of each; a project of
#: ten files weighs about 6 kB, the index of 100,000 projects about 8 MB): past it the
#: oldest kept go first (the index last), and are rendered again when asked for.
PAGE_BUDGET = 128 * 1024 * 1024

#: The most "not found" answers kept (names asked for that are not listed: made-up names
#: must not grow the memory of the process); past it the oldest go.
MISSING = 10_000

#: The most projects whose newest change read is remembered for :meth:`PageCache.changed_since`
#: (what waiting uploads ask); past it the oldest go, and count as changed at every check
#: since their change (a wake-up too many, never one missed).
NAMED = 10_000

#: The longest project name the catalog holds (``projects.normalized`` is String(200)): the
#: "not found" of a longer name is answered, never kept (made-up names of any length must not
#: grow the memory of the process; its message, and a 307's Location, repeat the name).
NAME_MOST = 200

#: What a page is kept as (bytes, or answers built from them): only its size is read here.
P = TypeVar("P", bound=Sized)


class PageCache(Generic[P]):
    """Rendered pages and generated files, dropped by :meth:`sync` or :meth:`forget`.

    Pages are kept by key, both content types of each, within ``page_budget`` bytes, the
    oldest out first. Files are kept by (project, kind, name), each kind of a project capped
    separately (``most``: a project's page per base URL the clients use must not crowd out
    its variants.json files or the reverse), least recently used first out, and all of them
    within :data:`FILE_BUDGET` bytes."""

    def __init__(
        self, ttl: float, budget: int = FILE_BUDGET, page_budget: int = PAGE_BUDGET
    ) -> None:
        self.ttl = ttl
        self.budget = budget
        self.page_budget = page_budget
        # key -> (serial, html, json), oldest kept first; and their bytes in all
        self._pages: dict[str, tuple[object, P, P]] = {}
        self._page_bytes = 0
        self._missing: dict[str, object] = {}  # project -> its "not found" answer
        # project -> (kind, name) -> bytes, least recently used first; and every file's size
        self._files: dict[str, OrderedDict[tuple[str, str], bytes]] = {}
        self._lru: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._bytes = 0
        # search and op results by their normalized query, each with its JSON body
        self._results: dict[tuple[object, ...], tuple[object, bytes]] = {}
        self._result_bytes = 0
        self._checked = float("-inf")
        self._generation: int | None = None  # the newest change seen
        # Moves at every check that drops anything (a late change below the newest id too):
        # what keep* compare a render's ``seen`` with.
        self._version: int | None = None
        # project -> the version at whose check a change naming it was last read, oldest
        # first; and a version at or above that of every project no longer in it
        self._named: OrderedDict[str, int] = OrderedDict()
        self._named_floor = 0
        self._gaps: dict[int, float] = {}  # ids skipped over -> when first missed
        self._lock = threading.Lock()  # one sync at a time
        # Held while the generation moves and pages go, and by keep*: a render that began
        # before a check is never stored after it (reentrant: see the tests).
        self._store = threading.RLock()

    def due(self, ttl: float | None = None) -> bool:
        """Whether the change log should be read again before serving (it was read more
        than ``ttl`` seconds ago, default :attr:`ttl`): not while another thread reads it
        (``sync`` would return at once, and the request would have crossed to a thread for
        nothing)."""
        return self._stale(ttl) and not self._lock.locked()

    def _stale(self, ttl: float | None) -> bool:
        return time.monotonic() - self._checked > (self.ttl if ttl is None else ttl)

    def sync(
        self,
        read_last: Callable[[], tuple[int, int]],
        read_after: Callable[[int, Iterable[int]], list[tuple[int, str]]],
        ttl: float | None = None,
    ) -> None:
        """Unless another thread is at it: read the oldest and newest change's ids; when
        the newest moved (or ids were skipped), read those changes and drop the pages of the
        projects they name; when changes not yet read were deleted (``prune_changes``), drop
        every page. The generation moves before anything is dropped. Only when the last
        read is more than ``ttl`` seconds old (default :attr:`ttl`)."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self._stale(ttl):
                return
            oldest, newest = read_last()
            if self._generation is None or oldest > self._generation + 1:
                with self._store:
                    self._generation = newest
                    self._version = (self._version or 0) + 1
                    self._pages.clear()  # rendered before the first look, or changes lost
                    self._page_bytes = 0
                    self._missing.clear()
                    self._files.clear()
                    self._lru.clear()
                    self._bytes = 0
                    self._clear_results()
                    self._named.clear()  # any project may have changed
                    self._named_floor = self._version
                self._gaps.clear()
            elif newest != self._generation or self._gaps:
                seen = self._generation
                changes = read_after(seen, self._gaps)
                got = {change_id for change_id, _ in changes}
                top = max(got | {seen})
                with self._store:
                    self._generation = top
                    if changes:  # a gap filled leaves ``top`` as it was: the version moves
                        self._version = (self._version or 0) + 1
                    for _, project in changes:
                        self._drop(project)
                        self._name(project)
                    if changes:
                        self._drop_page(INDEX)
                        self._clear_results()
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

    def _name(self, project: str) -> None:
        """Remember that the check of the current version read a change naming ``project``."""
        assert self._version is not None
        self._named.pop(project, None)
        self._named[project] = self._version
        while len(self._named) > NAMED:
            _, version = self._named.popitem(last=False)
            self._named_floor = max(self._named_floor, version)

    def changed_since(self, project: str, seen: object) -> bool:
        """Whether a check after the generation ``seen`` read a change naming ``project``
        (or dropped every page, or a change of a project it no longer remembers): what an
        upload waiting for its verdict looks for, so that other projects' changes do not
        send it to the database (no lock: two dict reads)."""
        if not isinstance(seen, int):  # before the first check: any check counts
            return self._version != seen
        return max(self._named.get(project, 0), self._named_floor) > seen

    def postpone(self) -> None:
        """Read the change log again only after another ``ttl`` (it could not be read now:
        until then the pages kept are served as they are)."""
        self._checked = time.monotonic()

    def _drop(self, project: str) -> None:
        self._drop_page(project)
        self._missing.pop(project, None)
        for kind, name in self._files.pop(project, {}):
            self._bytes -= self._lru.pop((project, kind, name), 0)

    def _drop_page(self, key: str) -> None:
        gone = self._pages.pop(key, None)
        if gone is not None:
            self._page_bytes -= len(gone[1]) + len(gone[2])

    def get(self, key: str) -> tuple[P, P] | None:
        """The page kept under ``key`` (no lock: one dict read), HTML and JSON."""
        hit = self._pages.get(key)
        return None if hit is None else (hit[1], hit[2])

    def get_missing(self, project: str) -> object:
        """The "not found" answer kept for ``project`` by :meth:`keep_missing`, or None."""
        return self._missing.get(project)

    def keep_missing(self, project: str, answer: object, *, seen: object) -> None:
        """Keep the answer for a project that is not listed (none of that name, or none of
        its files validated), dropped with its pages when a change names it; as
        :meth:`keep` does, only when no check moved the generation since ``seen``, and not
        for a name longer than :data:`NAME_MOST`. Past :data:`MISSING` of them the oldest
        go."""
        with self._store:
            if seen != self._version or seen is None or len(project) > NAME_MOST:
                return
            self._missing.pop(project, None)
            self._missing[project] = answer
            while len(self._missing) > MISSING:
                del self._missing[next(iter(self._missing))]

    def get_file(self, project: str, filename: str, kind: str = "file") -> bytes | None:
        """A file of ``kind`` generated for ``project`` (a release's variants.json, a
        rendering of its page) kept by :meth:`keep_file`; None when it is not kept."""
        with self._store:
            files = self._files.get(project)
            body = None if files is None else files.get((kind, filename))
            if body is not None and files is not None:
                files.move_to_end((kind, filename))
                self._lru.move_to_end((project, kind, filename))
            return body

    def keep_file(
        self,
        project: str,
        filename: str,
        body: bytes,
        *,
        seen: object,
        kind: str = "file",
        most: int = 0,
    ) -> bytes:
        """Keep a file generated from ``project``'s rows, dropped with its pages; as
        :meth:`keep` does, only when no check moved the generation since ``seen``. Past
        ``most`` files of this kind for the project, or past the byte budget, the least
        recently used go."""
        with self._store:
            if seen != self._version or seen is None or len(body) > self.budget:
                return body
            files = self._files.setdefault(project, OrderedDict())
            self._bytes -= self._lru.pop((project, kind, filename), 0)
            files[(kind, filename)] = body
            self._lru[(project, kind, filename)] = len(body)
            self._bytes += len(body)
            if most:
                same = [key for key in files if key[0] == kind]
                for old in same[: max(0, len(same) - most)]:
                    del files[old]
                    self._bytes -= self._lru.pop((project, *old))
            while self._bytes > self.budget:
                (owner, old_kind, old_name), size = self._lru.popitem(last=False)
                del self._files[owner][(old_kind, old_name)]
                self._bytes -= size
            return body

    @property
    def generation(self) -> object:
        """Read before rendering a page, handed back to ``keep``: it moves at every check
        that drops anything (None before the first), even one that only read a change
        committed late, below the newest id seen."""
        return self._version

    def keep(self, key: str, serial: object, html: P, js: P, *, seen: object) -> tuple[P, P]:
        """Keep a page rendered at ``serial``, unless a check moved the generation since
        the render began (``seen``): the page may predate a change the check already
        handled, so it is served once and not kept. Past ``page_budget`` bytes the oldest
        pages go, the index last."""
        size = len(html) + len(js)
        with self._store:
            if seen != self._version or seen is None or size > self.page_budget:
                return html, js
            self._drop_page(key)
            self._pages[key] = (serial, html, js)
            self._missing.pop(key, None)
            self._page_bytes += size
            while self._page_bytes > self.page_budget:
                self._drop_page(next((k for k in self._pages if k != INDEX), INDEX))
        return html, js

    def get_result(self, key: tuple[object, ...]) -> tuple[object, bytes] | None:
        """A search result or op page kept by :meth:`keep_result` (no lock: one dict read)."""
        return self._results.get(key)

    def keep_result(
        self, key: tuple[object, ...], result: object, body: bytes, *, seen: object
    ) -> None:
        """Keep a result computed from the whole catalog (and its JSON ``body``), as
        :meth:`keep` does: only when no check moved the generation since ``seen``; any
        change drops every result. Past :data:`RESULTS` of them, or :data:`RESULT_BUDGET`
        bytes of JSON, the oldest go."""
        with self._store:
            if seen != self._version or seen is None or len(body) > RESULT_BUDGET:
                return
            old = self._results.pop(key, None)
            self._result_bytes += len(body) - (len(old[1]) if old else 0)
            self._results[key] = (result, body)
            while len(self._results) > RESULTS or self._result_bytes > RESULT_BUDGET:
                self._result_bytes -= len(self._results.pop(next(iter(self._results)))[1])

    def _clear_results(self) -> None:
        self._results.clear()
        self._result_bytes = 0

    def forget(self, key: str) -> None:
        """Drop a project's page and files (and the index, which lists it, and every
        search result and op page)."""
        with self._store:
            self._drop(key)
            self._drop_page(INDEX)
            self._clear_results()
