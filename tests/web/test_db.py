"""The catalog's schema, the job queue and the file store, without a server."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from opmarket.web import LocalFileStore, StorageError, storage_from_url
from opmarket.web._jobs import JobQueue, Lease, Worker
from opmarket.web.catalog._db import Database, migrate
from opmarket.web.catalog._models import Base

from .conftest import Backend
from .postgres import PostgresServer


def _not_search_index(
    obj: object, name: str | None, type_: str, reflected: bool, _: object
) -> bool:
    # The full-text index is not a model: SQLite's FTS5 tables, PostgreSQL's tsvector column
    # and its GIN indexes (0006's, and 0011's over an expression).
    if type_ == "table" and reflected and (name or "").startswith("project_search"):
        return False
    search = {
        "column": {"search"},
        "index": {
            "ix_project_summaries_search",
            "ix_project_summaries_prefixes",
            "ix_project_kernels_spaced",  # PostgreSQL's, partial: see 0011
        },
    }
    return not (reflected and name in search.get(type_, set()))


def _migrate(db: Database) -> Callable[[str], None]:
    """``to(revision)``: upgrades or downgrades ``db``'s schema to ``revision`` ("head" up)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "opmarket.web.catalog:migrations")

    def to(revision: str) -> None:
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            (command.upgrade if revision == "head" else command.downgrade)(config, revision)

    return to


def test_migrations_build_exactly_the_models(tmp_path: Path, database: Backend) -> None:
    db = Database(database.new_url("schema") or f"sqlite:///{tmp_path / 'c.sqlite3'}")
    migrate(db.engine)  # a second run changes nothing
    with db.engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": _not_search_index})
        diff = compare_metadata(context, Base.metadata)
    assert diff == []
    db.dispose()


def test_each_job_is_claimed_once_by_concurrent_workers(tmp_path: Path, database: Backend) -> None:
    db = Database(database.new_url("jobs") or f"sqlite:///{tmp_path / 'c.sqlite3'}")
    queue = JobQueue(db)
    with db.transaction() as session:
        for n in range(40):
            queue.enqueue(session, "count", {"n": n})
    seen: list[int] = []
    lock = threading.Lock()

    def handle(payload: dict[str, object], _lease: Lease) -> None:
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


def test_an_idle_worker_looks_at_the_queue_without_the_write_lock(tmp_path: Path) -> None:
    """Idle workers look at the queue often (every 0.05 s): a look at an empty queue must
    not wait for SQLite's write lock, which an upload or a verdict may hold (before, each
    look took it: with a writer busy, the look failed after the busy timeout)."""
    path = tmp_path / "c.sqlite3"
    db = Database(f"sqlite:///{path}")
    queue = JobQueue(db)
    writer = sqlite3.connect(path, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")  # another process's write, in progress
        assert queue.claim("idle", ("validate",)) is None
        writer.execute("ROLLBACK")
        with db.transaction() as session:
            job = queue.enqueue(session, "validate", {"n": 1})
        claimed = queue.claim("busy", ("validate",))  # a queued job is claimed as before
        assert claimed is not None and claimed.id == job.id and claimed.worker == "busy"
        assert queue.claim("busy", ("validate",)) is None
    finally:
        writer.close()
        db.dispose()


def test_a_failing_handler_marks_its_job_failed(tmp_path: Path, database: Backend) -> None:
    from opmarket.web.catalog._models import Job

    db = Database(database.new_url("jobs") or f"sqlite:///{tmp_path / 'c.sqlite3'}")
    queue = JobQueue(db)
    with db.transaction() as session:
        queue.enqueue(session, "boom", {})

    def boom(_payload: dict[str, object], _lease: Lease) -> None:
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
    with pytest.raises(StorageError, match="use file:///path or s3://"):
        storage_from_url("gs://bucket/prefix")


def test_migration_0003_keys_files_and_keeps_those_that_already_collide(tmp_path: Path) -> None:
    import sqlalchemy as sa
    from alembic import command
    from alembic.config import Config

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'old.sqlite3'}")
    config = Config()
    config.set_main_option("script_location", "opmarket.web.catalog:migrations")
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0001")
        connection.execute(
            sa.text("INSERT INTO users (id, name, created) VALUES (1, 'alice', '2026-01-01');")
        )
        connection.execute(
            sa.text(
                "INSERT INTO projects (id, name, normalized, owner_id, created, summary, serial) "
                "VALUES (1, 'Foo_Bar', 'foo-bar', 1, '2026-01-01', '', 0)"
            )
        )
        connection.execute(
            sa.text(
                "INSERT INTO releases (id, project_id, version, created) "
                "VALUES (1, 1, '1.0', '2026-01-01')"
            )
        )
        # What the hostile campaign left: one distribution under three names.
        for n, name in enumerate(
            [
                "Foo_Bar-1.0-py3-none-any.whl",
                "foo_bar-1.0-py3-none-any.whl",
                "foo_bar-1.0.0-py3-none-any.whl",
            ],
            1,
        ):
            connection.execute(
                sa.text(
                    "INSERT INTO files (id, release_id, filename, sha256, size, requires_python, "
                    "metadata_sha256, summary, uploaded, uploader_id, status, yanked, "
                    "yanked_reason, log, opset) VALUES (:id, 1, :name, :sha, 1, '', '', '', "
                    "'2026-01-01', 1, 'validated', 0, '', '', '')"
                ),
                {"id": n, "name": name, "sha": str(n) * 64},
            )
    migrate(engine)
    with engine.connect() as conn:
        keys = conn.execute(sa.text("SELECT id, dist_key FROM files ORDER BY id")).all()
    assert keys == [
        (1, "foo-bar/1//py3-none-any"),
        (2, "foo-bar/1//py3-none-any#duplicate-2"),
        (3, "foo-bar/1//py3-none-any#duplicate-3"),
    ]
    engine.dispose()


