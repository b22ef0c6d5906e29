"""PyTorch's rows: ``opmarket.torch.ops.<op>`` against the same op written as a C++
``TORCH_LIBRARY`` op (``torch_ops.cc``, built with ``torch.utils.cpp_extension.load_inline``:
``torch.ops.opm_native.<op>``), eagerly and under ``torch.compile(fullgraph=True)``, both in
``torch.inference_mode()``; and a training row (autograd on, both ops with autograd
registered from Python, as the bridge's is) outside the ratio."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from own_ops._common import (
    HERE,
    MEDIAN_POOL_SRC,
    Case,
    Row,
    Timing,
    cache_dir,
    digest,
    measure,
    reported_path,
)


def load_native_ops() -> Any:
    """``torch.ops.opm_native``: torch_ops.cc built once (into the cache) and loaded."""
    import torch
    from torch.utils.cpp_extension import load_inline

    source = (HERE / "torch_ops.cc").read_text()
    flags = ["-O2"]
    key = digest(source, torch.__version__, *flags)
    name = f"opm_native_{key}"
    folder = cache_dir() / f"torch_ops-{key}"
    built = folder / f"{name}.so"
    if built.exists():
        torch.ops.load_library(str(built))
    else:
        folder.mkdir(parents=True, exist_ok=True)
        print(f"bridges: building torch_ops.cc into {folder} (once)", file=sys.stderr)
        load_inline(
            name,
            cpp_sources=[source],
            extra_cflags=flags,
            extra_include_paths=[str(HERE), str(MEDIAN_POOL_SRC)],
            build_directory=str(folder),
            is_python_module=False,
        )
    return torch.ops.opm_native


def register_autograd() -> None:
    """Autograd for the C++ ops, registered from Python as the bridge registers its own (the
    training rows time the forward call with autograd recording)."""
    import torch

    def setup(ctx: Any, inputs: Any, keyword_only_inputs: Any, output: Any) -> None:
        ctx.index = keyword_only_inputs.get("preserve_index", 0)

    def setup_no_keywords(ctx: Any, inputs: Any, output: Any) -> None:
        pass

    def zero_out_grad(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        out = torch.zeros_like(grad)
        out[ctx.index] = grad[ctx.index]
        return out

    def median_pool_grad(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("the benchmark times MedianPool's forward call only")

    torch.library.register_autograd("opm_native::zero_out", zero_out_grad, setup_context=setup)
    torch.library.register_autograd(
        "opm_native::time_two", lambda ctx, grad: grad * 2, setup_context=setup_no_keywords
    )
    torch.library.register_autograd(
        "opm_native::median_pool", median_pool_grad, setup_context=setup
    )


def rows(timing: Timing) -> Iterator[str]:
    """The PyTorch eager, torch.compile and training lines."""
    import torch

    import opmarket.torch as ot

    own = load_native_ops()
    register_autograd()

    def make(mode: str, case: Case) -> Row:
        x = torch.from_numpy(case.x.copy())
        if mode == "training" and x.is_floating_point():
            x.requires_grad_()
        op = getattr(ot.ops, case.op)
        if case.label:
            op = getattr(op, case.label)
        theirs_op = getattr(own, case.op)

        def ours(v: torch.Tensor) -> torch.Tensor:
            return op(v, **case.attrs)

        def theirs(v: torch.Tensor) -> torch.Tensor:
            return theirs_op(v, **case.attrs)

        if mode == "torch.compile":
            ours = torch.compile(ours, fullgraph=True, dynamic=False)
            theirs = torch.compile(theirs, fullgraph=True, dynamic=False)
        return Row(
            lambda: ours(x),
            lambda: theirs(x),
            reported_path(ot, case, lambda: False),
            context=torch.enable_grad if mode == "training" else torch.inference_mode,
            result=lambda t: t.detach().numpy(),
        )

    yield from measure("PyTorch", ["eager", "torch.compile"], make, timing)
    yield from measure("PyTorch", ["training"], make, timing)
