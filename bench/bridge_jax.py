"""The JAX bridge's cost under ``jax.jit``: ZeroOut's C-ABI kernel (plugins/zero_out_c)
called as ``opmarket.jax.ops.zero_out(x, _kernel="c_abi")`` (the bridge's XLA FFI custom
call, ``opmarket_capi``) against the same kernel behind an FFI handler written directly for
it (``zero_out_ffi.c``, compiled here against ``jax.ffi.include_dir()`` and registered with
``jax.ffi.register_ffi_target``).

Both are jitted functions of the same 8-element float32 array, called and waited for
(``block_until_ready``) in several interleaved rounds; the best round of each counts, in
this process's CPU time (``time.process_time``), which other processes on a shared machine
do not inflate. Target ratio: 1.2 or less.

    python bench/bridge_jax.py [--calls N] [--rounds R]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shlex
import subprocess
import sysconfig
import tempfile
import time
import timeit
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import opmarket.jax as oj
from opmarket import registry
from opmarket.sdk import DType


def direct_target(folder: Path) -> Any:
    """Build zero_out_ffi.c, make its kernel state, register it as ``bench_zero_out``."""
    target = folder / "libbench_zero_out_ffi.so"
    cc = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    subprocess.run(
        [
            *cc,
            "-std=c11",
            "-O2",
            "-fPIC",
            "-shared",
            f"-I{registry.capi_bridge_include()}",
            f"-I{jax.ffi.include_dir()}",
            str(Path(__file__).with_name("zero_out_ffi.c")),
            "-o",
            str(target),
        ],
        check=True,
    )
    lib = ctypes.CDLL(str(target))
    (spec,) = [
        k
        for k in registry.get_registry().kernels("Opm>ZeroOut")
        if k.label == "c_abi" and DType.FLOAT in (k.constraint("T") or ())
    ]
    pointer = ctypes.pythonapi.PyCapsule_GetPointer
    pointer.restype = ctypes.c_void_p
    pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = pointer(registry.capi_bridge(), b"opmarket.capi_bridge")
    lib.bench_init.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    if lib.bench_init(table, registry.native_kernel_handle(spec)) != 0:
        raise RuntimeError("the kernel's create failed")
    capsule = jax.ffi.pycapsule(lib.bench_zero_out)  # type: ignore[no-untyped-call]
    jax.ffi.register_ffi_target("bench_zero_out", capsule, platform="cpu")
    return lib


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls per round")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds")
    args = parser.parse_args()

    registry.load_plugins()
    x = jnp.asarray([5, 4, 3, 2, 1, 0, 7, 8], jnp.float32)
    want = np.zeros(8, np.float32)
    want[0] = 5
    with tempfile.TemporaryDirectory() as tmp:
        lib = direct_target(Path(tmp))
    result = jax.ShapeDtypeStruct(x.shape, x.dtype)  # type: ignore[no-untyped-call]
    direct = jax.jit(jax.ffi.ffi_call("bench_zero_out", result))
    bridged = jax.jit(lambda x: oj.ops.zero_out(x, _kernel="c_abi"))
    assert "opmarket_capi" in bridged.lower(x).as_text()
    np.testing.assert_array_equal(np.asarray(bridged(x)), want)
    np.testing.assert_array_equal(np.asarray(direct(x)), want)

    def via_bridge() -> None:
        bridged(x).block_until_ready()

    def via_direct() -> None:
        direct(x).block_until_ready()

    best = {"bridge": float("inf"), "direct": float("inf")}
    for _ in range(args.rounds):
        for name, fn in (("direct", via_direct), ("bridge", via_bridge)):
            timer = timeit.Timer(fn, timer=time.process_time)
            best[name] = min(best[name], timer.timeit(number=args.calls))
    del lib
    per = {name: t / args.calls * 1e6 for name, t in best.items()}
    print(f"jitted opmarket.jax.ops.zero_out (C-ABI kernel, FFI): {per['bridge']:.2f} us")
    print(f"jitted jax.ffi target written directly:              {per['direct']:.2f} us")
    print(
        f"bridge_jax: {per['bridge']:.2f} us per call under jit (jax.ffi target written "
        f"directly: {per['direct']:.2f} us, ratio {per['bridge'] / per['direct']:.2f})"
    )


if __name__ == "__main__":
    main()
