"""JAX functions for opmarket ops: a ``jax.custom_vjp`` per (op, attrs, kernel label) whose
primal is an XLA FFI custom call (C-ABI kernels) or a ``jax.pure_callback`` (every other
kernel), and whose backward pass is the op's opmarket gradient (a ``pure_callback``).

Batching (``jax.vmap``): both paths use ``vmap_method="sequential"``: the op runs once per
batch element, which is right for any op (opmarket ops are not known to be elementwise).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import jax
import jax.numpy as jnp
from jax.experimental import io_callback
from opmarket._bridge import (
    BridgeOp,
    OutputSpec,
    ParamKind,
    bridge_op,
    freeze_attrs,
    normalize_dtype,
)
from opmarket.sdk import InvalidArgumentError

__all__ = ["jax_op", "native_path", "native_reason"]

_Array = np.ndarray[Any, Any]
_lock = threading.Lock()
# (op, attrs key, label, device) -> the custom_vjp function of the input arrays.
_functions: dict[tuple[Any, ...], Callable[..., Any]] = {}
_wrappers: dict[BridgeOp, Callable[..., Any]] = {}


def shape_dtype(shape: Any, dtype: Any) -> Any:
    """``jax.ShapeDtypeStruct(shape, dtype)`` (jax leaves its constructor untyped)."""
    return jax.ShapeDtypeStruct(shape, dtype)  # type: ignore[no-untyped-call]


def jax_op(name: str) -> Callable[..., Any]:
    """The JAX function of the registered op ``name`` (``Opm>ZeroOut``): inputs positional
    (``jax.Array``s or array-likes), attrs keyword-only as in ``opmarket.ops``, plus
    ``_kernel="label"`` to ask for a labelled kernel (``"c_abi"``)."""
    op = bridge_op(name)
    found = _wrappers.get(op)
    if found is None:
        op.check_supported("JAX")
        found = _wrappers[op] = _wrapper(op)
    return found


def _wrapper(op: BridgeOp) -> Callable[..., Any]:
    dtype_params = {p.name for p in op.params if p.kind is ParamKind.DTYPE}
    n_in = len(op.op_def.inputs)
    single = len(op.op_def.outputs) == 1

    def call(*inputs: Any, _kernel: str = "", **kwargs: Any) -> Any:
        if len(inputs) != n_in:
            raise InvalidArgumentError(f"{op.name} takes {n_in} inputs, got {len(inputs)}")
        arrays = [x if isinstance(x, jax.Array) else jnp.asarray(x) for x in inputs]
        given = {k: normalize_dtype(v) if k in dtype_params else v for k, v in kwargs.items()}
        attrs = op.bind([np.dtype(a.dtype) for a in arrays], given)
        device = _device(arrays)
        if device == "CPU" and not any(isinstance(a, jax.core.Tracer) for a in arrays):
            # Eager: the kernel reads the arrays' own memory (numpy views, no copy).
            outs = [
                jnp.asarray(o)
                for o in op.compute(
                    [np.asarray(a) for a in arrays], attrs, device=device, label=_kernel
                )
            ]
            return outs[0] if single else tuple(outs)
        key = (op, freeze_attrs(attrs), _kernel, device)
        fn = _functions.get(key)
        if fn is None:
            with _lock:
                fn = _functions.get(key) or _functions.setdefault(
                    key, _build(op, attrs, _kernel, device)
                )
        return fn(*arrays)

    call.__name__ = call.__qualname__ = op.python_name
    call.__doc__ = (
        f"{op.name} on jax.Arrays (jit, vmap and grad work); see "
        f"opmarket.ops.{op.python_name} for its arguments.\n\n"
        f"{op.op_def.summary}"
    )
    call.__module__ = "opmarket.jax.ops"
    call.__opmarket_op__ = op.name  # type: ignore[attr-defined]  # for introspection
    return call


def _device(arrays: Sequence[Any]) -> str:
    """Where the call runs: the platform of the inputs (committed arrays), else JAX's
    default backend; opmarket's device names (CPU, GPU)."""
    platform = None
    for a in arrays:
        if isinstance(a, jax.Array) and not isinstance(a, jax.core.Tracer):
            platform = next(iter(a.devices())).platform
            break
    if platform is None:
        platform = jax.default_backend()
    return (
        "CPU"
        if platform == "cpu"
        else "GPU"
        if platform in ("gpu", "cuda", "rocm")
        else platform.upper()
    )


def native_path(name: str, *, device: str = "CPU", _kernel: str = "", **attrs: Any) -> str:
    """Which path the op takes in JAX for these attrs (inferred type attrs given by name,
    ``T=np.float32``): ``"ffi"`` (an XLA FFI custom call to a C-ABI kernel) or
    ``"callback"`` (``jax.pure_callback``). ``device`` is ``CPU``, or ``GPU``/``CUDA``: a
    GPU companion's kernel with a device entry, on JAX's CUDA platform."""
    from opmarket.jax import _ffi

    if _DEVICES.get(device.upper()) == "GPU" and _ffi.cuda_unavailable():
        return "callback"  # whatever the attrs: asked before they are bound
    op, bound = _bound(name, attrs)
    native = _ffi.native_kernel(op, bound, _kernel, _DEVICES.get(device.upper(), device))
    return "ffi" if native is not None else "callback"


