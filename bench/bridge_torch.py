"""The PyTorch bridge's cost: ZeroOut's C-ABI kernel (plugins/zero_out_c) called as
``torch.ops.opm.zero_out.c_abi(x)`` (the labelled kernel's overload) against the same
computation written as a C++ PyTorch op (``TORCH_LIBRARY``, bench/own_ops/torch_ops.cc, built
once with ``torch.utils.cpp_extension.load_inline`` into bench/bridges.py's cache folder).
For scale, the kernel registered directly with ``torch.library.custom_op`` is timed too, as a
user would write ZeroOut by hand with what the bridge gives: the same keyword argument
(``preserve_index``), a fake implementation and autograd; its body calls the kernel's compute
on ``x.numpy()`` and hands the result back with ``torch.from_numpy``, the least a Python
custom op can do; and a bare custom op (one tensor argument, no fake, no autograd).

All run in this process on the same 8-element float32 tensor, in ``torch.inference_mode()``
(as a model serves; autograd registered from Python costs every other call a few
microseconds), in several interleaved rounds; the best round of each counts. Rounds are
timed in this process's CPU time (``time.process_time``), which other processes on a shared
machine do not inflate. Target ratio: 1.2 or less.

    python bench/bridge_torch.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import sys
import time
import timeit
from pathlib import Path
from typing import Any

import torch

import opmarket.torch  # registers every installed op with torch
from opmarket.registry import get_registry
from opmarket.sdk import DType

sys.path.insert(0, str(Path(__file__).resolve().parent))  # own_ops, run from anywhere

from own_ops.torch_rows import load_native_ops


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
    native = load_native_ops().zero_out
    direct, bare = direct_ops()
    want = torch.zeros(8)
    want[0] = 5
    calls = {
        "native": lambda: native(x),
        "bridge": lambda: bridged(x),
        "direct": lambda: direct(x),
        "bare": lambda: bare(x),
    }
    best = dict.fromkeys(calls, float("inf"))
    with torch.inference_mode():
        for fn in calls.values():
            torch.testing.assert_close(fn(), want)
        for _ in range(args.rounds):
            for name, fn in calls.items():
                timer = timeit.Timer(fn, timer=time.process_time)
                best[name] = min(best[name], timer.timeit(number=args.calls))
    per = {name: t / args.calls * 1e6 for name, t in best.items()}
    print(f"torch.ops.opm.zero_out (C-ABI kernel, via the bridge): {per['bridge']:.2f} us")
    print(f"C++ TORCH_LIBRARY op, the same computation:            {per['native']:.2f} us")
    print(f"torch.library.custom_op with the same features:        {per['direct']:.2f} us")
    print(f"bare torch.library.custom_op (no fake, no autograd):   {per['bare']:.2f} us")
    print(
        f"bridge_torch: {per['bridge']:.2f} us per call (C++ TORCH_LIBRARY op: "
        f"{per['native']:.2f} us, ratio {per['bridge'] / per['native']:.2f})"
    )


if __name__ == "__main__":
    main()
