"""Validation by separate ``opmarket worker`` processes, for servers that only serve."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from opmarket.web import Limits
from opmarket.web._jobs import JobQueue, Worker
from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import Job, utcnow
from opmarket.web.sandbox._run import sandbox_problem

from .conftest import OPMARKET, Market, Wheels, clean_env, start_market, twine
from .test_sandbox import processes_with, wait_for


def job_rows(market: Market) -> list[tuple[object, ...]]:
    """(status, worker, attempts, started) of every job, read from the catalog's database."""
    with contextlib.closing(sqlite3.connect(market.data / "opmarket.sqlite3")) as db:
        return list(db.execute("SELECT status, worker, attempts, started FROM jobs"))


@pytest.fixture
def serving_only(tmp_path: Path) -> Iterator[Market]:
    # Uploads answer "pending" at once: nothing here validates them.
    yield from start_market(tmp_path / "market", validation_workers=0, flags=("--upload-wait", "0"))


@pytest.mark.slow
def test_a_worker_process_validates_what_a_serving_only_server_accepted(
    serving_only: Market, wheels: Wheels
) -> None:
    market = serving_only
    assert twine(market, market.tokens["alice"], wheels.double_1_0).returncode == 0
    # Nothing in this server validates: its job is queued and no worker ever claimed it.
    assert job_rows(market) == [("queued", "", 0, None)]
    (entry,) = market.json("/api/packages/opm-double")["files"]
    assert entry["status"] == "pending"
    assert market.get("/simple/opm-double/")[0] == 404
    assert job_rows(market) == [("queued", "", 0, None)]
    worker = subprocess.Popen(
        [OPMARKET, "worker", "--data", str(market.data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        entry = market.wait_for("opm-double", wheels.double_1_0.name)
        assert entry["status"] == "validated", entry["log"]
        deadline = time.monotonic() + 10  # the server sees the change within its cache time
        while market.get("/simple/opm-double/")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert market.get("/simple/opm-double/")[0] == 200
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err


def _run_worker_until(market: Market, project: str, filename: str) -> dict[str, object]:
    worker = subprocess.Popen(
        [OPMARKET, "worker", "--data", str(market.data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        return market.wait_for(project, filename)
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


@pytest.mark.slow
def test_a_validation_that_cannot_run_is_rejected_and_the_same_upload_retries_it(
    serving_only: Market, wheels: Wheels
) -> None:
    market = serving_only
    wheel = wheels.double_1_0
    assert twine(market, market.tokens["alice"], wheel).returncode == 0
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    (blob,) = [p for p in (market.data / "files").rglob("*") if p.is_file() and digest in p.name]
    blob.unlink()  # the stored file is lost before any worker validates it
    entry = _run_worker_until(market, "opm-double", wheel.name)
    assert entry["status"] == "rejected"  # not pending for ever
    assert "could not validate this file" in str(entry["log"])
    # The same bytes again restore the file and validate it once more.
    assert twine(market, market.tokens["alice"], wheel).returncode == 0
    assert blob.exists()
    entry = _run_worker_until(market, "opm-double", wheel.name)
    assert entry["status"] == "validated", entry["log"]


@pytest.mark.slow
def test_someone_elses_identical_file_is_403_not_200(serving_only: Market, wheels: Wheels) -> None:
    market = serving_only
    assert twine(market, market.tokens["alice"], wheels.double_1_0).returncode == 0
    done = twine(market, market.tokens["bob"], wheels.double_1_0)
    assert done.returncode != 0 and "403" in done.stdout + done.stderr


def test_a_job_whose_worker_stopped_renewing_is_taken_again_then_given_up(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'c.sqlite3'}")
    queue = JobQueue(db)
    with db.transaction() as session:
        queue.enqueue(session, "count", {"n": 1})
    ran: list[int] = []
    given_up: list[str] = []
    done = threading.Event()
    # A worker that claims the job and dies (never renews), twice.
    for _ in range(2):
        assert queue.claim("dead:1/thread", ("count",)) is not None
        assert queue.requeue_stale(timedelta(seconds=30)) == []  # its lease still holds
        assert queue.claim("dead:1/thread", ("count",)) is None
        with db.transaction() as session:  # time passes: its lease runs out
            session.execute(update(Job).values(heartbeat=utcnow() - timedelta(seconds=60)))
        assert queue.requeue_stale(timedelta(seconds=30)) == []
    # A live worker takes it over while it runs (not at its start: the job was running then).
    assert queue.claim("dead:1/thread", ("count",)) is not None
    worker = Worker(
        queue,
        {"count": lambda p, _lease: (ran.append(int(str(p["n"]))), done.set())},
        lease_s=1.0,
        abandon={"count": lambda p, why: given_up.append(why)},
    )
    worker.start()
    try:
        # Third attempt died too: given up, with the reason, instead of running for ever.
        deadline = time.monotonic() + 10
        while not given_up and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        worker.stop()
    assert ran == []
    assert given_up == ["its worker stopped during each of 3 attempts"]
    with db.session() as session:
        (job,) = session.scalars(select(Job))
        assert (job.status, job.attempts) == ("failed", 3)
    db.dispose()


@pytest.mark.slow
def test_an_upload_waits_for_the_verdict_of_a_worker_process(
    tmp_path: Path, wheels: Wheels
) -> None:
    """The waiting upload sees a verdict recorded by another process (from the database)."""
    flags = ("--upload-wait", "300")
    for market in start_market(tmp_path / "market", validation_workers=0, flags=flags):
        worker = subprocess.Popen(
            [OPMARKET, "worker", "--data", str(market.data)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=clean_env(),
        )
        try:
            done = twine(market, market.tokens["bob"], wheels.wrong)
        finally:
            worker.terminate()
            worker.communicate(timeout=30)
        assert done.returncode == 1, done.stdout + done.stderr
        assert '"code": "rejected"' in done.stdout
        assert "differs from the reference" in done.stdout


@pytest.mark.slow
@pytest.mark.skipif(bool(sandbox_problem(Limits())), reason="no sandbox here")
def test_a_worker_starts_its_first_uploads_sandbox_before_the_upload(
    serving_only: Market, wheels: Wheels
) -> None:
    market = serving_only
    others = processes_with("/input/probe.py")  # other tests' servers' started sandboxes
    worker = subprocess.Popen(
        [OPMARKET, "worker", "--data", str(market.data)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    try:
        # Nothing uploaded yet: its thread's sandbox is started and waits for a job.
        wait_for(lambda: processes_with("/input/probe.py", besides=others))
        assert twine(market, market.tokens["alice"], wheels.double_1_0).returncode == 0
        entry = market.wait_for("opm-double", wheels.double_1_0.name)
        assert entry["status"] == "validated", entry["log"]
    finally:
        worker.terminate()
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    # gone with it
    wait_for(lambda: not processes_with("/input/probe.py", besides=others), timeout=10)