def test_one_blob_stored_by_many_threads_at_once(tmp_path: Path) -> None:
    store = LocalFileStore(tmp_path / "files")
    source = tmp_path / "wheel"
    source.write_bytes(b"w" * 300_000)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def put() -> None:
        barrier.wait()
        try:
            store.put_file(source, digest)
        except BaseException as exc:  # collected, then asserted empty
            errors.append(exc)

    threads = [threading.Thread(target=put) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert b"".join(store.read(digest)) == source.read_bytes()
    assert [p.name for p in (tmp_path / "files").rglob("*") if p.is_file()] == [digest]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("first", "works"), [("import opmarket.tensorflow", True), ("import tensorflow", False)]
)
def test_an_sqlite_without_fts5_is_a_clear_error(tmp_path: Path, first: str, works: bool) -> None:
    """TensorFlow bundles an SQLite without FTS5; Python's sqlite3 binds to it when imported
    after TensorFlow. opmarket.tensorflow imports sqlite3 first; otherwise the catalog says
    what happened instead of failing in a migration."""
    pytest.importorskip("tensorflow")
    script = (
        f"{first}\n"
        "from opmarket.web.catalog._db import Database, DatabaseError\n"
        "try:\n"
        f"    Database('sqlite:///{tmp_path / 'c.sqlite3'}')\n"
        "except DatabaseError as exc:\n"
        "    print('error:', exc)\n"
        "else:\n"
        "    print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    if works:
        assert done.stdout.strip().splitlines()[-1] == "ok"
    else:
        assert "has no FTS5" in done.stdout and "Run the marketplace in its own process" in (
            done.stdout
        )


def test_a_write_transaction_on_sqlite_holds_the_lock_from_its_first_read(tmp_path: Path) -> None:
    """What a write transaction read (a file's status, say) is what it writes over: its
    reads are inside it, under SQLite's write lock. Python's sqlite3 began the transaction
    only at the first write, so the reads before it raced other processes' writes."""
    from sqlalchemy import select

    from opmarket.web.catalog._models import Job

    path = tmp_path / "c.sqlite3"
    db = Database(f"sqlite:///{path}")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)  # another process, say
    try:
        with db.transaction() as session:
            session.scalars(select(Job)).all()  # a check, before any write
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute(
                    "INSERT INTO jobs (kind, payload, status, attempts, worker, "
                    "created, error) VALUES ('x', '{}', 'queued', 0, '', 0, '')"
                )
        other.execute("BEGIN IMMEDIATE")  # and the lock is free once it ends
        other.execute("ROLLBACK")
    finally:
        other.close()
        db.dispose()


