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
from opmarket._bridge import (
    BoundedCache,
    BridgeOp,
    KernelNotFoundError,
    ParamKind,
    RegistrationError,
    bridge_op,
    bridge_ops,
    normalize_shape,
    registry,
)
from opmarket.sdk import InvalidArgumentError, OpmarketError
from opmarket.sdk.torch_schema import backward_schema, forward_schema
from opmarket.torch._convert import VIA, VIA_NP, from_numpy, numpy_dtype, opm_dtype, to_numpy

__all__ = ["native_path", "native_reason", "register_all", "torch_op"]

_Array = np.ndarray[Any, Any]
_lock = threading.RLock()
# op name -> (its OpDef when registered, the torch op packet)
_registered: dict[str, tuple[Any, Any]] = {}
# torch's qualified name -> the opmarket op that has it (two ops may not share one)
_qualnames: dict[str, str] = {}
# (op name, kernel label, device: CPU or GPU) -> why its kernel on that device runs
# through Python ("": natively; GPU: a CUDA dispatch-key kernel calling a device entry)
_native: dict[tuple[str, str, str], str] = {}
# the device names native_path takes, as opmarket names them
_DEVICES = {"CPU": "CPU", "GPU": "GPU", "CUDA": "GPU"}


def torch_op(name: str) -> Any:
    """``torch.ops.<namespace>.<op>`` for the registered op ``name``, registering it with
    torch on first use; NotFoundError for a built-in or an op the bridge cannot carry."""
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
                    "operator in a running process"
                )
            return found[1]
        op.check_supported("PyTorch")
        packet = _register(op)
        _registered[op.name] = (op.op_def, packet)
        return packet


def native_path(name: str, *, device: str = "CPU", _kernel: str = "", **attrs: Any) -> str:
    """Which path the op's overload (``_kernel``: a kernel label, "" for the default) takes
    in PyTorch on ``device`` (``CPU``, or ``GPU``/``CUDA`` for CUDA tensors): ``"native"`` (a
    boxed kernel registered through torch's stable C ABI, no Python per call: a C-ABI
    kernel on the CPU, a GPU companion's device entry on CUDA) or ``"python"`` (the custom
    op's Python kernel). ``attrs`` are accepted for the bridges' common signature; the path
    does not depend on them. :func:`native_reason` says why an overload is not native."""
    if device.upper() not in _DEVICES:
        return "python"
    return "python" if native_reason(name, device=device, _kernel=_kernel) else "native"


def native_reason(name: str, *, device: str = "CPU", _kernel: str = "") -> str:
    """Why the op's overload runs through Python on ``device`` (``CPU``, or ``GPU``/``CUDA``:
    e.g. ``no CUDA device in torch (...)``); "" when it runs natively."""
    op = bridge_op(name)
    torch_op(op.name)
    where = _DEVICES.get(device.upper())
    if where is None:
        return f"no native kernels on device {device!r} (native: CPU, CUDA)"
    return _native.get(
        (op.name, _kernel, where), f"it has no overload for kernel label {_kernel!r}"
    )


def register_all() -> list[str]:
    """Register every installed op (every plugin loaded) with torch; their full names. An
    op torch refuses (a schema it cannot parse) is left out, not the others: asking for
    it (``torch_op``, ``opmarket.torch.ops``) raises the reason."""
    names = []
    for op in bridge_ops():
        try:
            torch_op(op.name)
        except (OpmarketError, RuntimeError, ValueError):
            continue
        names.append(op.name)
    return names


