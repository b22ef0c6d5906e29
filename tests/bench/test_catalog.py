"""bench/catalog.py runs on a tiny catalog, on SQLite and PostgreSQL, and ends with its
one-line summary (the figures are not gated)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench" / "catalog.py"


def _has_postgres() -> bool:
    if shutil.which("pg_ctl") and shutil.which("initdb"):
        return True
    return any(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed (Debian: wrk)")
@pytest.mark.skipif(not _has_postgres(), reason="PostgreSQL is not installed (Debian: postgresql)")
def test_prints_the_summary_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--projects", "150", "--requests", "20", "--duration", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "VIRTUAL TABLE INDEX" in done.stdout  # the plans: SQLite's search uses FTS5
    last = done.stdout.strip().splitlines()[-1]
    figures = r"search p99 \d+\.\d ms, package page p99 \d+\.\d ms, simple page \d+ req/s"
    loaded = r"loaded search p99 \d+\.\d ms \(sqlite\), \d+\.\d ms \(postgresql\)"
    assert re.fullmatch(
        rf"catalog: {figures} at 150 projects \(sqlite\); {figures} \(postgresql\); {loaded}",
        last,
    ), last
