"""An upload's verdict, told to whoever waits for it: the upload's own answer (``--upload-wait``),
the server's log (one line per upload and per verdict), and ``opmarket status``.

A verdict is announced in-process (an event per waiting request, set from the validation
thread). A verdict stored by another process bumps the project's serial, which the catalog's
change log records: while uploads wait, their process reads the log every :data:`WAKE_S`
(once for all of them; its page cache follows), and an upload looks again when the log names
its project, and at least every :data:`POLL_MAX_S` whatever happens. Waiting holds neither a
database connection nor the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Response
from sqlalchemy import bindparam, select
from sqlalchemy.exc import SQLAlchemyError
from starlette.concurrency import run_in_threadpool

from opmarket.web._state import AppState
from opmarket.web._status import FileStatus
from opmarket.web.catalog._models import File
from opmarket.web.routes._cache import read_changes

__all__ = [
    "Decided",
    "announce",
    "log_upload",
    "rejection_reason",
    "upload_answer",
    "wait_for_verdict",
]

log = logging.getLogger("opmarket.web.uploads")

#: The longest pause between two looks at the file's status while an upload waits (when
#: neither an announcement nor the change log woke it).
POLL_MAX_S = 1.0

#: How often a process with uploads waiting reads the change log (pages wait
#: ``INDEX_CACHE_TTL_S``): a verdict stored by another process is seen this soon.
WAKE_S = 0.1

_lock = threading.Lock()
_waiting: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}


@dataclass(frozen=True, slots=True)
class Decided:
    """Where a file's validation stands, as the upload answer and ``opmarket status`` say it."""

    status: str
    reason: str  # for a rejection: the failed steps and their first lines


def rejection_reason(result: Mapping[str, Any] | None, log_text: str = "") -> str:
    """What failed, in a few lines: each failed step's name and the start of its log (the
    whole log when the result holds no steps)."""
    steps = (result or {}).get("steps")
    lines: list[str] = []
    if isinstance(steps, list):
        for step in steps:
            if not isinstance(step, dict) or step.get("status") != "failed":
                continue
            details = [str(x) for x in step.get("log", []) if x]
            text = "; ".join(line.strip() for d in details[:4] for line in d.splitlines()[:3])
            lines.append(f"{step.get('name', '?')}: {text}" if text else str(step.get("name")))
    return "\n".join(lines) if lines else log_text.strip()


def log_upload(filename: str, user: str, status: str, new: bool) -> None:
    """The server's one line per upload."""
    what = "uploaded, validation queued" if new else f"identical re-upload ({status})"
    log.info("upload %s by %s: %s", filename, user, what)


def announce(filename: str, status: str, reason: str) -> None:
    """Log the verdict on one line and wake the requests of this process waiting for it."""
    if status == FileStatus.REJECTED:
        log.info("verdict %s: rejected: %s", filename, " | ".join(reason.splitlines()))
    else:
        log.info("verdict %s: %s", filename, status)
    with _lock:
        waiters = _waiting.pop(filename, [])
    for loop, event in waiters:
        if not loop.is_closed():
            loop.call_soon_threadsafe(event.set)


#: A file's status, and what a rejection's reason is made of (built once: it is read again
#: while its upload waits).
_STATUS = select(File.status, File.result, File.log).where(File.filename == bindparam("filename"))


def _decided(state: AppState, filename: str) -> Decided | None:
    with state.db.engine.connect() as conn:  # plain rows: no session is needed to read them
        row = conn.execute(_STATUS, {"filename": filename}).first()
    if row is None or row.status == FileStatus.PENDING:
        return None
    reason = rejection_reason(row.result, row.log) if row.status == FileStatus.REJECTED else ""
    return Decided(str(row.status), reason)


