"""A request that finds the catalog's database busy past its wait (SQLite's lock held by
another process longer than the busy timeout) is answered 503 with Retry-After, the JSON error
shape, and the server stays up: a client asks again, as pip and twine do, instead of a 500."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Market, start_market


@pytest.fixture
def sqlite_market(tmp_path: Path) -> Iterator[Market]:
    yield from start_market(tmp_path / "market", validation_workers=0)


@pytest.mark.slow
def test_a_locked_database_is_answered_503_with_retry_after(sqlite_market: Market) -> None:
    market = sqlite_market
    database = market.data / "opmarket.sqlite3"
    assert database.is_file()
    holder = sqlite3.connect(database, timeout=1, isolation_level=None)
    try:
        # In WAL mode readers pass a writer; a connection in exclusive locking mode that
        # has written keeps every other connection out, readers too, until it lets go.
        holder.execute("PRAGMA locking_mode=EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        holder.execute("CREATE TABLE held (x)")
        status, headers, body = market.get("/api/packages/nothing-here")
        holder.execute("ROLLBACK")
        holder.execute("PRAGMA locking_mode=NORMAL")
        holder.execute("SELECT 1 FROM sqlite_master LIMIT 1")  # releases the lock
    finally:
        holder.close()
    assert status == 503, body
    assert headers.get("Retry-After") == "1"
    assert json.loads(body)["error"]["code"] == "database-busy"
    status, _, _ = market.get("/api/packages/nothing-here")  # the lock gone: answered
    assert status == 404