def test_migration_0009_indexes_every_prefix_of_a_catalog_made_before_it(tmp_path: Path) -> None:
    """A catalog searched through 0006's index (prefixes of 2 and 3 characters) finds the
    same after 0009 (prefixes of 1 to 12), and what is written after it is found too."""
    import sqlalchemy as sa

    from opmarket.web.catalog._catalog import search_packages
    from opmarket.web.catalog._queries import refresh_summary
    from opmarket.web.catalog._search import SearchQuery
    from opmarket.web.catalog._seed import seed

    db = Database(f"sqlite:///{tmp_path / 'c.sqlite3'}")
    to = _migrate(db)

    def found(queries: list[str]) -> list[list[str]]:
        with db.session() as session:
            return [
                [p.normalized for p in search_packages(session, SearchQuery(q=q)).packages]
                for q in queries
            ]

    def table_sql() -> str:
        with db.engine.connect() as conn:
            return str(
                conn.execute(
                    sa.text("SELECT sql FROM sqlite_master WHERE name = 'project_search'")
                ).scalar()
            )

    to("0008")
    seed(db, 120, random_seed=3)
    queries = ["a", "co", "conv", "vision gemm", "atten", "flashgemm", "12", "nosuch"]
    before = found(queries)
    assert "prefix='2 3'" in table_sql() and any(before) and not all(before)
    to("head")
    assert "prefix='1 2 3 4 5 6 7 8 9 10 11 12'" in table_sql()
    assert found(queries) == before
    with db.transaction() as session:  # the triggers of 0006 keep the new table
        session.execute(sa.text("UPDATE projects SET summary = 'zanzibar kernels' WHERE id = 1"))
        refresh_summary(session, 1)
    assert len(found(["zanzib"])[0]) == 1 and found(["zanzibar k"]) == found(["zanzib"])
    db.dispose()


def test_postgresql_connections_plan_in_one_process_without_jit(postgres: PostgresServer) -> None:
    """Every connection of the catalog's engine plans without parallel workers or JIT
    compilation (both cost more than the catalog's small queries save)."""
    import sqlalchemy as sa

    db = Database(postgres.new_database("settings"), pool_size=2, max_overflow=0)
    try:
        with db.engine.connect() as first, db.engine.connect() as second:
            for conn in (first, second):
                assert conn.execute(sa.text("SHOW max_parallel_workers_per_gather")).scalar() == "0"
                assert conn.execute(sa.text("SHOW jit")).scalar() == "off"
        with db.transaction() as session:  # a rolled back transaction keeps them too
            session.execute(sa.text("SELECT 1"))
        with db.session() as session:
            assert session.execute(sa.text("SHOW jit")).scalar() == "off"
    finally:
        db.dispose()


def test_migration_0010_empties_the_search_index_pending_list(postgres: PostgresServer) -> None:
    """A PostgreSQL catalog made before 0010 (its GIN index with a pending list of new
    entries) finds the same after it, with the list moved into the index and no new one
    growing: what is written after it is found too."""
    import sqlalchemy as sa

    from opmarket.web.catalog._queries import refresh_summary
    from opmarket.web.catalog._seed import seed

    db = Database(postgres.new_database("m0010"))
    to = _migrate(db)

    def found(queries: list[str]) -> list[list[str]]:
        """What 0006's column finds (the search's counts need 0011 too)."""
        sql = sa.text(
            "SELECT normalized FROM project_summaries WHERE search @@ "
            "to_tsquery('simple', :q) ORDER BY normalized"
        )
        with db.engine.connect() as conn:
            return [list(conn.execute(sql, {"q": q}).scalars()) for q in queries]

    def index() -> tuple[object, int]:
        """The index's options, and the pages of its pending list (its metapage's)."""
        with db.engine.begin() as conn:
            conn.execute(sa.text("CREATE EXTENSION IF NOT EXISTS pageinspect"))
            options = conn.execute(
                sa.text("SELECT reloptions FROM pg_class WHERE relname = :n"),
                {"n": "ix_project_summaries_search"},
            ).scalar()
            pending = conn.execute(
                sa.text(
                    "SELECT n_pending_pages FROM gin_metapage_info("
                    "get_raw_page('ix_project_summaries_search', 0))"
                )
            ).scalar()
        return options, int(pending)

    to("0009")
    seed(db, 120, random_seed=3)  # which leaves the pending list empty
    with db.transaction() as session:  # changes (uploads, verdicts) go to the pending list
        for project_id in range(1, 121, 3):
            refresh_summary(session, project_id)
    queries = ["a:*", "co:*", "conv:*", "vision:* & gemm:*", "atten:*", "12:*", "nosuch:*"]
    before = found(queries)
    options, pending = index()
    assert options is None and pending > 0
    to("head")
    assert index() == (["fastupdate=off"], 0)
    assert found(queries) == before and any(before)
    with db.transaction() as session:
        session.execute(sa.text("UPDATE projects SET summary = 'zanzibar kernels' WHERE id = 1"))
        refresh_summary(session, 1)
    assert index()[1] == 0
    assert len(found(["zanzib:*"])[0]) == 1
    to("0009")
    assert index()[0] is None
    db.dispose()


