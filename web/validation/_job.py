"""The validation job: run the pipeline on a stored wheel and record the verdict."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import delete, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import joinedload

from opmarket.registry._metadata import parse_version
from opmarket.web._jobs import Lease, Worker
from opmarket.web._state import AppState
from opmarket.web._status import FileStatus
from opmarket.web.catalog._models import File, KernelEntry, OpEntry, Release, utcnow
from opmarket.web.catalog._queries import refresh_summary
from opmarket.web.gpu._index import store_gpu
from opmarket.web.routes._cache import prune_changes
from opmarket.web.sandbox._cgroup import pid_alive, sweep_stale
from opmarket.web.sandbox._run import SandboxUnavailableError
from opmarket.web.storage._local import copy_out
from opmarket.web.validation._deps import CatalogSource
from opmarket.web.validation._harness import start_ahead
from opmarket.web.validation._loads import known_environments
from opmarket.web.validation._owned import read_environment
from opmarket.web.validation._pipeline import (
    Previous,
    Step,
    Verdict,
    job_limits,
    limits_from,
    validate_wheel,
)
from opmarket.web.validation._steps import StepStatus
from opmarket.web.validation._verdict import announce, rejection_reason

if TYPE_CHECKING:
    from opmarket.web._settings import Settings

__all__ = [
    "abandon_validation",
    "clean_leftovers",
    "previous_release",
    "record",
    "run_validation",
    "validation_handler",
    "validation_worker",
]

_JOB_PREFIX = "opmarket-job-"

log = logging.getLogger("opmarket.web.validation")


def previous_release(state: AppState, project_id: int, version: str) -> Previous | None:
    """The op-set of the project's newest validated release older than ``version``."""
    mine = parse_version(version)
    with state.db.session() as session:
        rows = session.execute(
            select(File.filename, File.opset, Release.version)
            .join(Release)
            .where(
                Release.project_id == project_id,
                File.status == FileStatus.VALIDATED,
                File.opset != "",
            )
        ).all()
    older = [
        (v, r)
        for r in rows
        if (v := parse_version(r.version)) is not None and mine is not None and v < mine
    ]
    if not older:
        return None
    _, best = max(older, key=lambda pair: pair[0])
    return Previous(label=best.filename, opset=best.opset)


def validation_handler(state: AppState) -> Any:
    """The job handler for kind ``validate``: ``{"file_id": N}``."""

    def handle(payload: dict[str, Any], lease: Lease) -> None:
        run_validation(state, int(payload["file_id"]), lease)

    return handle


def _failure(filename: str, why: str) -> Verdict:
    return Verdict(
        filename,
        steps=[
            Step(
                "validation",
                StepStatus.FAILED,
                [
                    f"the marketplace could not validate this file: {why}",
                    "upload the same file again to retry",
                ],
            )
        ],
    )


def abandon_validation(state: AppState) -> Any:
    """For jobs given up (their worker died each time): reject the file with the reason."""

    def abandon(payload: dict[str, Any], why: str) -> None:
        file_id = int(payload["file_id"])
        with state.db.session() as session:
            file = session.get(File, file_id)
            if file is None or file.status != FileStatus.PENDING:
                return
            filename = file.filename
        record(state, file_id, _failure(filename, why))

    return abandon


def _job_folder() -> Path:
    return Path(tempfile.mkdtemp(prefix=f"{_JOB_PREFIX}{os.getpid()}-"))