@dataclass(slots=True)
class _Watch:
    """The uploads of one server (its state, on its event loop) waiting for verdicts: their
    events by project, and the one task that reads the change log for all of them."""

    waiting: dict[str, list[asyncio.Event]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None


#: By (state, event loop), while uploads wait there; each entry goes with its last waiter.
_watches: dict[tuple[int, int], _Watch] = {}


async def _watch_changes(state: AppState, key: tuple[int, int], watch: _Watch) -> None:
    """Every :data:`WAKE_S` while uploads wait: read the change log (one read for all of
    them, which also refreshes the process's pages) and wake those whose project it named."""
    try:
        seen = state.pages.generation
        while watch.waiting:
            await asyncio.sleep(WAKE_S)
            if state.pages.due(WAKE_S):
                try:
                    await run_in_threadpool(
                        state.pages.sync, *read_changes(state.db.engine), WAKE_S
                    )
                except SQLAlchemyError as exc:  # each status is read again within a second
                    state.pages.postpone()
                    log.warning("the change log could not be read (%s)", exc)
            now = state.pages.generation  # before the look: a check after it is looked at next
            for project, events in watch.waiting.items():
                if state.pages.changed_since(project, seen):
                    for event in events:
                        event.set()
            seen = now
    finally:
        if _watches.get(key) is watch:
            del _watches[key]


async def _until_woken(
    state: AppState, event: asyncio.Event, project: str, seen: object, most: float
) -> None:
    """Return once ``event`` is set (this process announced the verdict), the change log
    read since the generation ``seen`` names ``project`` (another process changed it: its
    verdict bumps its serial), or after ``most`` seconds. One task reads the log for every
    upload that waits (each woke every :data:`WAKE_S` to look, before), and other projects'
    changes wake none of them (each verdict sent every waiting upload to the database)."""
    loop = asyncio.get_running_loop()
    key = (id(state), id(loop))
    watch = _watches.get(key)
    if watch is None:
        watch = _watches[key] = _Watch()
    events = watch.waiting.setdefault(project, [])
    events.append(event)
    if watch.task is None or watch.task.done() or watch.task.get_loop() is not loop:
        watch.task = asyncio.ensure_future(_watch_changes(state, key, watch))
    try:
        if state.pages.changed_since(project, seen):  # read before this upload joined
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), most)
    finally:
        events.remove(event)
        if not events:
            del watch.waiting[project]


async def wait_for_verdict(
    state: AppState, filename: str, project: str, timeout_s: float
) -> Decided | None:
    """The verdict on ``filename`` of ``project`` (normalized) once decided, or None when
    ``timeout_s`` passed first."""
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + timeout_s
    while True:
        event = asyncio.Event()
        with _lock:  # registered before the look, so an announcement in between is not lost
            _waiting.setdefault(filename, []).append((loop, event))
        try:
            seen = state.pages.generation  # before the look: a verdict after it moves the log
            decided = await run_in_threadpool(_decided, state, filename)
            left = deadline - time.monotonic()
            if decided is not None or left <= 0:
                return decided
            await _until_woken(state, event, project, seen, min(POLL_MAX_S, left))
        finally:
            with _lock:
                mine = _waiting.get(filename, [])
                if (loop, event) in mine:
                    mine.remove((loop, event))
                if not mine:
                    _waiting.pop(filename, None)


async def _unless_gone(
    waiting: Coroutine[Any, Any, Decided | None], gone: Coroutine[Any, Any, None] | None
) -> Decided | None:
    """What ``waiting`` gives, or None as soon as ``gone`` ends first (the client left:
    nobody will read the answer, and the server need not hold the wait until its end)."""
    if gone is None:
        return await waiting
    verdict, left = asyncio.ensure_future(waiting), asyncio.ensure_future(gone)
    try:
        await asyncio.wait({verdict, left}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (verdict, left):
            task.cancel()
        await asyncio.gather(verdict, left, return_exceptions=True)
    return verdict.result() if not verdict.cancelled() else None


async def upload_answer(
    state: AppState,
    user: str,
    body: dict[str, Any],
    new: bool,
    *,
    gone: Coroutine[Any, Any, None] | None = None,
) -> Response:
    """The answer to an accepted upload ``body``: after up to ``upload_wait_s`` for its
    verdict, 200 ``validated`` or ``pending``, or 400 with the reason of a rejection.
    ``gone`` ends when the client disconnects: the wait stops then (the upload is stored
    and its validation goes on; a shutting-down server is not held by waits nobody reads).

    The JSON is indented: ``twine upload --verbose`` prints it as it is.
    """
    filename, status = str(body["filename"]), str(body["status"])
    log_upload(filename, user, status, new)
    wait = state.settings.upload_wait_s
    decided = None
    if status == FileStatus.PENDING and wait > 0:
        waiting = wait_for_verdict(state, filename, str(body["project"]), wait)
        decided = await _unless_gone(waiting, gone)
    elif gone is not None:
        gone.close()  # never awaited
    code = 200
    if decided is not None:
        body = {**body, "status": decided.status}
        if decided.status == FileStatus.REJECTED:
            code = 400
            message = f"{filename} was rejected by validation:\n{decided.reason}"
            body = {"error": {"status": 400, "code": "rejected", "message": message}, **body}
            body["reason"] = decided.reason
        else:
            body["message"] = f"{filename} was validated and is listed on the index"
    elif status == FileStatus.PENDING and wait > 0:
        body["message"] = (
            f"uploaded; validation is still running after {wait:g} s: "
            f"ask again with opmarket status {body['project']}=={_version(filename)} "
            "--index-url URL --wait"
        )
    return Response(json.dumps(body, indent=2) + "\n", code, media_type="application/json")


def _version(filename: str) -> str:
    parts = filename.split("-")
    return parts[1] if len(parts) > 1 else "?"