class _Call:
    """One op's calls: keyword values bound into attrs and the prepared kernel call, cached
    per (input dtypes, device, keyword values, registry state)."""

    def __init__(self, op: BridgeOp) -> None:
        self.op = op
        self.convert = {p.name: _converter(p.attr.type, p.kind) for p in op.params}
        self.cache: BoundedCache[Any, tuple[dict[str, Any], Any]] = BoundedCache(1024, self._forget)
        #: CPU calls: (registry id, version, label, dtypes..., keyword items...) -> runner;
        #: filled beside :attr:`cache` and emptied with it
        self.fast: dict[Any, Any] = {}

    def _forget(self) -> None:
        self.cache.clear()
        self.fast.clear()

    def attrs(self, dtypes: Sequence[np.dtype[Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
        """Every attr, bound from input dtypes and keyword values (None: the default)."""
        given = {k: self.convert[k](v) for k, v in kwargs.items() if v is not None}
        return self.op.bind(dtypes, given)

    def prepared(
        self, tensors: Sequence[torch.Tensor], kwargs: dict[str, Any], device: str, label: str
    ) -> tuple[dict[str, Any], Any]:
        """(attrs, the prepared kernel call) for this call."""
        reg = registry()
        try:
            key: Any = (
                id(reg),
                reg.version,
                device,
                label,
                *(t.dtype for t in tensors),
                *_items(kwargs),
            )
            found = self.cache.get(key)
        except TypeError:  # values nothing makes hashable
            key, found = None, None
        if found is None:
            attrs = self.attrs([numpy_dtype(t.dtype) for t in tensors], kwargs)
            if device != "CPU" and not self.op.has_kernel(attrs, device, label):
                raise KernelNotFoundError(
                    f"{self.op.name} has no {device} kernel; its input is on "
                    f"{tensors[0].device}\n" + _kernel_list(self.op)
                )
            found = (attrs, self.op.runner(attrs, device, label))
            if key is not None:
                self.cache.put(key, found)
                if device == "CPU":
                    self.fast[(key[0], key[1], label, *key[4:])] = found[1]
        return found


def _items(kwargs: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Keyword values as a key: lists as tuples, each value with its type."""
    return [(k, type(v), tuple(v) if isinstance(v, list) else v) for k, v in kwargs.items()]


def _converter(attr_type: str, kind: ParamKind) -> Callable[[Any], Any]:
    if kind is ParamKind.DTYPE:
        return opm_dtype
    if attr_type == "shape":
        return normalize_shape
    if attr_type == "list(shape)":
        return lambda v: tuple(normalize_shape(s) for s in v)
    return lambda v: v


def _run(
    call: _Call, tensors: Sequence[torch.Tensor], kwargs: dict[str, Any], label: str
) -> list[torch.Tensor]:
    """The kernel on the tensors' memory: CPU tensors' storage is what the kernel reads;
    a GPU kernel's tensors travel through host memory, as opmarket's GPU kernels take it."""
    if all(t.is_cpu for t in tensors):
        reg = registry()
        try:  # the per-call path: one dict lookup for the prepared kernel call
            runner = call.fast[
                (id(reg), reg.version, label, *[t.dtype for t in tensors], *_items(kwargs))
            ]
        except (KeyError, TypeError):
            runner = call.prepared(tensors, kwargs, "CPU", label)[1]
        arrays = [
            t.numpy() if t.dtype not in VIA and not t.requires_grad else to_numpy(t)
            for t in tensors
        ]
        where = None
    else:
        kind = tensors[0].device.type
        _, runner = call.prepared(tensors, kwargs, "GPU" if kind == "cuda" else kind.upper(), label)
        arrays = [to_numpy(t.cpu()) for t in tensors]
        where = tensors[0].device
    result = []
    for out in runner(arrays):
        # torch custom ops may not return their inputs or views of them
        if (out.base is not None or any(out is x for x in arrays)) and any(
            np.may_share_memory(out, x) for x in arrays
        ):
            out = out.copy()  # noqa: PLW2901
        flags = out.flags
        t = (
            torch.from_numpy(out)
            if flags.c_contiguous and flags.writeable and (out.dtype not in VIA_NP)
            else from_numpy(out)
        )
        result.append(t if where is None else t.to(where))
    return result


def _kernel_list(op: BridgeOp) -> str:
    lines = ["  registered kernels:"]
    lines += [f"    {k.describe()}" for k in registry().kernels(op.name)]
    return "\n".join(lines)


def _fake_shapes(
    op: BridgeOp, call: _Call, tensors: Sequence[torch.Tensor], kwargs: dict[str, Any]
) -> list[tuple[Any, np.dtype[Any]]]:
    attrs = call.attrs([numpy_dtype(t.dtype) for t in tensors], kwargs)
    shapes = [tuple(t.shape) for t in tensors]
    try:  # symbolic sizes pass through Python shape functions
        specs = op.output_specs(shapes, attrs, allow_unknown=True)
    except (TypeError, ValueError, OverflowError):  # a compiled one: specialise to ints
        specs = op.output_specs(
            [tuple(int(d) for d in s) for s in shapes], attrs, allow_unknown=True
        )
    return [(s.shape, s.dtype) for s in specs]


def _labels(op: BridgeOp) -> list[str]:
    """The kernel labels of the op's registered kernels that can name an overload."""
    return sorted(
        {
            k.label
            for k in registry().kernels(op.name)
            if k.label and k.label.isidentifier() and k.label != "default"
        }
    )


def _register(op: BridgeOp) -> Any:
    qualname = f"{op.namespace}::{op.python_name}"
    other = _qualnames.get(qualname)
    if other is not None and other != op.name:
        raise RegistrationError(
            f"{op.name} and {other} both map to torch.ops.{op.namespace}.{op.python_name}"
        )
    _qualnames[qualname] = op.name
    call = _Call(op)
    single = len(op.op_def.outputs) == 1
    n_in = len(op.op_def.inputs)
    names = [p.name for p in op.params]

    def make_impl(label: str) -> Callable[..., Any]:
        def impl(*args: Any, **kwargs: Any) -> Any:
            if len(args) > n_in:  # keyword-only arguments handed over by position
                kwargs = {**dict(zip(names, args[n_in:], strict=False)), **kwargs}
                args = args[:n_in]
            outs = _run(call, args, kwargs, label)
            return outs[0] if single else tuple(outs)

        return impl

    def fake(*args: Any, **kwargs: Any) -> Any:
        if len(args) > n_in:
            kwargs = {**dict(zip(names, args[n_in:], strict=False)), **kwargs}
            args = args[:n_in]
        outs = []
        for shape, dtype in _fake_shapes(op, call, args, kwargs):
            ctx = None
            dims = []
            for d in shape:
                if d is None:  # the size depends on the values
                    ctx = ctx or torch.library.get_ctx()
                    dims.append(ctx.new_dynamic_size())
                else:
                    dims.append(d)
            outs.append(
                args[0].new_empty(dims, dtype=_torch_dtype(dtype))
                if args
                else torch.empty(dims, dtype=_torch_dtype(dtype))
            )
        return outs[0] if single else tuple(outs)

    defined = torch.library.custom_op(
        qualname, make_impl(""), mutates_args=(), schema=forward_schema(op.op_def)
    )
    defined.register_fake(fake)
    _native_register(op, op.python_name, "")
    autograd: tuple[Any, Any] | None = None
    if op.differentiable:
        backward = _register_backward(op, call)

        def setup_context(
            ctx: Any, inputs: tuple[Any, ...], keyword_only_inputs: Any = None, output: Any = None
        ) -> None:
            ctx.save_for_backward(*inputs[:n_in], *([output] if single else output))
            kw = dict(keyword_only_inputs or {})
            kw.update(zip(names, inputs[n_in:], strict=False))
            ctx.kw = kw

        def backward_fn(ctx: Any, *grads: Any) -> Any:
            saved = ctx.saved_tensors
            xs, outs = saved[:n_in], saved[n_in:]
            gs = [torch.zeros_like(o) if g is None else g for g, o in zip(grads, outs, strict=True)]
            got = backward(*xs, *outs, *gs, **ctx.kw)
            return tuple(
                g if x.is_floating_point() or x.is_complex() else None
                for g, x in zip(got, xs, strict=True)
            )

        autograd = (backward_fn, setup_context)
        defined.register_autograd(backward_fn, setup_context=setup_context)
    # A labelled kernel (``c_abi``) is an overload of its own: torch.ops.opm.zero_out.c_abi.
    for label in _labels(op):
        lib = _library(op.namespace)
        lib.define(f"{op.python_name}.{label}{forward_schema(op.op_def)}")
        lib.impl(f"{op.python_name}.{label}", make_impl(label), "CompositeExplicitAutograd")
        overload = f"{qualname}.{label}"
        torch.library.register_fake(overload, fake, lib=lib)
        if autograd is not None:
            torch.library.register_autograd(
                overload, autograd[0], setup_context=autograd[1], lib=lib
            )
        _native_register(op, f"{op.python_name}.{label}", label)
    return getattr(getattr(torch.ops, op.namespace), op.python_name)


def _native_register(op: BridgeOp, name: str, label: str) -> None:
    """The overload's CPU and CUDA kernels registered natively where they can be; why not
    (or "") kept for :func:`native_reason`."""
    from opmarket.torch import _native as native

    _native[(op.name, label, "CPU")] = native.register(op, name, label)
    _native[(op.name, label, "GPU")] = native.register_cuda(op, name, label)


_libraries: dict[str, Any] = {}


def _library(namespace: str) -> Any:
    """One torch.library.Library fragment per namespace, alive as long as the process."""
    lib = _libraries.get(namespace)
    if lib is None:
        lib = _libraries[namespace] = torch.library.Library(  # type: ignore[no-untyped-call]
            namespace, "FRAGMENT"
        )
    return lib


def _torch_dtype(dtype: np.dtype[Any]) -> torch.dtype:
    from opmarket.torch._convert import DTYPES

    for t, d in DTYPES.items():
        if d == dtype:
            return t
    raise InvalidArgumentError(f"numpy dtype {dtype} has no torch dtype")


def _register_backward(op: BridgeOp, call: _Call) -> Any:
    n_in, n_out = len(op.op_def.inputs), len(op.op_def.outputs)

    def impl(*tensors: torch.Tensor, **kwargs: Any) -> list[torch.Tensor]:
        arrays = [to_numpy(t if t.device.type == "cpu" else t.cpu()) for t in tensors]
        xs, outs, gs = arrays[:n_in], arrays[n_in : n_in + n_out], arrays[n_in + n_out :]
        attrs = call.attrs([x.dtype for x in xs], kwargs)
        got = op.gradient(xs, outs, attrs, gs)
        result = []
        for x, g, t in zip(xs, got, tensors, strict=False):
            a = np.zeros_like(x) if g is None else g
            if any(np.may_share_memory(a, y) for y in arrays):
                a = a.copy()
            grad = from_numpy(a).to(t.device)
            if grad.stride() != t.stride():
                # the input's layout (empty_like's), as the fake gives it and compiled
                # backward graphs expect
                grad = torch.empty_like(t).copy_(grad)
            result.append(grad)
        return result

    def fake(*tensors: torch.Tensor, **kwargs: Any) -> list[torch.Tensor]:
        return [torch.empty_like(t) for t in tensors[:n_in]]

    defined = torch.library.custom_op(
        f"{op.namespace}::{op.python_name}_opm_backward",
        impl,
        mutates_args=(),
        schema=backward_schema(op.op_def),
    )
    defined.register_fake(fake)
    return getattr(getattr(torch.ops, op.namespace), f"{op.python_name}_opm_backward")
