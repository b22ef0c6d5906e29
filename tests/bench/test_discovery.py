"""bench/discovery.py runs and ends with its one-line summary (the figure is not gated)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "discovery.py"


def test_prints_the_summary_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--dists", "60", "--plugins", "6", "--rounds", "2"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"discovery: \d+\.\d ms cold, \d+\.\d\d ms warm "
        r"\(importlib\.metadata scan: \d+\.\d ms\)",
        last,
    ), last
