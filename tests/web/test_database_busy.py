"""A request that finds the catalog's database busy past its wait (SQLite's write lock held by
another process longer than the busy timeout) is answered 503 with Retry-After, the JSON error
shape, and the server stays up: a client asks again, as pip and twine do, instead of a 500.

An upload's token check writes (the token's last use) in a transaction of its own before the
body is read: under a heavy load of uploads and validations on SQLite that write can wait
past the busy timeout, which answered 500 before."""

from __future__ import annotations

import base64
import json
import sqlite3
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import Market, start_market


@pytest.fixture
def sqlite_market(tmp_path: Path) -> Iterator[Market]:
    yield from start_market(tmp_path / "market", validation_workers=0)


def _upload_head_only(market: Market, token: str) -> tuple[int, dict[str, str], bytes]:
    """A POST to /legacy/ with the token and a small form: answered at the token check."""
    auth = base64.b64encode(f"__token__:{token}".encode()).decode()
    request = urllib.request.Request(
        market.url + "/legacy/",
        data=b"--x--\r\n",
        headers={
            "Authorization": f"Basic {auth}",
            "Content-Type": "multipart/form-data; boundary=x",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


@pytest.mark.slow
def test_a_locked_database_is_answered_503_with_retry_after(sqlite_market: Market) -> None:
    market = sqlite_market
    database = market.data / "opmarket.sqlite3"
    assert database.is_file()
    holder = sqlite3.connect(database, timeout=10, isolation_level=None)
    try:
        holder.execute("BEGIN IMMEDIATE")  # the write lock: no other writer until it ends
        status, headers, body = _upload_head_only(market, market.tokens["alice"])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert status == 503, body
    assert headers.get("retry-after") == "1"
    assert json.loads(body)["error"]["code"] == "database-busy"
    # The lock gone, the same request passes the token check (and the form is refused).
    status, _, body = _upload_head_only(market, market.tokens["alice"])
    assert status == 400, body
