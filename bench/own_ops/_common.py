"""What every framework's rows share: the three calls, the row lines, the interleaved timing,
the compile cache and the path each call takes as opmarket reports it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import subprocess
import sys
import time
import timeit
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: median3x3.inc, the 3x3 fast path both sides of the median_pool rows run.
MEDIAN_POOL_SRC = ROOT / "plugins" / "median_pool" / "src" / "opmarket_median_pool"

#: The rows, in order, and the frameworks' subprocess names.
FRAMEWORKS = {"TensorFlow": "tensorflow", "JAX": "jax", "PyTorch": "torch", "LiteRT": "litert"}
MODES = [
    ("TensorFlow", "eager"),
    ("TensorFlow", "tf.function"),
    ("JAX", "jit"),
    ("PyTorch", "eager"),
    ("PyTorch", "torch.compile"),
    ("LiteRT", "invoke"),
]
#: Reported beside the rows, outside the worst ratio and the native count.
EXTRA_MODES = [("PyTorch", "training")]
OPS = ["zero_out", "time_two", "median_pool"]


def modes_of(framework: str) -> list[str]:
    """A framework's modes in the order its lines are printed: its rows', then the extras."""
    return [m for t, m in [*MODES, *EXTRA_MODES] if t == framework]


@dataclass(frozen=True)
class Case:
    """One op's call: opmarket's op name, the kernel label asked for, input and attrs."""

    op: str
    name: str
    label: str
    x: np.ndarray[Any, Any]
    attrs: dict[str, Any] = field(default_factory=dict)


def cases() -> dict[str, Case]:
    """zero_out (the C-ABI kernel, 8 int32), time_two (8 float32), median_pool (3x3 VALID
    on a 1x256x256x1 float32 image)."""
    image = np.random.default_rng(0).random((1, 256, 256, 1), dtype=np.float32)
    pool = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}
    return {
        "zero_out": Case(
            "zero_out",
            "Opm>ZeroOut",
            "c_abi",
            np.arange(1, 9, dtype=np.int32),
            {"preserve_index": 3},
        ),
        "time_two": Case("time_two", "Opm>TimeTwo", "", np.arange(8, dtype=np.float32) - 2.5),
        "median_pool": Case("median_pool", "Opm>MedianPool", "", image, pool),
    }


def row_line(head: str, ours: float, theirs: float, path: str) -> str:
    """``FRAMEWORK MODE OP: X us (own custom op: Y us, ratio R, path native|python)``."""
    return (
        f"{head}: {ours:.2f} us (own custom op: {theirs:.2f} us, "
        f"ratio {ours / theirs:.2f}, path {path})"
    )


def skip_line(head: str, reason: str) -> str:
    """``FRAMEWORK MODE OP: not run (REASON)``: a row that did not run, and why."""
    reason = " ".join(reason.split()) or "no reason given"
    return f"{head}: not run ({reason[:300]})"


def describe(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    first = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {first[0] if first else ''}"


@dataclass
class Timing:
    """How long to time: interleaved rounds, each of at least ``min_round_s`` CPU seconds."""

    rounds: int = 7
    min_round_s: float = 0.05


def _run(fn: Callable[[], Any], calls: int) -> float:
    # This process's CPU time: other processes on a shared machine do not inflate it.
    return timeit.Timer(fn, timer=time.process_time).timeit(number=calls)


def time_pair(
    ours: Callable[[], Any], theirs: Callable[[], Any], timing: Timing
) -> tuple[float, float]:
    """Per-call microseconds of each, the best of interleaved rounds (the first one of a
    round alternates, so a busy moment hits both)."""
    calls = 1
    while (spent := _run(ours, calls)) < timing.min_round_s and calls < 1 << 20:
        calls = max(calls * 2, int(calls * timing.min_round_s / max(spent, 1e-9) * 1.1))
    best = [float("inf"), float("inf")]
    pair = [(0, ours), (1, theirs)]
    for i in range(timing.rounds):
        for k, fn in pair if i % 2 == 0 else pair[::-1]:
            best[k] = min(best[k], _run(fn, calls) / calls)
    return best[0] * 1e6, best[1] * 1e6


@dataclass
class Row:
    """One row's two calls (each returning a numpy array), the path opmarket takes, and the
    context both run in (PyTorch's inference mode)."""

    ours: Callable[[], Any]
    theirs: Callable[[], Any]
    path: str
    context: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext
    result: Callable[[Any], np.ndarray[Any, Any]] = np.asarray


def measure(
    framework: str, modes: list[str], make: Callable[[str, Case], Row], timing: Timing
) -> Iterator[str]:
    """Each mode's row for each op: check both calls agree, time them, or say why not."""
    all_cases = cases()
    for mode in modes:
        for op in OPS:
            try:
                row = make(mode, all_cases[op])
                with row.context():
                    np.testing.assert_array_equal(
                        row.result(row.ours()), row.result(row.theirs()), err_msg="results differ"
                    )
                    ours, theirs = time_pair(row.ours, row.theirs, timing)
            except Exception as exc:  # one row's failure is that row's line, not the run's
                yield skip_line(f"{framework} {mode} {op}", describe(exc))
                continue
            yield row_line(f"{framework} {mode} {op}", ours, theirs, row.path)


def reported_path(module: Any, case: Case, fallback: Callable[[], bool]) -> str:
    """``native`` or ``python``: the bridge's own ``native_path`` report where it has one
    (``"callback"`` and ``"python"`` mean Python), else ``fallback()`` (read from the
    bridge's kernel plan where it keeps one)."""
    report = getattr(module, "native_path", None)
    if report is None:
        return "native" if fallback() else "python"
    answer = report(case.name, _kernel=case.label, T=case.x.dtype, **case.attrs)
    return "python" if answer in ("callback", "python", "", None) else "native"


def cache_dir() -> Path:
    """Where compiled baselines are kept: $OPMARKET_BENCH_CACHE, else opmarket-bench under
    $XDG_CACHE_HOME (~/.cache)."""
    explicit = os.environ.get("OPMARKET_BENCH_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "opmarket-bench"


def digest(*parts: str | bytes) -> str:
    """A short key of the sources (with kernels.h and median3x3.inc) and the build's flags."""
    h = hashlib.sha256()
    for part in (
        (HERE / "kernels.h").read_bytes(),
        (MEDIAN_POOL_SRC / "median3x3.inc").read_bytes(),
        *parts,
    ):
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def includes() -> list[str]:
    """The include folders of every baseline (kernels.h, median3x3.inc)."""
    return [f"-I{HERE}", f"-I{MEDIAN_POOL_SRC}"]


def build_library(name: str, source: str, flags: list[str], version: str) -> Path:
    """``source`` (in this folder) built once into the cache as a shared library: -O2, no
    -march (it runs on any x86-64 CPU; median3x3.inc picks AVX2 at run time)."""
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    cmd = [*cxx, "-std=c++17", "-O2", "-fPIC", "-shared", *includes(), str(HERE / source)]
    out = cache_dir() / f"{name}-{digest((HERE / source).read_bytes(), *cmd, *flags, version)}.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"bridges: building {source} into {out} (once)", file=sys.stderr)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.tmp")
    done = subprocess.run(
        [*cmd, "-o", str(tmp), *flags], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tmp.unlink(missing_ok=True)
        errors = [line for line in done.stderr.splitlines() if "error" in line]
        raise RuntimeError(f"could not build {source}: {(errors or ['?'])[0].strip()}")
    os.replace(tmp, out)
    return out
