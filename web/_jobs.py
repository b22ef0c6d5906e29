"""Background work as rows in the database, taken by workers in any process.

A job is claimed with one conditional UPDATE (``status='queued'`` -> ``running``), which is
atomic on SQLite and PostgreSQL alike, so several worker threads or processes (or machines,
on PostgreSQL) can share one queue. A job left ``running`` by a worker that died is queued
again when it is older than the timeout.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from opmarket.web._db import Database
from opmarket.web._models import Job, utcnow

__all__ = ["JobQueue", "Worker"]

log = logging.getLogger("opmarket.web.jobs")

Handler = Callable[[dict[str, Any]], None]


class JobQueue:
    """Enqueue, claim and finish jobs stored in the ``jobs`` table."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self._wakeup = threading.Event()

    def enqueue(self, session: Session, kind: str, payload: dict[str, Any]) -> Job:
        """Add a job inside the caller's transaction (it exists only if that commits)."""
        job = Job(kind=kind, payload=payload, status="queued", attempts=0, worker="", error="")
        session.add(job)
        return job

    def notify(self) -> None:
        """Wake this process's idle workers (others poll)."""
        self._wakeup.set()

    def wait(self, timeout: float) -> None:
        self._wakeup.wait(timeout)
        self._wakeup.clear()

    def claim(self, worker: str, kinds: tuple[str, ...]) -> Job | None:
        """The oldest queued job of ``kinds``, now ``running`` for ``worker``; None if none."""
        with self.db.transaction() as session:
            for _ in range(5):
                job_id = session.scalar(
                    select(Job.id).where(Job.status == "queued", Job.kind.in_(kinds))
                    .order_by(Job.id).limit(1)
                )  # fmt: skip
                if job_id is None:
                    return None
                claimed = session.execute(
                    update(Job).where(Job.id == job_id, Job.status == "queued")
                    .values(status="running", worker=worker, started=utcnow(),
                            attempts=Job.attempts + 1)
                )  # fmt: skip
                if getattr(claimed, "rowcount", 0) == 1:
                    return session.get(Job, job_id)
        return None

    def finish(self, job_id: int, *, error: str = "") -> None:
        with self.db.transaction() as session:
            session.execute(
                update(Job).where(Job.id == job_id)
                .values(status="failed" if error else "done", finished=utcnow(), error=error)
            )  # fmt: skip

    def requeue_stale(self, older_than: timedelta) -> int:
        """Queue again the jobs whose worker has held them too long (it died)."""
        with self.db.transaction() as session:
            done = session.execute(
                update(Job).where(Job.status == "running", Job.started < utcnow() - older_than)
                .values(status="queued", worker="")
            )  # fmt: skip
            return int(getattr(done, "rowcount", 0) or 0)


class Worker:
    """Threads that take jobs from the queue and run their kind's handler."""

    def __init__(self, queue: JobQueue, handlers: dict[str, Handler], *, threads: int = 1,
                 poll_s: float = 1.0) -> None:
        self.queue = queue
        self.handlers = handlers
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._loop, name=f"opmarket-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        self.name = f"{socket.gethostname()}:{os.getpid()}"

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.queue.notify()
        for t in self._threads:
            t.join(timeout)

    def run_once(self) -> bool:
        """Run one job if one is queued; whether one ran."""
        job = self.queue.claim(f"{self.name}/{threading.current_thread().name}",
                               tuple(self.handlers))
        if job is None:
            return False
        try:
            self.handlers[job.kind](dict(job.payload))
        except Exception as exc:  # a handler's bug must not kill the worker
            log.exception("job %s (%s) failed", job.id, job.kind)
            self.queue.finish(job.id, error=f"{type(exc).__name__}: {exc}")
        else:
            self.queue.finish(job.id)
        return True

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if self.run_once():
                    continue
            except Exception:  # the database was busy or gone: wait and try again
                log.exception("worker could not claim a job")
            self.queue.wait(self.poll_s)
