"""The catalog's schema, the job queue and the file store, without a server."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from opmarket.web import LocalFileStore, StorageError, storage_from_url
from opmarket.web._db import Database, migrate
from opmarket.web._jobs import JobQueue, Worker
from opmarket.web._models import Base


def test_migrations_build_exactly_the_models(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'c.sqlite3'}")
    migrate(db.engine)  # a second run changes nothing
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
    db.dispose()


def test_each_job_is_claimed_once_by_concurrent_workers(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'c.sqlite3'}")
    queue = JobQueue(db)
    with db.transaction() as session:
        for n in range(40):
            queue.enqueue(session, "count", {"n": n})
    seen: list[int] = []
    lock = threading.Lock()

    def handle(payload: dict[str, object]) -> None:
        with lock:
            seen.append(int(str(payload["n"])))

    workers = [Worker(queue, {"count": handle}, threads=3, poll_s=0.05) for _ in range(2)]
    for w in workers:
        w.start()
    for _ in range(200):
        if len(seen) >= 40:
            break
        threading.Event().wait(0.05)
    for w in workers:
        w.stop()
    assert sorted(seen) == list(range(40))
    db.dispose()


def test_a_failing_handler_marks_its_job_failed(tmp_path: Path) -> None:
    from opmarket.web._models import Job

    db = Database(f"sqlite:///{tmp_path / 'c.sqlite3'}")
    queue = JobQueue(db)
    with db.transaction() as session:
        queue.enqueue(session, "boom", {})

    def boom(_payload: dict[str, object]) -> None:
        raise RuntimeError("broken handler")

    assert Worker(queue, {"boom": boom}).run_once()
    with db.session() as session:
        (job,) = session.query(Job).all()
        assert (job.status, job.error) == ("failed", "RuntimeError: broken handler")
    db.dispose()


def test_file_store_is_content_addressed(tmp_path: Path) -> None:
    store = storage_from_url((tmp_path / "files").as_uri())
    assert isinstance(store, LocalFileStore)
    data = bytes(range(256)) * 100
    key = store.put_bytes(data)
    assert key == hashlib.sha256(data).hexdigest()
    assert store.size(key) == len(data)
    assert b"".join(store.read(key)) == data
    assert b"".join(store.read(key, 10, 20)) == data[10:20]
    store.delete(key)
    with pytest.raises(StorageError):
        store.size(key)
    with pytest.raises(StorageError):
        store.read("../../etc/passwd")
    with pytest.raises(StorageError, match="only file://"):
        storage_from_url("s3://bucket/prefix")
