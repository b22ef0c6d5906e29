"""Validation by separate ``opmarket worker`` processes, for servers that only serve."""

from __future__ import annotations

import hashlib
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


def _run_worker_until(market: Market, project: str, filename: str) -> dict[str, object]:
    worker = subprocess.Popen([OPMARKET, "worker", "--data", str(market.data)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=clean_env())  # fmt: skip
    try:
        return market.wait_for(project, filename)
    finally:
        worker.terminate()
        worker.communicate(timeout=30)


@pytest.mark.slow
def test_a_validation_that_cannot_run_is_rejected_and_the_same_upload_retries_it(
        serving_only: Market, wheels: Wheels) -> None:
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
def test_someone_elses_identical_file_is_403_not_200(serving_only: Market,
                                                     wheels: Wheels) -> None:
    market = serving_only
    assert twine(market, market.tokens["alice"], wheels.double_1_0).returncode == 0
    done = twine(market, market.tokens["bob"], wheels.double_1_0)
    assert done.returncode != 0 and "403" in done.stdout + done.stderr
