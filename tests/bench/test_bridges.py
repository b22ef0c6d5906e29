"""bench/bridges.py: in its quick mode, one line of the documented form per row and the
summary line last, with the native count and the worst ratio that the rows say (the figures
are not gated); a framework that is missing gives its rows as "not run", not a crash."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bridges.py"

ROWS = [
    ("TensorFlow", "eager", "tensorflow"),
    ("TensorFlow", "tf.function", "tensorflow"),
    ("JAX", "jit", "jax"),
    ("PyTorch", "eager", "torch"),
    ("PyTorch", "torch.compile", "torch"),
    ("PyTorch", "training", "torch"),
    ("LiteRT", "invoke", "ai_edge_litert"),
]
OPS = ["zero_out", "time_two", "median_pool"]
MEASURED = re.compile(
    r"(?P<x>\d+\.\d\d) us \(own custom op: (?P<y>\d+\.\d\d) us, "
    r"ratio (?P<ratio>\d+\.\d\d), path (?P<path>native|python)\)"
)
NOT_RUN = re.compile(r"not run \(.+\)")
LAST = re.compile(
    r"bridges: worst ratio (?:(?P<ratio>\d+\.\d\d) \((?P<row>\S+ \S+ \S+)\)|n/a \(no row ran\)), "
    r"(?P<native>\d+) of 18 rows native"
)


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


@pytest.mark.slow  # builds the frameworks' own custom ops (once, into the cache) and compiles
def test_quick_run_prints_every_row_and_the_summary(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    heads = [f"{fw} {mode} {op}" for fw, mode, _ in ROWS for op in OPS]
    assert len(lines) == len(heads) + 1, done.stdout
    assert [line.split(": ", 1)[0] for line in lines[:-1]] == heads
    ratios: dict[str, float] = {}
    native = 0
    for (_, mode, module), line in zip([r for r in ROWS for _ in OPS], lines[:-1], strict=True):
        head, rest = line.split(": ", 1)
        m = MEASURED.fullmatch(rest)
        if _installed(module) and (module != "ai_edge_litert" or _installed("tensorflow")):
            # Installed: the row ran, the bridge and the framework's own op agreeing.
            assert m is not None, line
        else:
            assert m is not None or NOT_RUN.fullmatch(rest), line
        if m is None or mode == "training":
            continue
        assert float(m["ratio"]) == pytest.approx(float(m["x"]) / float(m["y"]), rel=0.01)
        ratios[head] = float(m["ratio"])
        native += m["path"] == "native"
    last = LAST.fullmatch(lines[-1])
    assert last is not None, lines[-1]
    assert int(last["native"]) == native
    if ratios:
        assert float(last["ratio"]) == max(ratios.values())
        assert ratios[last["row"]] == max(ratios.values())
    if _installed("jax"):  # today's native path: a C-ABI kernel as an XLA FFI custom call
        assert lines[heads.index("JAX jit zero_out")].endswith("path native)")


def test_a_missing_framework_gives_its_rows_as_not_run(tmp_path: Path) -> None:
    # A jax that cannot be imported, as in an environment without it.
    (tmp_path / "jax").mkdir()
    (tmp_path / "jax" / "__init__.py").write_text("raise ImportError('No module named jax')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, str(BENCH), "--framework", "jax", "--quick"],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"JAX jit {op}: not run (ImportError: No module named jax)" for op in OPS
    ]
