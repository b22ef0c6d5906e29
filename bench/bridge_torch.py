"""The PyTorch bridge's cost: ZeroOut's C-ABI kernel (plugins/zero_out_c) called as
``torch.ops.opm.zero_out.c_abi(x)`` (the labelled kernel's overload) against the same
kernel registered directly with ``torch.library.custom_op``, as a user would write ZeroOut
by hand with what the bridge gives: the same keyword argument (``preserve_index``), a fake
implementation and autograd; its body calls the kernel's compute on ``x.numpy()`` and hands
the result back with ``torch.from_numpy``, the least a Python custom op can do. A bare
custom op (one tensor argument, no fake, no autograd) is timed too, for scale.

All run in this process on the same 8-element float32 tensor, in several interleaved
rounds; the best round of each counts. Rounds are timed in this process's CPU time
(``time.process_time``), which other processes on a shared machine do not inflate.
Target ratio: 1.2 or less.

    python bench/bridge_torch.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import time
import timeit
from typing import Any

import torch

import opmarket.torch  # registers every installed op with torch
from opmarket.registry import get_registry
from opmarket.sdk import DType


def _kernel() -> tuple[Any, Any]:
    """ZeroOut's C-ABI kernel for float32 and preserve_index 0: (prepare, compute)."""
    (spec,) = [
        k
        for k in get_registry().kernels("Opm>ZeroOut")
        if k.label == "c_abi" and DType.FLOAT in (k.constraint("T") or ())
    ]
    instance = spec.impl({"T": DType.FLOAT, "preserve_index": 0}, spec.options)
    return instance.prepare, instance.compute


def direct_ops() -> tuple[Any, Any]:
    """ZeroOut's C-ABI kernel as torch.library.custom_ops of their own: (as a user writes
    ZeroOut, a bare one)."""
    prepare, compute = _kernel()
    prepared: list[Any] = [None]

    def run(x: torch.Tensor) -> torch.Tensor:
        a = x.numpy()
        if prepared[0] != a.shape:
            prepare(a)
            prepared[0] = a.shape
        return torch.from_numpy(compute(a))

    @torch.library.custom_op("opm_bench::zero_out", mutates_args=())
    def zero_out(to_zero: torch.Tensor, *, preserve_index: int = 0) -> torch.Tensor:
        assert preserve_index == 0, "the kernel was made for preserve_index 0"
        return run(to_zero.detach() if to_zero.requires_grad else to_zero)

    @zero_out.register_fake
    def _(to_zero: torch.Tensor, *, preserve_index: int = 0) -> torch.Tensor:
        return torch.empty_like(to_zero)

    def setup_context(ctx: Any, inputs: Any, keyword_only_inputs: Any, output: Any) -> None:
        ctx.index = keyword_only_inputs["preserve_index"]

    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(grad)
        out[ctx.index] = grad[ctx.index]
        return out

    zero_out.register_autograd(backward, setup_context=setup_context)

    @torch.library.custom_op("opm_bench::zero_out_bare", mutates_args=())
    def zero_out_bare(x: torch.Tensor) -> torch.Tensor:
        return run(x)

    return torch.ops.opm_bench.zero_out, torch.ops.opm_bench.zero_out_bare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    args = parser.parse_args()

    x = torch.tensor([5, 4, 3, 2, 1, 0, 7, 8], dtype=torch.float32)
    bridged = opmarket.torch.ops.zero_out.c_abi
    direct, bare = direct_ops()
    want = torch.zeros(8)
    want[0] = 5
    for fn in (lambda: bridged(x), lambda: direct(x), lambda: bare(x)):
        torch.testing.assert_close(fn(), want)

    def via_bridge() -> None:
        bridged(x)

    def via_direct() -> None:
        direct(x)

    def via_bare() -> None:
        bare(x)

    best = {"bridge": float("inf"), "direct": float("inf"), "bare": float("inf")}
    for _ in range(args.rounds):
        for name, fn in (("direct", via_direct), ("bridge", via_bridge), ("bare", via_bare)):
            timer = timeit.Timer(fn, timer=time.process_time)
            best[name] = min(best[name], timer.timeit(number=args.calls))
    per = {name: t / args.calls * 1e6 for name, t in best.items()}
    print(f"torch.ops.opm.zero_out (C-ABI kernel, via the bridge): {per['bridge']:.2f} us")
    print(f"torch.library.custom_op with the same features:        {per['direct']:.2f} us")
    print(f"bare torch.library.custom_op (no fake, no autograd):   {per['bare']:.2f} us")
    print(
        f"bridge_torch: {per['bridge']:.2f} us per call (torch.library.custom_op written "
        f"directly: {per['direct']:.2f} us, ratio {per['bridge'] / per['direct']:.2f})"
    )


if __name__ == "__main__":
    main()
