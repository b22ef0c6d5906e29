"""bench/bridge_jax.py and bench/bridge_torch.py run and end with their one-line summaries
(the figures are not gated here; the benchmarks print them)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.first_party import needs_first_party

pytestmark = needs_first_party

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("script", "pattern"),
    [
        (
            "bridge_jax.py",
            r"bridge_jax: \d+\.\d\d us per call under jit \(jax\.ffi target written "
            r"directly: \d+\.\d\d us, ratio \d+\.\d\d\)",
        ),
        (
            "bridge_torch.py",
            r"bridge_torch: \d+\.\d\d us per call \(C\+\+ TORCH_LIBRARY op: "
            r"\d+\.\d\d us, ratio \d+\.\d\d\)",
        ),
    ],
)
def test_prints_the_summary_line(script: str, pattern: str, tmp_path: Path) -> None:
    pytest.importorskip(script[len("bridge_") : -len(".py")])
    done = subprocess.run(
        [sys.executable, str(BENCH / script), "--calls", "200", "--rounds", "1"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    last = done.stdout.strip().splitlines()[-1]
    assert re.fullmatch(pattern, last), last
