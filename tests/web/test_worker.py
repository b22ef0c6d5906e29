"""Validation by separate ``opmarket worker`` processes, for servers that only serve."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import OPMARKET, Market, Wheels, clean_env, start_market, twine


@pytest.fixture
def serving_only(tmp_path: Path) -> Iterator[Market]:
    yield from start_market(tmp_path / "market", validation_workers=0)


@pytest.mark.slow
def test_a_worker_process_validates_what_a_serving_only_server_accepted(
        serving_only: Market, wheels: Wheels) -> None:
    market = serving_only
    assert twine(market, market.tokens["alice"], wheels.double_1_0).returncode == 0
    time.sleep(1.5)  # nothing in this server validates: it stays pending
    (entry,) = market.json("/api/packages/opm-double")["files"]
    assert entry["status"] == "pending"
    assert market.get("/simple/opm-double/")[0] == 404
    worker = subprocess.Popen([OPMARKET, "worker", "--data", str(market.data)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=clean_env())
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
