"""Dispatch overhead: ``opmarket.ops.zero_out(x)`` against calling its kernel directly.

Both run in this process on a small int32 vector; each is timed in several interleaved
rounds and the best round counts, so background noise inflates neither side. Plugin
discovery is switched off so that the op defined here is the only ``zero_out``.

    python bench/dispatch.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import timeit
from typing import Any

os.environ["OPMARKET_DISABLE_PLUGINS"] = "1"

import numpy as np  # after the environment is set
from opmarket.sdk import InvalidArgument, kernel, op, shape_fn

import opmarket

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
        raise InvalidArgument("preserve_index out of range")
    out = np.zeros_like(x)
    out[preserve_index] = x[preserve_index]
    return out


@shape_fn("Bench>ZeroOut")
def zero_out_shape(c: Any) -> None:
    c.set_output(0, c.with_rank(c.input(0), 1))


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

    def via_ops() -> None:
        ops.zero_out(x)

    def direct() -> None:
        zero_out_kernel(x, preserve_index=0)

    best_ops = best_direct = float("inf")
    for _ in range(args.rounds):
        best_direct = min(best_direct, timeit.timeit(direct, number=args.calls))
        best_ops = min(best_ops, timeit.timeit(via_ops, number=args.calls))
    per_ops = best_ops / args.calls * 1e6
    per_direct = best_direct / args.calls * 1e6
    print(f"direct kernel call:     {per_direct:.3f} us")
    print(f"opmarket.ops.zero_out:  {per_ops:.3f} us")
    overhead = per_ops - per_direct
    print(f"dispatch overhead: {overhead:.2f} us per call over a direct kernel call "
          f"(ratio {per_ops / per_direct:.2f})")


if __name__ == "__main__":
    main()