def run_validation(state: AppState, file_id: int, lease: Lease | None = None) -> Verdict | None:
    """Validate the stored file ``file_id`` if it is pending; its verdict. Every way this
    can fail ends in ``rejected`` with the reason (or raises, when even that cannot be
    stored: the job is then tried again, and given up as rejected). Under a job's ``lease``,
    the verdict is recorded only while the lease holds (None when it was lost)."""
    with state.db.session() as session:
        file = session.get(File, file_id, options=[joinedload(File.release)])
        if file is None or file.status != FileStatus.PENDING:
            return None
        filename, sha256 = file.filename, file.sha256
        project_id, version = file.release.project_id, file.release.version
    limits, wheel_limits = limits_from(state.settings)
    tmp = _job_folder()
    try:
        local = copy_out(state.storage, sha256, tmp / filename)
        verdict = validate_wheel(
            local,
            previous=previous_release(state, project_id, version),
            limits=limits,
            wheel_limits=wheel_limits,
            gpu=state.settings.gpu_available,
            private=[state.settings.data_dir.resolve()],
            dependencies=CatalogSource(state),
            known=known_environments((sys.executable, *state.settings.loads_with)),
            warm=True,  # the next upload's sandbox starts while this worker is idle
        )
    except Exception as exc:  # never leave a file pending for ever: say why it failed
        log.exception("%s: validation could not run", filename)
        verdict = _failure(filename, f"{type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    try:
        kept = _store(state, file_id, verdict, lease)
    except Exception as exc:  # what it found cannot be stored: reject it with that reason
        log.exception("%s: the verdict could not be stored", filename)
        verdict = _failure(
            filename, f"its verdict could not be stored: {type(exc).__name__}: {exc}"
        )
        kept = record(state, file_id, verdict, lease)
    if not kept:
        log.warning("%s: its job was taken by another worker; this verdict is not kept", filename)
        return None
    return verdict


#: Tries to store a verdict through transient database errors, and the pause after each.
_STORE_TRIES = 5
_STORE_PAUSE_S = 1.0


def _store(state: AppState, file_id: int, verdict: Verdict, lease: Lease | None) -> bool:
    """``record``, tried again after a transient database error: SQLite's "database is
    locked" once its busy timeout ran out under load, a connection lost. Such an error says
    nothing about the file: it rejected valid wheels when it was taken for the verdict."""
    for tried in range(1, _STORE_TRIES + 1):
        try:
            return record(state, file_id, verdict, lease)
        except OperationalError as exc:
            if tried == _STORE_TRIES:
                raise
            log.warning(
                "%s: the verdict could not be stored yet (%s); trying again",
                verdict.filename,
                str(exc).splitlines()[0],
            )
            time.sleep(_STORE_PAUSE_S * tried)
    raise AssertionError("unreachable")


def _pid_of(name: str, prefix: str) -> int | None:
    owner = name.removeprefix(prefix).split("-", 1)[0]
    return int(owner) if name.startswith(prefix) and owner.isdigit() else None


def clean_leftovers(settings: Settings) -> int:
    """Remove what killed validations left: job folders and control groups of processes
    that are gone, and upload spool files older than an hour; how many were removed."""
    removed = sweep_stale()
    for folder in Path(tempfile.gettempdir()).glob("opmarket-*"):
        for prefix in (_JOB_PREFIX, "opmarket-unsandboxed-"):
            pid = _pid_of(folder.name, prefix)
            if pid is not None and not pid_alive(pid):
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
    cutoff = time.time() - 3600
    with contextlib.suppress(OSError):
        for spool in settings.tmp_dir.glob("*.upload"):
            with contextlib.suppress(OSError):
                if spool.stat().st_mtime < cutoff:
                    spool.unlink()
                    removed += 1
    return removed


def validation_worker(state: AppState, threads: int) -> Worker:
    """Worker threads for ``validate`` jobs: leases of one timeout (at least 2 s, at most
    60 s), the queue polled every 0.05 s when idle (a plain read, no lock), given-up jobs
    rejected, leftovers of dead workers cleaned, the page caches' change log pruned; each
    thread starts its first validation's sandbox before it looks for a job."""
    settings = state.settings
    return Worker(
        state.queue,
        {"validate": validation_handler(state)},
        threads=threads,
        lease_s=max(2.0, min(settings.validation_timeout_s, 60.0)),
        # another process's upload is claimed within 0.05 s (one indexed read, no lock)
        poll_s=0.05,
        abandon={"validate": abandon_validation(state)},
        housekeeping=functools.partial(_housekeeping, state),
        # the first upload's sandbox too starts before the upload (run_validation: warm)
        on_thread_start=functools.partial(_start_ahead, state),
    )


def _start_ahead(state: AppState) -> None:
    """Before a worker thread's first job: its sandbox started, and what every validation
    reads of the environments (once per process) read."""
    limits, _ = limits_from(state.settings)
    read_environment()
    known_environments((sys.executable, *state.settings.loads_with))
    with contextlib.suppress(SandboxUnavailableError):  # each job's verdict says so
        start_ahead(
            job_limits(limits, state.settings.gpu_available),
            interpreter=sys.executable,
            private=[state.settings.data_dir.resolve()],
        )


def _housekeeping(state: AppState) -> None:
    removed = clean_leftovers(state.settings)
    if removed:
        log.info("removed %d leftover(s) of stopped validations", removed)
    prune_changes(state.db.engine)  # the page caches' change log keeps its newest rows


def record(state: AppState, file_id: int, verdict: Verdict, lease: Lease | None = None) -> bool:
    """Store the verdict, the ops and kernels; bump the project's serial (the index shows
    the file from now on when it was validated). With a job's ``lease``: only while it holds
    the job, which the same transaction completes; without: only while the file is pending.
    Whether it was stored."""
    result = verdict.to_json()
    with state.db.transaction() as session:
        if lease is not None and not state.queue.complete(session, lease):
            return False  # a worker that stalled past its lease: another has the job
        # The file with its release and project in one query (not one each on first use).
        file = session.get(File, file_id, options=[_WITH_PROJECT])
        assert file is not None
        if lease is None and file.status != FileStatus.PENDING:
            return False
        # Before the file changes: each statement flushes what changed first, which wrote
        # the file's row once per statement.
        session.execute(delete(OpEntry).where(OpEntry.file_id == file_id))
        session.execute(delete(KernelEntry).where(KernelEntry.file_id == file_id))
        store_gpu(session, file, verdict.gpu)
        file.status = verdict.status
        file.log = verdict.log_text()
        file.result = result
        file.opset = verdict.opset
        file.validated = utcnow()
        file.loads_with = verdict.loads_with
        for op in verdict.ops:
            session.add(
                OpEntry(file_id=file_id, op=op.name, signature=op.signature, summary=op.summary)
            )
        for k in verdict.kernels:
            session.add(
                KernelEntry(
                    file_id=file_id,
                    op=k.op,
                    device=k.device,
                    dtypes=k.dtypes,
                    status=k.status,
                    message=k.message,
                )
            )
        project = file.release.project
        project.serial += 1
        normalized, filename = project.normalized, file.filename
        session.flush()
        refresh_summary(session, project.id)
    state.pages.forget(normalized)
    announce(filename, verdict.status, rejection_reason(result))
    return True


_WITH_PROJECT = joinedload(File.release).joinedload(Release.project)
