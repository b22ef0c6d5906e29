"""bench/compat.py runs and ends with the line the issue specifies (timings are not gated)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compat.py"


def test_bench_prints_its_last_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--ops", "90", "--repeat", "1"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"compat: [\d.]+ ms for 90 op pairs \([\d,]+ pairs/s\)", last), last
    # Every op changed; the changes cycle through compatible and breaking kinds.
    first = done.stdout.splitlines()[0]
    m = re.match(r"op-sets: 90 ops each, every op changed; (\d+) findings, (\d+) ops br", first)
    assert m and 0 < int(m.group(2)) < 90 <= int(m.group(1))
