"""The database: engine, sessions, and migrations to the newest schema."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from opmarket.sdk import OpmarketError

__all__ = ["Database", "DatabaseError", "migrate"]


class DatabaseError(OpmarketError):
    """The database cannot hold the catalog (an SQLite without FTS5, for one)."""


def _require_fts5() -> None:
    """The catalog's search needs SQLite's FTS5. A process that loaded another SQLite first
    (TensorFlow bundles one without FTS5, and Python's sqlite3 then binds to it) gets a
    clear error instead of a failed migration."""
    import sqlite3

    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE probe USING fts5(x)")
    except sqlite3.OperationalError as exc:
        raise DatabaseError(
            f"this process's SQLite {sqlite3.sqlite_version} has no FTS5 ({exc}), which the "
            "catalog's search needs: a library loaded before Python's sqlite3 (TensorFlow "
            "bundles an SQLite without FTS5) provides it. Run the marketplace in its own "
            "process, or import sqlite3 before that library."
        ) from None
    finally:
        probe.close()


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets the index read while a worker writes; the timeout waits out short locks
    # instead of failing, which several processes on one SQLite file need.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    # Reads through a memory map (shared by every connection, up to 1 GiB of the file) and
    # a 16 MiB page cache per connection: at 100,000 projects the catalog's searches touch
    # tens of thousands of index entries.
    cursor.execute("PRAGMA mmap_size=1073741824")
    cursor.execute("PRAGMA cache_size=-16384")
    cursor.close()


def _sqlite_autocommit_driver(dbapi_connection: Any, _record: Any) -> None:
    # pysqlite's own BEGIN comes late and is always DEFERRED; SQLAlchemy emits it instead
    # (_sqlite_begin), which lets a transaction that writes take the write lock first.
    dbapi_connection.isolation_level = None


def _sqlite_begin(conn: Any) -> None:
    # A DEFERRED transaction that reads, then writes, fails at once with "database is
    # locked" (SQLITE_BUSY_SNAPSHOT, whatever the busy timeout) when another connection
    # committed in between: under load, verdicts and uploads failed so. Write transactions
    # (Database.transaction) begin IMMEDIATE: they wait for the lock, then see the newest data.
    mode = conn.get_execution_options().get(_BEGIN, "DEFERRED")
    conn.exec_driver_sql(f"BEGIN {mode}")


_BEGIN = "opmarket_sqlite_begin"


def _postgres_settings(dbapi_connection: Any, _record: Any) -> None:
    # The catalog's queries read a few thousand rows at most. PostgreSQL's parallel plans
    # (two more processes per query, started for each) and JIT compilation (tens of ms,
    # for plans it costs high) made them slower, not faster: a word and GPU took 29 ms in
    # parallel, 8 in one process, at 100,000 projects; and the web server's requests run
    # side by side already.
    cursor = dbapi_connection.cursor()
    cursor.execute("SET max_parallel_workers_per_gather = 0")
    cursor.execute("SET jit = off")
    cursor.close()
    dbapi_connection.commit()


def migrate(engine: Engine) -> None:
    """Bring the schema to the newest revision (a no-op when it is there already)."""
    from alembic import command
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", "opmarket.web.catalog:migrations")
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


class Database:
    """An engine and its session factory, for one URL."""

    def __init__(
        self, url: str, *, migrate_now: bool = True, pool_size: int = 20, max_overflow: int = 30
    ) -> None:
        # Enough connections for every thread of the server's thread pool (40 by default):
        # no request holds one while its body arrives or it waits (uploads included).
        kwargs: dict[str, Any] = {
            "pool_size": pool_size,
            "max_overflow": max_overflow,
            "pool_timeout": 10,
        }
        if url.startswith("sqlite"):
            _require_fts5()
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 10}
        self.engine = create_engine(url, **kwargs)
        self._sqlite = url.startswith("sqlite")
        if self._sqlite:
            event.listen(self.engine, "connect", _sqlite_autocommit_driver)
            event.listen(self.engine, "connect", _sqlite_pragmas)
            event.listen(self.engine, "begin", _sqlite_begin)
        elif self.engine.dialect.name == "postgresql":
            event.listen(self.engine, "connect", _postgres_settings)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if migrate_now:
            migrate(self.engine)

    def session(self) -> Session:
        """A new session; the caller commits or rolls back and closes it."""
        return self._sessions()

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session committed at the end of the block, rolled back on any error; on SQLite
        it holds the write lock from its start (its reads see what it will write over)."""
        with self._sessions() as session, session.begin():
            if self._sqlite:
                session.connection(execution_options={_BEGIN: "IMMEDIATE"})
            yield session

    def dispose(self) -> None:
        self.engine.dispose()
