"""Background work as rows in the database, taken by workers in any process, held by leases.

A job is claimed with one conditional UPDATE (``status='queued'`` -> ``running``), which is
atomic on SQLite and PostgreSQL alike, so several worker threads or processes (or machines,
on PostgreSQL) can share one queue. While it runs, its worker renews the job's
``heartbeat`` every third of the lease; every worker, while it runs, queues again the jobs
whose heartbeat is older than the lease (their worker died: ``kill -9``, a lost machine),
every third of a lease, so such a job is taken again within 4/3 of a lease (plus the time a
worker takes to start, when none was running), not only when a server starts.
A job whose handler raised, or whose worker died during each of ``max_attempts``
attempts, is given up: its kind's ``abandon`` handler says why (validation rejects the
file), so nothing waits for ever.

Leases are fenced. A worker that stopped without dying (a paused VM, a swapping machine,
SIGSTOP) may wake after its job was queued again and taken by another worker. Each claim is
a :class:`Lease`: the job, the worker and the attempt it claimed (``attempts`` counts up at
every claim, so no two claims of a job carry the same one). A handler records its result
only while it holds its lease, checked in the same transaction as the result
(:meth:`JobQueue.complete`); renewing and finishing a lost lease change nothing.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import Select, and_, or_, select, update
from sqlalchemy.orm import Session

from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import Job, utcnow

__all__ = ["JobQueue", "Lease", "Worker"]

log = logging.getLogger("opmarket.web.jobs")


@dataclass(frozen=True, slots=True)
class Lease:
    """One claim of a job: by ``worker``, as its ``attempt``-th attempt."""

    job_id: int
    worker: str
    attempt: int

    def held(self) -> Any:
        """The SQL condition: the job is running under this claim still."""
        return and_(
            Job.id == self.job_id,
            Job.status == "running",
            Job.worker == self.worker,
            Job.attempts == self.attempt,
        )


Handler = Callable[[dict[str, Any], Lease], None]
Abandon = Callable[[dict[str, Any], str], None]


class JobQueue:
    """Enqueue, claim, renew and finish jobs stored in the ``jobs`` table."""

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
        """Sleep until ``notify`` or ``timeout`` seconds, whichever comes first."""
        self._wakeup.wait(timeout)
        self._wakeup.clear()

    @staticmethod
    def _queued(kinds: tuple[str, ...]) -> Select[int]:
        return (
            select(Job.id)
            .where(Job.status == "queued", Job.kind.in_(kinds))
            .order_by(Job.id)
            .limit(1)
        )

    def claim(self, worker: str, kinds: tuple[str, ...]) -> Job | None:
        """The oldest queued job of ``kinds``, now ``running`` for ``worker``; None if none."""
        # A plain read first: an idle worker's look takes no write lock (on SQLite the claim
        # below holds it from its start), so idle workers may look often.
        with self.db.engine.connect() as conn:  # plain rows: no session is needed
            if conn.execute(self._queued(kinds)).first() is None:
                return None
        with self.db.transaction() as session:
            for _ in range(5):
                job_id = session.scalar(self._queued(kinds))
                if job_id is None:
                    return None
                now = utcnow()
                claimed = session.execute(
                    update(Job)
                    .where(Job.id == job_id, Job.status == "queued")
                    .values(
                        status="running",
                        worker=worker,
                        started=now,
                        heartbeat=now,
                        attempts=Job.attempts + 1,
                    )
                )
                if getattr(claimed, "rowcount", 0) == 1:
                    return session.get(Job, job_id)
        return None

    def renew(self, leases: list[Lease]) -> None:
        """Extend the leases still held (a lost one stays lost)."""
        if not leases:
            return
        with self.db.transaction() as session:
            session.execute(
                update(Job)
                .where(or_(*(lease.held() for lease in leases)))
                .values(heartbeat=utcnow())
            )

    def complete(self, session: Session, lease: Lease, *, error: str = "") -> bool:
        """In the caller's transaction: mark the job done (or failed, with ``error``) if
        ``lease`` still holds it; whether it did. The UPDATE locks the job's row until the
        transaction ends, so the lease cannot run out and be taken between this check and
        the commit of what the caller writes beside it (on SQLite the write lock does the
        same)."""
        done = session.execute(
            update(Job)
            .where(lease.held())
            .values(status="failed" if error else "done", finished=utcnow(), error=error)
        )
        return getattr(done, "rowcount", 0) == 1

    def finish(self, lease: Lease, *, error: str = "") -> bool:
        """Mark the job done (or failed, with ``error``) if ``lease`` still holds it."""
        with self.db.transaction() as session:
            return self.complete(session, lease, error=error)

    def release(self, lease: Lease, *, error: str = "") -> None:
        """Put a running job back in the queue (its worker stops, or it failed and may be
        tried again), if ``lease`` still holds it."""
        with self.db.transaction() as session:
            session.execute(
                update(Job).where(lease.held()).values(status="queued", worker="", error=error)
            )

    def requeue_stale(self, older_than: timedelta, max_attempts: int = 3) -> list[Job]:
        """Queue again the running jobs whose lease ran out (their worker stopped renewing
        it); those already tried ``max_attempts`` times are failed and returned, to be
        given up by their kind's ``abandon`` handler."""
        cutoff = utcnow() - older_than
        expired = or_(Job.heartbeat < cutoff, and_(Job.heartbeat.is_(None), Job.started < cutoff))
        with self.db.transaction() as session:
            gone = list(
                session.scalars(
                    select(Job).where(
                        Job.status == "running", expired, Job.attempts >= max_attempts
                    )
                )
            )
            for job in gone:
                job.status, job.finished = "failed", utcnow()
                job.error = f"its worker stopped during each of {job.attempts} attempts"
            session.execute(
                update(Job)
                .where(Job.status == "running", expired)
                .values(status="queued", worker="")
            )
            session.flush()
            session.expunge_all()
        return gone


