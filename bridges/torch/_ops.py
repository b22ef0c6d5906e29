"""Every opmarket op as a PyTorch custom op (``torch.library.custom_op``): a schema from the
OpDef, an implementation calling the op's kernel on the tensors' memory, a fake (meta)
implementation from the op's shape function, and autograd through the opmarket gradient,
itself a custom op (``<op>_opm_backward``) so that AOT autograd and ``torch.compile`` trace
it like any other."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import torch
from opmarket._bridge import BridgeOp, ParamKind, bridge_op, bridge_ops
from opmarket.registry import KernelNotFound, RegistrationError
from opmarket.sdk import InvalidArgument, TensorShape
from opmarket.torch._convert import from_numpy, numpy_dtype, opm_dtype, to_numpy
from opmarket.torch._schema import LABEL, backward_schema, forward_schema

__all__ = ["register_all", "torch_op"]

_Array = np.ndarray[Any, Any]
_lock = threading.RLock()
# op name -> (its OpDef when registered, the torch op packet)
_registered: dict[str, tuple[Any, Any]] = {}
# torch's qualified name -> the opmarket op that has it (two ops may not share one)
_qualnames: dict[str, str] = {}


def torch_op(name: str) -> Any:
    """``torch.ops.<namespace>.<op>`` for the registered op ``name``, registering it with
    torch on first use; NotFound for a built-in or an op the bridge cannot carry."""
    op = bridge_op(name)
    found = _registered.get(op.name)
    if found is not None and found[0] == op.op_def:
        return found[1]
    with _lock:
        found = _registered.get(op.name)
        if found is not None:
            if found[0] != op.op_def:
                raise RegistrationError(
                    f"{op.name} changed after it was registered with torch as "
                    f"torch.ops.{op.namespace}.{op.python_name}; torch cannot redefine an "
                    "operator in a running process")
            return found[1]
        op.check_supported("PyTorch")
        packet = _register(op)
        _registered[op.name] = (op.op_def, packet)
        return packet


def register_all() -> list[str]:
    """Register every installed op (every plugin loaded) with torch; their full names."""
    return [op.name for op in bridge_ops() if torch_op(op.name) is not None]


def _device(tensors: Sequence[torch.Tensor]) -> str:
    kind = tensors[0].device.type if tensors else "cpu"
    return "CPU" if kind == "cpu" else "GPU" if kind == "cuda" else kind.upper()


class _Call:
    """Converts one call's keyword arguments into bound attrs, cached per dtype and value."""

    def __init__(self, op: BridgeOp) -> None:
        self.op = op
        self.convert = {p.name: _converter(p.attr.type, p.kind) for p in op.params}
        self.cache: dict[Any, dict[str, Any]] = {}

    def attrs(self, dtypes: Sequence[np.dtype[Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
        try:
            key: Any = (tuple(dtypes), tuple((k, type(v), v) for k, v in kwargs.items()))
            found = self.cache.get(key)
        except TypeError:  # lists
            key, found = None, None
        if found is None:
            given = {k: self.convert[k](v) for k, v in kwargs.items() if v is not None}
            found = self.op.bind(dtypes, given)
            if key is not None:
                if len(self.cache) >= 1024:
                    self.cache.clear()
                self.cache[key] = found
        return found


def _converter(attr_type: str, kind: ParamKind) -> Callable[[Any], Any]:
    if kind is ParamKind.DTYPE:
        return opm_dtype
    if attr_type == "shape":
        return lambda v: TensorShape(tuple(int(d) for d in v))
    if attr_type == "list(shape)":
        return lambda v: tuple(TensorShape(tuple(int(d) for d in s)) for s in v)
    return lambda v: v


def _run(op: BridgeOp, call: _Call, tensors: Sequence[torch.Tensor],
         kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The kernel on the tensors' memory: CPU tensors' storage is what the kernel reads;
    a GPU kernel's tensors travel through host memory, as opmarket's GPU kernels take it."""
    label = kwargs.pop(LABEL, "")
    device = _device(tensors)
    attrs = call.attrs([numpy_dtype(t.dtype) for t in tensors], kwargs)
    if device == "CPU":
        arrays = [to_numpy(t) for t in tensors]
    else:
        if not op.has_kernel(attrs, device, label):
            raise KernelNotFound(
                f"{op.name} has no {device} kernel; its input is on {tensors[0].device}\n"
                + _kernel_list(op))
        arrays = [to_numpy(t.cpu()) for t in tensors]
    outs = op.runner(attrs, device, label)(arrays)
    result = []
    for out in outs:
        # torch custom ops may not return their inputs or views of them
        a = out.copy() if any(np.may_share_memory(out, x) for x in arrays) else out
        t = from_numpy(a)
        result.append(t if device == "CPU" else t.to(tensors[0].device))
    return result


def _kernel_list(op: BridgeOp) -> str:
    from opmarket._bridge._registry import registry

    lines = ["  registered kernels:"]
    lines += [f"    {k.describe()}" for k in registry().kernels(op.name)]
    return "\n".join(lines)


def _fake_shapes(op: BridgeOp, call: _Call, tensors: Sequence[torch.Tensor],
                 kwargs: dict[str, Any]) -> list[tuple[Any, np.dtype[Any]]]:
    kwargs.pop(LABEL, None)
    attrs = call.attrs([numpy_dtype(t.dtype) for t in tensors], kwargs)
    shapes = [tuple(t.shape) for t in tensors]
    try:  # symbolic sizes pass through Python shape functions
        specs = op.output_specs(shapes, attrs, allow_unknown=True)
    except (TypeError, ValueError, OverflowError):  # a compiled one: specialise to ints
        specs = op.output_specs([tuple(int(d) for d in s) for s in shapes], attrs,
                                allow_unknown=True)
    return [(s.shape, s.dtype) for s in specs]


def _register(op: BridgeOp) -> Any:
    qualname = f"{op.namespace}::{op.python_name}"
    other = _qualnames.get(qualname)
    if other is not None and other != op.name:
        raise RegistrationError(f"{op.name} and {other} both map to torch.ops."
                                f"{op.namespace}.{op.python_name}")
    _qualnames[qualname] = op.name
    call = _Call(op)
    single = len(op.op_def.outputs) == 1
    n_in = len(op.op_def.inputs)

    def impl(*tensors: torch.Tensor, **kwargs: Any) -> Any:
        outs = _run(op, call, tensors, kwargs)
        return outs[0] if single else tuple(outs)

    def fake(*tensors: torch.Tensor, **kwargs: Any) -> Any:
        outs = []
        for shape, dtype in _fake_shapes(op, call, tensors, kwargs):
            ctx = None
            dims = []
            for d in shape:
                if d is None:  # the size depends on the values
                    ctx = ctx or torch.library.get_ctx()
                    dims.append(ctx.new_dynamic_size())
                else:
                    dims.append(d)
            outs.append(tensors[0].new_empty(dims, dtype=_torch_dtype(dtype)) if tensors
                        else torch.empty(dims, dtype=_torch_dtype(dtype)))
        return outs[0] if single else tuple(outs)

    defined = torch.library.custom_op(qualname, impl, mutates_args=(),
                                      schema=forward_schema(op))
    defined.register_fake(fake)
    if op.differentiable:
        backward = _register_backward(op, call)

        def setup_context(ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: Any = None,
                          output: Any = None) -> None:
            ctx.save_for_backward(*inputs[:n_in], *([output] if single else output))
            ctx.kw = dict(keyword_only_inputs or {})

        def backward_fn(ctx: Any, *grads: Any) -> Any:
            saved = ctx.saved_tensors
            xs, outs = saved[:n_in], saved[n_in:]
            gs = [torch.zeros_like(o) if g is None else g
                  for g, o in zip(grads, outs, strict=True)]
            got = backward(*xs, *outs, *gs, **ctx.kw)
            result = [g if x.is_floating_point() or x.is_complex() else None
                      for g, x in zip(got, xs, strict=True)]
            return tuple(result)

        defined.register_autograd(backward_fn, setup_context=setup_context)
    ns = getattr(torch.ops, op.namespace)
    return getattr(ns, op.python_name)


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    from opmarket.torch._convert import DTYPES

    for t, d in DTYPES.items():
        if d == dtype:
            return t
    raise InvalidArgument(f"numpy dtype {dtype} has no torch dtype")


def _register_backward(op: BridgeOp, call: _Call) -> Any:
    n_in, n_out = len(op.op_def.inputs), len(op.op_def.outputs)

    def impl(*tensors: torch.Tensor, **kwargs: Any) -> list[torch.Tensor]:
        label = kwargs.pop(LABEL, "")
        del label  # the gradient is the op's, whichever kernel ran
        arrays = [to_numpy(t if t.device.type == "cpu" else t.cpu()) for t in tensors]
        xs, outs, gs = arrays[:n_in], arrays[n_in:n_in + n_out], arrays[n_in + n_out:]
        attrs = call.attrs([x.dtype for x in xs], kwargs)
        got = op.gradient(xs, outs, attrs, gs)
        result = []
        for x, g, t in zip(xs, got, tensors, strict=False):
            a = np.zeros_like(x) if g is None else g
            if any(np.may_share_memory(a, y) for y in arrays):
                a = a.copy()
            result.append(from_numpy(a).to(t.device))
        return result

    def fake(*tensors: torch.Tensor, **kwargs: Any) -> list[torch.Tensor]:
        return [torch.empty_like(t) for t in tensors[:n_in]]

    defined = torch.library.custom_op(f"{op.namespace}::{op.python_name}_opm_backward", impl,
                                      mutates_args=(), schema=backward_schema(op))
    defined.register_fake(fake)
    return getattr(getattr(torch.ops, op.namespace), f"{op.python_name}_opm_backward")
