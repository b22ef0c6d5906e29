"""Rendered /simple/ pages kept in memory, kept honest by the catalog's serials.

Every project has a serial that each change bumps. Once per ``ttl`` seconds, at most, one
one-row query reads the catalog's generation (count and sum of the serials); when it moved,
the serials are read and the pages whose project changed are dropped (so another process's
change, a CLI yank or another server's validation, shows within ``ttl``). Between checks a
page is served from memory. This process's own changes drop their pages at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

__all__ = ["INDEX", "PageCache"]

#: The key of the project index page.
INDEX = ""


class PageCache:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._pages: dict[str, tuple[object, bytes, bytes]] = {}
        self._checked = float("-inf")
        self._generation: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def due(self) -> bool:
        """Whether the serials should be read again before serving."""
        return time.monotonic() - self._checked > self.ttl

    def sync(
        self,
        read_generation: Callable[[], tuple[int, int]],
        read_serials: Callable[[], Mapping[str, int]],
    ) -> None:
        """Unless another thread is at it: read the catalog's generation (the number of
        projects and the sum of their serials, one row); when it moved, read every serial
        and drop the pages whose project changed."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self.due():
                return
            generation = read_generation()
            if generation != self._generation:
                serials = read_serials()
                for key, (serial, _, _) in list(self._pages.items()):
                    now = generation if key == INDEX else serials.get(key)
                    if serial != now:
                        self._pages.pop(key, None)
                self._generation = generation
            self._checked = time.monotonic()
        finally:
            self._lock.release()

    def get(self, key: str) -> tuple[bytes, bytes] | None:
        hit = self._pages.get(key)
        return None if hit is None else (hit[1], hit[2])

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
        if seen == self._generation:
            self._pages[key] = (serial, html, js)
        return html, js

    def forget(self, key: str) -> None:
        """Drop a project's page (and the index, which lists it)."""
        self._pages.pop(key, None)
        self._pages.pop(INDEX, None)
