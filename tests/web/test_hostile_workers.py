"""Second hostile campaign: a validation worker that stalls past its lease (a paused VM, a
swapping machine, SIGSTOP) and wakes after another worker took its job and decided it.

Real parts: the catalog on SQLite and on PostgreSQL, the job queue, the upload path and
the code that records verdicts. The stall is the lease running out, written into the job's
heartbeat as the clock would leave it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from opmarket.web._app import open_state
from opmarket.web._auth import Uploader, add_user
from opmarket.web._jobs import Lease
from opmarket.web._publish import Form, accept_upload
from opmarket.web._settings import Settings
from opmarket.web._state import AppState
from opmarket.web.catalog._models import File, Job, Project, User, utcnow
from opmarket.web.validation._job import record, run_validation
from opmarket.web.validation._pipeline import Step, Verdict

from .conftest import Backend
from .plugins import handmade_wheel, manifest_for, plugin_source


def _pending_file(state: AppState, wheel: Path) -> int:
    """Upload ``wheel`` as alice through the upload path: its file id (pending, one job)."""
    with state.db.transaction() as session:
        add_user(session, "alice")
    with state.db.session() as session:
        alice = session.scalars(select(User)).one()
    data = wheel.read_bytes()
    name, version = wheel.name.split("-")[:2]
    form = Form(
        "file_upload", "1", name, version, "bdist_wheel", wheel.name,
        hashlib.sha256(data).hexdigest(), "", "",
    )  # fmt: skip
    with wheel.open("rb") as content:
        accept_upload(state, Uploader(alice, None, 1), form, content)
    with state.db.session() as session:
        return session.scalars(select(File.id)).one()


def _claim(state: AppState, worker: str) -> Lease:
    job = state.queue.claim(worker, ("validate",))
    assert job is not None
    return Lease(job.id, worker, job.attempts)


def test_a_worker_that_stalled_past_its_lease_records_nothing(
    tmp_path: Path, database: Backend
) -> None:
    url = database.new_url("leases")
    state = open_state(
        Settings(data_dir=tmp_path / "market", database_url=url, validation_workers=0)
    )
    try:
        wheel = handmade_wheel(tmp_path, "opm-stall", "1.0.0", {})
        file_id = _pending_file(state, wheel)
        stalled = _claim(state, "host:1/opmarket-worker-0")
        # Stopped past its lease: the job is queued again and another worker takes it.
        with state.db.transaction() as session:
            session.execute(update(Job).values(heartbeat=utcnow() - timedelta(minutes=5)))
        assert state.queue.requeue_stale(timedelta(seconds=60)) == []
        live = _claim(state, "host:2/opmarket-worker-0")
        passed = Verdict(wheel.name, steps=[Step("inspect", "passed")])
        assert record(state, file_id, passed, live)
        assert state.queue.finish(live) is False  # record() completed the job already
        with state.db.session() as session:
            serial = session.scalars(select(Project.serial)).one()
        # Resumed: its renewal, its verdict and its finish change nothing.
        state.queue.renew([stalled])
        failed = Verdict(wheel.name, steps=[Step("load", "failed", ["stale"])])
        assert record(state, file_id, failed, stalled) is False
        assert state.queue.finish(stalled, error="late") is False
        with state.db.session() as session:
            file = session.get(File, file_id)
            assert file is not None
            assert (file.status, file.log) == ("validated", passed.log_text())
            assert session.scalars(select(Project.serial)).one() == serial
            job = session.scalars(select(Job)).one()
            assert (job.status, job.attempts, job.worker, job.error) == (
                "done",
                2,
                live.worker,
                "",
            )
    finally:
        state.db.dispose()


def test_a_given_up_job_is_not_recorded_over_a_later_verdict(
    tmp_path: Path, database: Backend
) -> None:
    """Without a lease (a job given up), a verdict is recorded only over a pending file."""
    url = database.new_url("abandon")
    state = open_state(
        Settings(data_dir=tmp_path / "market", database_url=url, validation_workers=0)
    )
    try:
        wheel = handmade_wheel(tmp_path, "opm-given-up", "1.0.0", {})
        file_id = _pending_file(state, wheel)
        live = _claim(state, "host:2/opmarket-worker-0")
        assert record(state, file_id, Verdict(wheel.name, steps=[Step("x", "passed")]), live)
        late = Verdict(wheel.name, steps=[Step("validation", "failed", ["given up"])])
        assert record(state, file_id, late) is False
        with state.db.session() as session:
            assert session.scalars(select(File.status)).one() == "validated"
    finally:
        state.db.dispose()


def _plugin_wheel(folder: Path, dist: str) -> Path:
    """A small plugin wheel that passes validation (written with zipfile)."""
    package = dist.replace("-", "_")
    module = folder / f"{package}.py"
    module.write_text(plugin_source("Test>Locked", 2))
    return handmade_wheel(
        folder,
        dist,
        "1.0.0",
        {
            f"{package}/__init__.py": module.read_bytes(),
            f"{package}/opmarket.opset.json": manifest_for(module, dist, "1.0.0").encode(),
            f"{package}-1.0.0.dist-info/entry_points.txt": (
                f"[opmarket]\n{package} = {package}\n".encode()
            ),
        },
    )


@pytest.mark.slow
def test_a_verdict_the_database_cannot_take_yet_is_stored_once_it_can(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Under load SQLite's busy timeout can run out while a worker stores a verdict: the
    valid wheel was rejected with "its verdict could not be stored". It is stored later."""
    state = open_state(Settings(data_dir=tmp_path / "market", validation_workers=0))
    blocker = sqlite3.connect(tmp_path / "market" / "opmarket.sqlite3", isolation_level=None)
    try:
        wheel = _plugin_wheel(tmp_path, "opm-locked")
        file_id = _pending_file(state, wheel)
        lease = _claim(state, "host:1/opmarket-worker-0")
        blocker.execute("BEGIN IMMEDIATE")  # another process writing, for longer than usual
        worker = threading.Thread(target=run_validation, args=(state, file_id, lease))
        with caplog.at_level(logging.WARNING, logger="opmarket.web.validation"):
            worker.start()
            while not any("could not be stored yet" in r.getMessage() for r in caplog.records):
                assert worker.is_alive(), caplog.text
                time.sleep(0.1)
            blocker.execute("ROLLBACK")
            worker.join(120)
        with state.db.session() as session:
            file = session.get(File, file_id)
            assert file is not None
            assert file.status == "validated", file.log
    finally:
        with contextlib.suppress(sqlite3.Error):
            blocker.execute("ROLLBACK")
        blocker.close()
        state.db.dispose()
