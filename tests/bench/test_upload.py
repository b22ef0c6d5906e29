"""bench/upload.py runs its topology (a serving-only server, 2 worker processes) and ends
with its one-line summary (the figures are not gated)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "upload.py"


@pytest.mark.slow
def test_prints_the_summary_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--clients", "2", "--uploads", "2", "--timeout", "120"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"upload: \d+\.\d\d uploads/s, upload->listed p50 \d+\.\d\d s, p99 \d+\.\d\d s, "
        r"2 clients, 2 workers",
        last,
    ), last
    assert done.stdout.strip().splitlines()[-2].startswith("4 uploads in ")
