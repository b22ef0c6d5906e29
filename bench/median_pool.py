"""Median pooling: the median_pool plugin's fused C++ kernel against the numpy composition
(its reference: sliding windows and numpy.median) and scipy.ndimage.median_filter.

A 1x2048x2048x1 float32 image, a 3x3 window, stride 1, VALID padding, as in the issue. All
three results are checked equal first; then each is timed in interleaved rounds and the best
round counts. The kernel uses the intra-op threads setting (OPMARKET_INTRA_OP_THREADS, by
default every CPU this process may use); ``--threads`` sets it.

    python bench/median_pool.py [--size 2048] [--rounds 5] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

os.environ["OPMARKET_PLUGINS"] = "median_pool"

import numpy as np  # after the environment is set

import opmarket
from opmarket.sdk import intra_op_threads, set_intra_op_threads


def best_of(fn: Callable[[], Any], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2048, help="image height and width")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads")
    args = parser.parse_args()
    if args.threads is not None:
        set_intra_op_threads(args.threads)

    from opmarket_median_pool import median_pool_reference  # the numpy composition
    from scipy import ndimage  # type: ignore[import-untyped]  # no stubs in the dev extra

    x = np.random.default_rng(0).random((1, args.size, args.size, 1), dtype=np.float32)
    attrs: dict[str, Any] = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "VALID"}
    median_pool = opmarket.ops.median_pool

    def kernel() -> Any:
        return median_pool(x, **attrs)

    def composition() -> Any:
        return median_pool_reference(x, **attrs)

    def scipy() -> Any:
        # median_filter keeps the input's size; its interior is the VALID result.
        return ndimage.median_filter(x[0, :, :, 0], size=3)[1:-1, 1:-1]

    got = kernel()
    np.testing.assert_array_equal(got, composition())
    np.testing.assert_array_equal(got[0, :, :, 0], scipy())

    t_kernel = t_comp = t_scipy = float("inf")
    for _ in range(args.rounds):
        t_kernel = min(t_kernel, best_of(kernel, 3))
        t_comp = min(t_comp, best_of(composition, 1))
        t_scipy = min(t_scipy, best_of(scipy, 1))
    t_copy = best_of(x.copy, 5)
    print(
        f"image 1x{args.size}x{args.size}x1 float32, 3x3 window, stride 1, VALID; "
        f"{intra_op_threads()} intra-op threads"
    )
    print(f"opmarket.ops.median_pool (C++):  {t_kernel * 1e3:9.2f} ms")
    print(f"numpy composition (reference):   {t_comp * 1e3:9.2f} ms")
    print(f"scipy.ndimage.median_filter:     {t_scipy * 1e3:9.2f} ms")
    print(f"a copy of the image:             {t_copy * 1e3:9.2f} ms")
    print(
        f"median_pool: {t_comp / t_kernel:.1f}x over the numpy composition, "
        f"{t_scipy / t_kernel:.1f}x over scipy.ndimage.median_filter"
    )


if __name__ == "__main__":
    main()