class Worker:
    """Threads that take jobs from the queue and run their kind's handler, renewing each
    job's lease while it runs and reclaiming the jobs of workers that stopped."""

    def __init__(
        self,
        queue: JobQueue,
        handlers: dict[str, Handler],
        *,
        threads: int = 1,
        poll_s: float = 1.0,
        lease_s: float = 60.0,
        max_attempts: int = 3,
        abandon: dict[str, Abandon] | None = None,
        housekeeping: Callable[[], None] | None = None,
        on_thread_start: Callable[[], None] | None = None,
    ) -> None:
        self.queue = queue
        self.handlers = handlers
        self.poll_s = min(poll_s, lease_s / 4)
        self.lease_s = lease_s
        self.max_attempts = max_attempts
        self.abandon = abandon or {}
        self.housekeeping = housekeeping
        self.on_thread_start = on_thread_start  # in each job thread, before its first job
        self._stop = threading.Event()
        self._held: dict[int, Lease] = {}
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, name=f"opmarket-worker-{i}", daemon=True)
            for i in range(threads)
        ]
        self._threads.append(
            threading.Thread(target=self._keeper, daemon=True, name="opmarket-worker-leases")
        )
        self.name = f"{socket.gethostname()}:{os.getpid()}"
        self._prepared = 0  # job threads whose on_thread_start has run
        self._ready = threading.Condition()

    def start(self) -> None:
        """Reclaim what stopped workers left, then start the threads."""
        self.reclaim()
        for t in self._threads:
            t.start()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until every job thread has run ``on_thread_start`` (a validation worker's:
        its sandbox started); whether they have within ``timeout`` seconds."""
        threads = len(self._threads) - 1  # the lease keeper prepares nothing
        with self._ready:
            return self._ready.wait_for(lambda: self._prepared >= threads, timeout)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop taking jobs; the jobs still running after ``timeout`` go back to the queue
        (their sandboxes die with this process)."""
        self._stop.set()
        self.queue.notify()
        for t in self._threads:
            t.join(timeout)
        with self._lock:
            held = list(self._held.values())
        for lease in held:
            try:
                self.queue.release(lease)
            except Exception:  # the database is gone: the lease runs out instead
                log.exception("could not put job %s back in the queue", lease.job_id)

    def reclaim(self) -> None:
        """Queue again the jobs whose lease ran out, give up those tried too often, and
        clean what dead workers left behind."""
        for job in self.queue.requeue_stale(timedelta(seconds=self.lease_s), self.max_attempts):
            self._give_up(job.kind, dict(job.payload), job.error)
        if self.housekeeping is not None:
            self.housekeeping()
        self.queue.notify()

    def _give_up(self, kind: str, payload: dict[str, Any], why: str) -> None:
        handler = self.abandon.get(kind)
        if handler is not None:
            try:
                handler(payload, why)
            except Exception:
                log.exception("could not give up a %s job", kind)

    def run_once(self) -> bool:
        """Run one job if one is queued; whether one ran."""
        me = f"{self.name}/{threading.current_thread().name}"
        job = self.queue.claim(me, tuple(self.handlers))
        if job is None:
            return False
        lease = Lease(job.id, me, job.attempts)
        with self._lock:
            self._held[job.id] = lease
        try:
            self.handlers[job.kind](dict(job.payload), lease)
        except Exception as exc:  # a handler's bug must not kill the worker
            log.exception("job %s (%s) failed", job.id, job.kind)
            why = f"{type(exc).__name__}: {exc}"
            if self.queue.finish(lease, error=why):  # a lost lease is the new holder's
                self._give_up(job.kind, dict(job.payload), why)
        else:
            self.queue.finish(lease)  # a no-op when the handler completed it already
        finally:
            with self._lock:
                self._held.pop(job.id, None)
        return True

    def _keeper(self) -> None:
        while not self._stop.wait(self.lease_s / 3):
            try:
                with self._lock:
                    held = list(self._held.values())
                self.queue.renew(held)
                self.reclaim()  # a dead worker's job is queued again within 4/3 leases
            except Exception:  # the database was busy or gone: try again next time
                log.exception("could not renew or reclaim leases")

    def _loop(self) -> None:
        if self.on_thread_start is not None:
            try:
                self.on_thread_start()
            except Exception:  # a preparation that failed: the jobs run without it
                log.exception("could not prepare a worker thread")
        with self._ready:
            self._prepared += 1
            self._ready.notify_all()
        while not self._stop.is_set():
            try:
                if self.run_once():
                    continue
            except Exception:  # the database was busy or gone: wait and try again
                log.exception("worker could not claim a job")
            self.queue.wait(self.poll_s)
