"""bench/compat.py runs and ends with the line the issue specifies (timings are not gated)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

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


@pytest.mark.slow
def test_torch_schemas_bench_agrees_with_pytorch_on_whole_registries(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    bench = BENCH.with_name("torch_schemas.py")
    done = subprocess.run(
        [sys.executable, str(bench), "--repeat", "1", "--changed", "0.05"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert re.fullmatch(
        r"torch_schemas: [\d.]+ s end to end for \d+ \+ \d+ schemas "
        r"\(PyTorch's own parse and check: [\d.]+ s, ratio [\d.]+\)",
        lines[-1],
    ), lines[-1]
    ours = re.search(r"'ops broken': (\d+)", lines[0])
    theirs = re.match(r"PyTorch's check: (\d+) old schemas", lines[1])
    assert ours and theirs and int(ours.group(1)) == int(theirs.group(1)) > 0
