"""Rendered /simple/ pages kept in memory, kept honest by the catalog's serials.

Every project has a serial that each change bumps. Once per ``ttl`` seconds, at most, one
query reads all serials and drops the pages whose project changed (so another process's
change, a CLI yank or another server's validation, shows within ``ttl``); between checks a
page is served from memory. This process's own changes drop their pages at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

__all__ = ["INDEX", "PageCache"]

#: The key of the project index page.
INDEX = ""


class PageCache:
    def __init__(self, ttl: float) -> None:
        self.ttl = ttl
        self._pages: dict[str, tuple[object, bytes, bytes]] = {}
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def due(self) -> bool:
        """Whether the serials should be read again before serving."""
        return time.monotonic() - self._checked > self.ttl

    def sync(self, read_serials: object) -> None:
        """Read the serials (``read_serials()`` -> {project: serial}) unless another thread
        is doing it, and drop what changed."""
        if not self._lock.acquire(blocking=False):
            return
        try:
            if not self.due():
                return
            assert callable(read_serials)
            serials: Mapping[str, int] = read_serials()
            generation = (len(serials), sum(serials.values()))
            for key, (serial, _, _) in list(self._pages.items()):
                now = generation if key == INDEX else serials.get(key)
                if serial != now:
                    self._pages.pop(key, None)
            self._checked = time.monotonic()
        finally:
            self._lock.release()

    def get(self, key: str) -> tuple[bytes, bytes] | None:
        hit = self._pages.get(key)
        return None if hit is None else (hit[1], hit[2])

    def keep(self, key: str, serial: object, html: bytes, js: bytes) -> tuple[bytes, bytes]:
        self._pages[key] = (serial, html, js)
        return html, js

    def forget(self, key: str) -> None:
        """Drop a project's page (and the index, which lists it)."""
        self._pages.pop(key, None)
        self._pages.pop(INDEX, None)
