"""bench/median_pool.py runs and ends with its one-line summary (the figure is not gated)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "median_pool.py"


def test_prints_the_summary_line(tmp_path: Path) -> None:
    pytest.importorskip("opmarket_median_pool", reason="the median_pool plugin is not installed")
    pytest.importorskip("scipy", reason="scipy (the dev extra) is not installed")
    done = subprocess.run(
        [sys.executable, str(BENCH), "--size", "128", "--rounds", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"median_pool: \d+\.\dx over the numpy composition, \d+\.\dx over "
        r"scipy\.ndimage\.median_filter",
        last,
    ), last
