"""Each first-party op through each framework's bridge against that framework's own custom
op with the same computation, written directly (bench/own_ops: a TensorFlow C++ op, XLA FFI
handlers, a C++ ``TORCH_LIBRARY`` op, LiteRT C custom-op kernels; built once into a cache
folder, $OPMARKET_BENCH_CACHE or ~/.cache/opmarket-bench).

Rows: TensorFlow eager and tf.function, JAX jit, PyTorch eager and torch.compile (in
``torch.inference_mode()``), LiteRT invoke, each for zero_out (the C-ABI kernel, 8 int32),
time_two (8 float32) and median_pool (3x3 VALID on a 1x256x256x1 float32 image); a PyTorch
training row (autograd on) is printed too, outside the ratio. Each framework runs in a
process of its own (TensorFlow and PyTorch do not always share one), with one intra-op
thread, so both sides do the same work. In each row the two calls are checked equal, then
timed in interleaved rounds of this process's CPU time; the best round counts. "path" is
opmarket's own report (a bridge's ``native_path``, else its kernel plan) of whether the call
runs natively (no Python per call). A framework that is missing or fails prints its rows
as "not run" with the reason; they count as not native. One line per row:

    FRAMEWORK MODE OP: X us (own custom op: Y us, ratio R, path native|python)

and last: ``bridges: worst ratio R (FRAMEWORK MODE OP), N of 18 rows native``.

    python bench/bridges.py [--quick] [--rounds R] [--min-round-ms MS]
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # own_ops, run from anywhere

from own_ops._common import (
    FRAMEWORKS,
    MODES,
    OPS,
    Timing,
    describe,
    modes_of,
    skip_line,
)

ROW = re.compile(
    r"(?P<row>\S+ \S+ \S+): (?P<ours>[\d.]+) us \(own custom op: (?P<theirs>[\d.]+) us, "
    r"ratio (?P<ratio>[\d.]+), path (?P<path>native|python)\)"
)
TIMEOUT_S = 1800  # a framework's process, builds included
MODULES = {
    "tensorflow": "tf_rows",
    "jax": "jax_rows",
    "torch": "torch_rows",
    "litert": "litert_rows",
}


def run_framework(name: str, timing: Timing) -> None:
    """This framework's lines, in this process."""
    title = next(t for t, n in FRAMEWORKS.items() if n == name)
    try:
        module = importlib.import_module(f"own_ops.{MODULES[name]}")
        for line in module.rows(timing):
            print(line, flush=True)
    except Exception as exc:  # the framework is missing or its baseline did not build
        for mode in modes_of(title):
            for op in OPS:
                print(skip_line(f"{title} {mode} {op}", describe(exc)), flush=True)


def gather(name: str, argv: list[str]) -> tuple[list[str], str]:
    """A framework's lines from a process of its own, and why it failed if it did."""
    env = {**os.environ, "OPMARKET_INTRA_OP_THREADS": "1"}
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--framework", name, *argv],
            capture_output=True,
            text=True,
            check=False,
            env=env,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return [], f"its process took over {TIMEOUT_S} s"
    for line in done.stderr.splitlines():
        if done.returncode or line.startswith("bridges: "):  # what it built, once
            print(line, file=sys.stderr)
    tail = [line for line in done.stderr.splitlines() if line.strip()]
    reason = "" if done.returncode == 0 else (tail[-1] if tail else f"exit {done.returncode}")
    return done.stdout.splitlines(), reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short round (a form check)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--min-round-ms", type=float, default=50.0, help="CPU time per round")
    parser.add_argument("--framework", choices=sorted(MODULES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    timing = Timing(args.rounds, args.min_round_ms / 1e3)
    if args.quick:
        timing = Timing(1, 0.001)
    if args.framework:
        os.environ.setdefault("OPMARKET_INTRA_OP_THREADS", "1")
        run_framework(args.framework, timing)
        return

    argv = ["--rounds", str(timing.rounds), "--min-round-ms", str(timing.min_round_s * 1e3)]
    found: dict[str, str] = {}
    for title, name in FRAMEWORKS.items():
        lines, reason = gather(name, argv)
        for line in lines:
            head = line.split(":", 1)[0]
            found.setdefault(head, line)
        for mode in modes_of(title):
            for op in OPS:
                head = f"{title} {mode} {op}"
                found.setdefault(head, skip_line(head, reason or "its process printed no line"))
    worst: tuple[float, str] | None = None
    native = 0
    counted = {f"{t} {m} {op}" for t, m in MODES for op in OPS}
    for title, mode in [(t, m) for t in FRAMEWORKS for m in modes_of(t)]:
        for op in OPS:
            head = f"{title} {mode} {op}"
            line = found[head]
            print(line)
            m = ROW.fullmatch(line)
            if m is None or head not in counted:
                continue
            native += m["path"] == "native"
            ratio = float(m["ratio"])
            if worst is None or ratio > worst[0]:
                worst = (ratio, head)
    total = len(counted)
    if worst is None:
        print(f"bridges: worst ratio n/a (no row ran), {native} of {total} rows native")
    else:
        print(f"bridges: worst ratio {worst[0]:.2f} ({worst[1]}), {native} of {total} rows native")


if __name__ == "__main__":
    main()
