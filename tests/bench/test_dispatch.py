"""bench/dispatch.py runs and ends with its one-line summary (the figure is not gated)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "dispatch.py"


def test_prints_the_summary_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--calls", "2000", "--rounds", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(
        r"dispatch overhead: -?\d+\.\d\d us per call over a direct kernel "
        r"call \(ratio \d+\.\d\d\)",
        last,
    ), last
