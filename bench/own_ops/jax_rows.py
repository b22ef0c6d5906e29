"""JAX's rows: ``jax.jit`` of ``opmarket.jax.ops.<op>`` against ``jax.jit`` of a
``jax.ffi.ffi_call`` to the same op written as an XLA FFI handler (``jax_ffi.cc``, built
against ``jax.ffi.include_dir()`` and registered with ``jax.ffi.register_ffi_target``)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

import numpy as np

from own_ops._common import Case, Row, Timing, build_library, measure, reported_path


def rows(timing: Timing) -> Iterator[str]:
    """The JAX jit lines."""
    import jax
    import jax.numpy as jnp

    import opmarket.jax as oj

    flags = [f"-I{jax.ffi.include_dir()}"]
    lib = ctypes.CDLL(str(build_library("jax_ffi", "jax_ffi.cc", flags, jax.__version__)))
    for op in ("zero_out", "time_two", "median_pool"):
        capsule = jax.ffi.pycapsule(getattr(lib, f"bench_{op}"))
        jax.ffi.register_ffi_target(f"opm_native_{op}", capsule, platform="cpu")
    shapes = {"median_pool": lambda s: (s[0], s[1] - 2, s[2] - 2, s[3])}
    ffi_attrs = {"zero_out": {"preserve_index": np.int64(3)}}

    def make(mode: str, case: Case) -> Row:
        x = jnp.asarray(case.x)
        label = {"_kernel": case.label} if case.label else {}
        op = getattr(oj.ops, case.op)
        shape = shapes.get(case.op, tuple)(x.shape)
        target = jax.ffi.ffi_call(f"opm_native_{case.op}", jax.ShapeDtypeStruct(shape, x.dtype))
        ours = jax.jit(lambda v: op(v, **case.attrs, **label))
        theirs = jax.jit(lambda v: target(v, **ffi_attrs.get(case.op, {})))
        return Row(
            lambda: ours(x).block_until_ready(),
            lambda: theirs(x).block_until_ready(),
            reported_path(oj, case, lambda: False),
        )

    yield from measure("JAX", ["jit"], make, timing)