def native_reason(name: str, *, device: str = "CPU", _kernel: str = "", **attrs: Any) -> str:
    """Why the op (attrs as for :func:`native_path`) runs through a host callback on
    ``device`` (e.g. ``JAX has no CUDA platform here (...)``); "" when it is an FFI call.
    Without a CUDA platform that is the GPU's reason whatever the attrs (none are needed)."""
    from opmarket.jax import _ffi

    if _DEVICES.get(device.upper()) == "GPU" and _ffi.cuda_unavailable():
        return _ffi.cuda_unavailable()
    op, bound = _bound(name, attrs)
    return _ffi.native_reason(op, bound, _kernel, _DEVICES.get(device.upper(), device))


# the device names native_path takes, as opmarket names them
_DEVICES = {"CPU": "CPU", "GPU": "GPU", "CUDA": "GPU"}


def _bound(name: str, attrs: dict[str, Any]) -> tuple[BridgeOp, dict[str, Any]]:
    """The op, and every attr bound from ``attrs`` (inferred type attrs given by name)."""
    op = bridge_op(name)
    inputs = {a.type_attr for a in op.op_def.inputs if a.type_attr}
    given = {k: v for k, v in attrs.items() if k not in inputs}
    dtypes = [
        np.dtype(attrs[a.type_attr]) if a.type_attr else a.type.numpy for a in op.op_def.inputs
    ]
    return op, op.bind([d for d in dtypes if d is not None], given)


def _build(op: BridgeOp, attrs: dict[str, Any], label: str, device: str) -> Callable[..., Any]:
    op.kernel(attrs, device, label)  # KernelNotFoundError now, naming the device, if none serves
    single = len(op.op_def.outputs) == 1

    def primal(*xs: Any) -> Any:
        # jax.grad hands a Python scalar input to the rule as a weakly typed value, not an array
        xs = tuple(jnp.asarray(x) for x in xs)
        specs = op.output_specs([x.shape for x in xs], attrs)
        outs = _forward(op, attrs, label, device, xs=xs, specs=specs)
        return outs[0] if single else tuple(outs)

    fn = jax.custom_vjp(primal)

    def fwd(*xs: Any) -> tuple[Any, Any]:
        xs = tuple(jnp.asarray(x) for x in xs)
        out = primal(*xs)
        return out, (xs, out)

    def bwd(res: Any, g: Any) -> tuple[Any, ...]:
        xs, out = res
        outs = [out] if single else list(out)
        gs = [g] if single else list(g)
        return _backward(op, attrs, xs, outs, gs)

    fn.defvjp(fwd, bwd)
    return fn


def _forward(
    op: BridgeOp,
    attrs: dict[str, Any],
    label: str,
    device: str,
    *,
    xs: Sequence[Any],
    specs: list[OutputSpec],
) -> list[Any]:
    from opmarket.jax import _ffi

    native = _ffi.native_kernel(op, attrs, label, device)
    if native is not None:
        return _ffi.call(native, op, attrs, xs, specs)
    result = [shape_dtype(s.shape, s.dtype) for s in specs]

    def host(*arrays: Any) -> tuple[_Array, ...]:
        return tuple(op.compute([np.asarray(a) for a in arrays], attrs, device=device, label=label))

    if all_empty(specs):
        # XLA would replace a pure callback with only empty outputs by empty constants, and
        # the kernel would not check its inputs: an (unordered) io_callback stays.
        return list(io_callback(host, result, *xs))
    return list(jax.pure_callback(host, result, *xs, vmap_method="sequential"))


def all_empty(specs: Sequence[OutputSpec]) -> bool:
    """Whether every output has no elements (known while tracing): what XLA removes."""
    return bool(specs) and all(any(d == 0 for d in s.shape) for s in specs)


def _backward(
    op: BridgeOp, attrs: dict[str, Any], xs: Sequence[Any], outs: Sequence[Any], gs: Sequence[Any]
) -> tuple[Any, ...]:
    if not op.differentiable:
        op.gradient([], [], attrs, [])  # NotFoundError without a gradient; None: not differentiable
    exact = [jnp.issubdtype(x.dtype, jnp.inexact) for x in xs]
    # Integer outputs get float0 cotangents; the opmarket gradient sees zeros of their dtype.
    gs = [
        jnp.zeros(o.shape, o.dtype) if g.dtype == jax.dtypes.float0 else g
        for g, o in zip(gs, outs, strict=True)
    ]
    wanted = [x for x, e in zip(xs, exact, strict=True) if e]
    grads: list[Any] = []
    if wanted and op.differentiable:
        result = [shape_dtype(x.shape, x.dtype) for x in wanted]
        n_x, n_o = len(xs), len(outs)

        def host(*arrays: Any) -> tuple[_Array, ...]:
            arrays = tuple(np.asarray(a) for a in arrays)
            ins, os_, grads_ = arrays[:n_x], arrays[n_x : n_x + n_o], arrays[n_x + n_o :]
            got = op.gradient(ins, os_, attrs, grads_)
            return tuple(
                np.zeros_like(x) if g is None else g
                for x, g, e in zip(ins, got, exact, strict=True)
                if e
            )

        grads = list(jax.pure_callback(host, result, *xs, *outs, *gs, vmap_method="sequential"))
    out: list[Any] = []
    it = iter(grads)
    for x, e in zip(xs, exact, strict=True):
        if not e:
            out.append(np.zeros(x.shape, dtype=jax.dtypes.float0))
        elif op.differentiable:
            out.append(next(it))
        else:
            out.append(jnp.zeros(x.shape, x.dtype))
    return tuple(out)