def test_migration_0011_counts_searches_in_an_index_of_every_prefix(
    postgres: PostgresServer,
) -> None:
    """A PostgreSQL catalog made before 0011 counts the same after it, through the index of
    every prefix (the plan says so), and what is written after it is counted too."""
    import sqlalchemy as sa

    from opmarket.web.catalog import _queries
    from opmarket.web.catalog._queries import refresh_summary, search
    from opmarket.web.catalog._search import SearchQuery
    from opmarket.web.catalog._seed import seed

    db = Database(postgres.new_database("m0011"))
    to = _migrate(db)

    asked = [
        SearchQuery(q=q, device=device)
        for q in ("a", "co", "conv", "vision gemm", "attention", "12", "nosuch")
        for device in ("", "GPU")
    ]

    def found() -> list[tuple[int, bool, list[str]]]:
        with db.session() as session:
            pages = [search(session, a, limit=1000) for a in asked]
        return [(p.total, p.capped, [r.normalized for r in p.rows]) for p in pages]

    def count_plan(q: str) -> str:
        statements: list[tuple[str, object]] = []

        def keep(_c: object, _cur: object, statement: str, params: object, *_: object) -> None:
            statements.append((statement, params))

        sa.event.listen(db.engine, "before_cursor_execute", keep)
        with db.session() as session:
            search(session, SearchQuery(q=q, device="GPU"))
        sa.event.remove(db.engine, "before_cursor_execute", keep)
        count = next(s for s in statements if "count(" in s[0])
        with db.engine.connect() as conn:
            return "\n".join(r[0] for r in conn.exec_driver_sql("EXPLAIN " + count[0], count[1]))

    to("0010")
    seed(db, 150, random_seed=5)
    old = _queries.PREFIX_MOST
    try:  # no word short enough for the prefix index: counted as before 0011
        _queries.PREFIX_MOST = 0
        before = found()
    finally:
        _queries.PREFIX_MOST = old
    assert any(total for total, _, _ in before) and not all(total for total, _, _ in before)
    to("head")
    assert "ix_project_summaries_prefixes" in count_plan("vision gemm")
    with db.engine.connect() as conn:
        spaced = "SELECT 1 FROM project_kernels WHERE device LIKE '% %'"
        assert "ix_project_kernels_spaced" in str(conn.execute(sa.text("EXPLAIN " + spaced)).all())
    assert found() == before
    old = _queries.COUNT_LIMIT
    try:  # counts that stop, through the new index
        _queries.COUNT_LIMIT = 3
        assert [(min(t, 3), t > 3) for t, _, _ in before] == [(t, c) for t, c, _ in found()]
    finally:
        _queries.COUNT_LIMIT = old
    with db.transaction() as session:
        session.execute(sa.text("UPDATE projects SET summary = 'zanzibar kernels' WHERE id = 1"))
        refresh_summary(session, 1)
        devices = session.scalar(
            sa.text("SELECT devices FROM project_summaries WHERE project_id = 1")
        )
    with db.session() as session:
        assert search(session, SearchQuery(q="zanzib")).total == 1
        gpu = search(session, SearchQuery(q="zanzib", device="GPU")).total
    assert gpu == (1 if "GPU" in str(devices).split() else 0)
    to("0010")
    with db.engine.connect() as conn:
        for index in ("ix_project_summaries_prefixes", "ix_project_kernels_spaced"):
            assert conn.execute(sa.text("SELECT to_regclass(:i)"), {"i": index}).scalar() is None
    db.dispose()
