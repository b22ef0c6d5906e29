"""Dispatch overhead: ``opmarket.ops.zero_out(x)`` against calling its kernel directly, and a
C-ABI kernel of the same op against the numpy kernel.

All run in this process on a small int32 vector; each is timed in several interleaved
rounds and the best round counts, so background noise inflates no side. Plugin discovery is
switched off so that the ops defined here are the only ones. The C-ABI kernel
(``zero_out_capi.c``, the same op as ``Bench>ZeroOut`` under the name ``Bench>ZeroOutC``) is
compiled with the C compiler into a temporary folder and loaded with ``load_library``; its
line says how much more ``ops.zero_out_c(x)`` takes than ``ops.zero_out(x)`` (target: under
1 us).

    python bench/dispatch.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sysconfig
import tempfile
import timeit
from pathlib import Path
from typing import Any

os.environ["OPMARKET_DISABLE_PLUGINS"] = "1"

import numpy as np  # after the environment is set

import opmarket
import opmarket.registry
from opmarket.sdk import DType, InvalidArgumentError, get_include, kernel, op, shape_fn

ZERO_OUT = (
    op("Bench>ZeroOut")
    .input("to_zero: T")
    .output("zeroed: T")
    .attr("T: {float, double, int32} = DT_INT32")
    .attr("preserve_index: int >= 0 = 0")
    .build()
)


@kernel("Bench>ZeroOut", constraints={"T": [np.float32, np.float64, np.int32]})
def zero_out_kernel(x: np.ndarray[Any, Any], *, preserve_index: int) -> np.ndarray[Any, Any]:
    if preserve_index >= x.shape[0]:
        raise InvalidArgumentError("preserve_index out of range")
    out = np.zeros_like(x)
    out[preserve_index] = x[preserve_index]
    return out


@shape_fn("Bench>ZeroOut")
def zero_out_shape(c: Any) -> None:
    c.set_output(0, c.with_rank(c.input(0), 1))


def build_capi_kernel(folder: Path) -> Path:
    """Compile zero_out_capi.c into a C-ABI plugin library in ``folder``."""
    target = folder / "libbench_zero_out_c.so"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    subprocess.run(
        [
            *cc,
            "-std=c99",
            "-O2",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            f"-I{get_include()}",
            str(Path(__file__).with_name("zero_out_capi.c")),
            "-o",
            str(target),
        ],
        check=True,
    )
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    args = parser.parse_args()

    opmarket.register(ZERO_OUT, zero_out_kernel, zero_out_shape)
    x = np.array([5, 4, 3, 2, 1, 0, 7, 8], dtype=np.int32)
    ops = opmarket.ops
    expected = zero_out_kernel(x, preserve_index=0)
    assert np.array_equal(ops.zero_out(x), expected)

    with tempfile.TemporaryDirectory() as tmp:
        opmarket.load_library(build_capi_kernel(Path(tmp)))
    assert np.array_equal(ops.zero_out_c(x), expected)

    def via_ops() -> None:
        ops.zero_out(x)

    def direct() -> None:
        zero_out_kernel(x, preserve_index=0)

    def via_ops_c() -> None:
        ops.zero_out_c(x)

    # The C-ABI kernel instance dispatch prepared, called without dispatch.
    (spec,) = opmarket.registry.get_registry().kernels("Bench>ZeroOutC")
    instance = spec.impl({"T": DType.INT32, "preserve_index": 0})
    compute_c = instance.compute

    def direct_c() -> None:
        compute_c(x)

    best_ops = best_direct = best_c = best_direct_c = float("inf")
    for _ in range(args.rounds):
        best_direct = min(best_direct, timeit.timeit(direct, number=args.calls))
        best_ops = min(best_ops, timeit.timeit(via_ops, number=args.calls))
        best_c = min(best_c, timeit.timeit(via_ops_c, number=args.calls))
        best_direct_c = min(best_direct_c, timeit.timeit(direct_c, number=args.calls))
    instance.close()
    per_ops = best_ops / args.calls * 1e6
    per_direct = best_direct / args.calls * 1e6
    per_c = best_c / args.calls * 1e6
    per_direct_c = best_direct_c / args.calls * 1e6
    print(f"direct kernel call:     {per_direct:.3f} us")
    print(f"opmarket.ops.zero_out:  {per_ops:.3f} us  (numpy kernel)")
    print(f"direct C-ABI compute:   {per_direct_c:.3f} us")
    print(f"opmarket.ops.zero_out_c: {per_c:.3f} us  (C-ABI kernel)")
    print(
        f"C-ABI dispatch: {per_c - per_ops:+.2f} us per call over dispatching the numpy "
        f"kernel of the same op (target: under 1 us); {per_c - per_direct_c:.2f} us over "
        "calling its compute directly"
    )
    overhead = per_ops - per_direct
    print(
        f"dispatch overhead: {overhead:.2f} us per call over a direct kernel call "
        f"(ratio {per_ops / per_direct:.2f})"
    )


if __name__ == "__main__":
    main()
