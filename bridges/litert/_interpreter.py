"""A LiteRT model with opmarket custom ops, run by LiteRT's CompiledModel with opmarket's
kernels registered as custom-op kernels (``LiteRtAddCustomOpKernelOption``), behind the
interpreter's usual methods."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opmarket._bridge import (
    BridgeOp,
    OpResolver,
    bridge_op,
    c_array,
    load_all,
    output_shapes,
    readonly_array,
    registry,
)
from opmarket.litert import _capi
from opmarket.litert._model import (
    SCHEMA_TYPES,
    attr_sets,
    attrs_from_options,
    custom_ops_of,
    read_model,
    text,
)
from opmarket.sdk import (
    InvalidArgumentError,
    KernelSpec,
    NotFoundError,
    OpDef,
    OpmarketError,
)

__all__ = ["Interpreter", "custom_ops_of"]


@dataclass
class _CustomOp:
    """One registration of a custom op: the nodes that share one set of attrs (their custom
    options). LiteRT's output-layout and run callbacks see only the registration, not the
    node, so each distinct attr set gets a registration (and custom code) of its own."""

    op: OpDef
    kernel: KernelSpec | None
    errors: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    struct: Any = None
    #: The registry's prepared call for each tuple of input dtypes (the call path's cache).
    calls: dict[tuple[np.dtype[Any], ...], Any] = field(default_factory=dict)

    def _call(self, dtypes: tuple[np.dtype[Any], ...]) -> Any:
        found = self.calls.get(dtypes)
        if found is None:
            bridged: BridgeOp = bridge_op(self.op.name)
            attrs = bridged.bind_attrs(dtypes, self.attrs)
            device = self.kernel.device if self.kernel is not None else None
            found = bridged.runner(attrs, device or "CPU", kernel=self.kernel)
            self.calls[dtypes] = found
        return found

    def init(self, _user: Any, data: Any, size: int) -> int:
        return _capi.STATUS_OK  # the attrs were read from the node's options at creation

    def output_layouts(self, _user: Any, n_in: int, inputs: Any, n_out: int, outputs: Any) -> int:
        try:
            shapes = [
                tuple(int(d) for d in inputs[i].dimensions[: inputs[i].rank]) for i in range(n_in)
            ]
            out = output_shapes(self.op, shapes, self.attrs)
            if out is None or len(out) != n_out or any(s is None or None in s for s in out):
                raise InvalidArgumentError(
                    f"{self.op.name}: its shape function does not give "
                    f"static output shapes for inputs {shapes}"
                )
            for i, shape in enumerate(out):
                assert shape is not None
                outputs[i].rank = len(shape)
                outputs[i].has_strides = 0
                for k, d in enumerate(shape):
                    outputs[i].dimensions[k] = int(d or 0)
            return _capi.STATUS_OK
        except Exception as exc:
            return self._fail(exc, _capi.STATUS_INVALID_ARGUMENT)

    def run(self, _user: Any, n_in: int, inputs: Any, n_out: int, outputs: Any) -> int:
        lib = _capi.lib()
        locked: list[Any] = []
        try:
            # The kernel reads LiteRT's input buffers in place (read-only views): they stay
            # locked until the outputs are written.
            arrays = [_read(lib, inputs[i], locked) for i in range(n_in)]
            results = self._call(tuple(a.dtype for a in arrays))(arrays)
            for i in range(n_out):
                _write(lib, outputs[i], np.asarray(results[i]))
            return _capi.STATUS_OK
        except Exception as exc:
            return self._fail(exc, _capi.STATUS_RUNTIME_FAILURE)
        finally:
            for buffer in locked:
                lib.LiteRtUnlockTensorBuffer(buffer)

    def _fail(self, exc: Exception, status: int) -> int:
        # LiteRT 2.3 ignores the status a callback returns: invoke() raises this record.
        message = str(exc)
        self.errors.append(
            message if message.startswith(self.op.name) else f"{self.op.name}: {message}"
        )
        return status

    def destroy(self, _user: Any) -> int:
        return _capi.STATUS_OK

    def make_struct(self) -> Any:
        self.struct = _capi.CustomOpKernel(
            _capi.INIT(self.init),
            _capi.OUTPUT_LAYOUTS(self.output_layouts),
            _capi.RUN(self.run),
            _capi.DESTROY(self.destroy),
        )
        return self.struct


def _buffer_type(lib: Any, buffer: Any) -> tuple[np.dtype[Any], tuple[int, ...]]:
    t = _capi.RankedTensorType()
    _check(lib, lib.LiteRtGetTensorBufferTensorType(buffer, ctypes.byref(t)), "tensor type")
    dims = tuple(int(d) for d in t.layout.dimensions[: t.layout.rank])
    return _capi.numpy_of(t.element_type), dims


def _read(lib: Any, buffer: Any, locked: list[Any]) -> np.ndarray[Any, Any]:
    """A read-only view of an input buffer, locked for reading (added to ``locked``, which
    the caller unlocks once the outputs are written)."""
    dtype, dims = _buffer_type(lib, buffer)
    addr = ctypes.c_void_p()
    _check(lib, lib.LiteRtLockTensorBuffer(buffer, ctypes.byref(addr), _capi.LOCK_READ), "lock")
    locked.append(buffer)
    return readonly_array(addr.value, dims, dtype)


def _write(lib: Any, buffer: Any, value: np.ndarray[Any, Any]) -> None:
    dtype, dims = _buffer_type(lib, buffer)
    if value.dtype != dtype or value.shape != dims:
        raise InvalidArgumentError(
            f"a kernel returned {value.dtype}{list(value.shape)} for an "
            f"output of {dtype}{list(dims)}"
        )
    addr = ctypes.c_void_p()
    _check(lib, lib.LiteRtLockTensorBuffer(buffer, ctypes.byref(addr), _capi.LOCK_WRITE), "lock")
    try:
        data = c_array(value)
        ctypes.memmove(addr.value or 0, data.ctypes.data, data.nbytes)
    finally:
        lib.LiteRtUnlockTensorBuffer(buffer)


def _check(lib: Any, status: int, what: str) -> None:
    if status != _capi.STATUS_OK:
        raise OpmarketError(f"LiteRT {what} failed (LiteRtStatus {status})")


def _aligned(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A zeroed array whose data is 64-byte aligned, as LiteRT's host buffers must be."""
    count = int(np.prod(shape, dtype=np.int64))
    # at least one item: a zero-size tensor still gets a buffer, and one of bytes views as
    # the dtype only in whole items
    nbytes = max(count, 1) * dtype.itemsize
    raw = np.zeros(nbytes + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    return raw[offset : offset + nbytes].view(dtype)[:count].reshape(shape)


class Interpreter:
    """A ``.tflite`` model with its opmarket custom ops, run on LiteRT's CPU: the methods of
    ``ai_edge_litert.interpreter.Interpreter`` that run a model's first signature (or its
    main graph): ``allocate_tensors``, ``get_input_details``, ``get_output_details``,
    ``set_tensor``, ``invoke``, ``get_tensor``."""

    def __init__(self, content: bytes, **kwargs: Any) -> None:
        unknown = sorted(set(kwargs) - {"num_threads"})
        if unknown:
            raise InvalidArgumentError(
                f"opmarket.litert.interpreter: unsupported arguments {unknown}"
            )
        self._content = bytes(content)
        self._errors: list[str] = []
        self._ops = self._resolve()
        self._io = self._signature()
        self._arrays: dict[int, np.ndarray[Any, Any]] = {}
        self._buffers: list[Any] = []
        self._handles: dict[str, Any] = {}
        self._create()

    # --- set-up ------------------------------------------------------------------------

    def _resolve(self) -> list[tuple[str, int, _CustomOp]]:
        """One registration per custom op and distinct attr set (see ``attr_sets``)."""
        load_all()
        resolver = OpResolver.from_registry(registry())
        self._content, sets = attr_sets(self._content)
        ops: list[tuple[str, int, _CustomOp]] = []
        missing: dict[tuple[str, int], str] = {}
        for code, name, version, options in sets:
            op = registry().op_def(name)
            if op is None:
                missing[name, version] = f"{name} (version {version})"
                continue
            try:
                kernel = resolver.find(name, version)
            except NotFoundError as exc:
                missing[name, version] = f"{name} (version {version}): {exc}"
                continue
            spec = kernel if isinstance(kernel, KernelSpec) else None
            attrs = attrs_from_options(op, options)
            ops.append((code, version, _CustomOp(op, spec, self._errors, attrs)))
        if missing:
            raise NotFoundError(
                "this model's custom ops have no opmarket op or kernel: "
                + "; ".join(missing.values())
            )
        return ops

    def _signature(self) -> dict[str, list[tuple[str, int]]]:
        model = read_model(self._content)
        graph = model.subgraphs[0]
        if model.signatureDefs:
            sig = model.signatureDefs[0]
            graph = model.subgraphs[sig.subgraphIndex]
            ins = [(text(t.name), int(t.tensorIndex)) for t in sig.inputs]
            outs = [(text(t.name), int(t.tensorIndex)) for t in sig.outputs]
        else:
            ins = [(text(graph.tensors[i].name), int(i)) for i in graph.inputs]
            outs = [(text(graph.tensors[i].name), int(i)) for i in graph.outputs]
        self._tensors = {i: graph.tensors[i] for _, i in [*ins, *outs]}
        return {"inputs": ins, "outputs": outs}

    def _create(self) -> None:
        lib = _capi.lib()
        h = {k: ctypes.c_void_p() for k in ("env", "model", "options", "compiled")}
        self._handles = h
        _check(lib, lib.LiteRtCreateEnvironment(0, None, ctypes.byref(h["env"])), "environment")
        self._blob = ctypes.create_string_buffer(self._content, len(self._content))
        _check(
            lib,
            lib.LiteRtCreateModelFromBuffer(
                h["env"], self._blob, len(self._content), ctypes.byref(h["model"])
            ),
            "model",
        )
        _check(lib, lib.LiteRtCreateOptions(ctypes.byref(h["options"])), "options")
        _check(lib, lib.LiteRtSetOptionsHardwareAccelerators(h["options"], _capi.CPU), "options")
        for name, version, custom in self._ops:
            _check(
                lib,
                lib.LiteRtAddCustomOpKernelOption(
                    h["options"], name.encode(), version, ctypes.byref(custom.make_struct()), None
                ),
                f"custom op {name}",
            )
        status = lib.LiteRtCreateCompiledModel(
            h["env"], h["model"], h["options"], ctypes.byref(h["compiled"])
        )
        if status != _capi.STATUS_OK or self._errors:
            raise InvalidArgumentError(
                "LiteRT could not compile the model: "
                + ("; ".join(self._errors) or f"status {status}")
            )
        self._output_shapes = self._sized_outputs()

    def _sized_outputs(self) -> list[tuple[int, ...]]:
        """The outputs' shapes after every op's prepare step (the custom ops' from their shape
        functions and their nodes' attrs): the converter writes no shape it could not infer
        (MedianPool's needs ksize, strides and padding)."""
        lib = _capi.lib()
        n = len(self._io["outputs"])
        layouts = (_capi.Layout * max(n, 1))()
        status = lib.LiteRtGetCompiledModelOutputTensorLayouts(
            self._handles["compiled"], 0, n, layouts, True
        )
        if status != _capi.STATUS_OK or self._errors:
            raise InvalidArgumentError(
                "LiteRT could not size the model's outputs: "
                + ("; ".join(self._errors) or f"status {status}")
            )
        return [tuple(int(d) for d in layouts[i].dimensions[: layouts[i].rank]) for i in range(n)]

    # --- the interpreter's methods -----------------------------------------------------

    def _details(self, which: str) -> list[dict[str, Any]]:
        out = []
        for k, (name, index) in enumerate(self._io[which]):
            t = self._tensors[index]
            shape = np.array(self._shape(which, k), np.int32)
            out.append(
                {
                    "name": name,
                    "index": index,
                    "shape": shape,
                    "shape_signature": np.array(
                        t.shapeSignature if t.shapeSignature is not None else shape, np.int32
                    ),
                    "dtype": np.dtype(SCHEMA_TYPES[t.type]).type,
                    "quantization": (0.0, 0),
                }
            )
        return out

    def _shape(self, which: str, k: int) -> tuple[int, ...]:
        if which == "outputs":
            return self._output_shapes[k]
        t = self._tensors[self._io[which][k][1]]
        return tuple(int(d) for d in (t.shape if t.shape is not None else []))

    def get_input_details(self) -> list[dict[str, Any]]:
        """One dict per input: name, index, shape, shape_signature, dtype, quantization."""
        return self._details("inputs")

    def get_output_details(self) -> list[dict[str, Any]]:
        """One dict per output, as get_input_details."""
        return self._details("outputs")

    def allocate_tensors(self) -> None:
        """Make the input and output buffers (the model's static shapes)."""
        lib = _capi.lib()
        self._free_buffers()
        slots = [(w, k) for w in ("inputs", "outputs") for k in range(len(self._io[w]))]
        for which, k in slots:
            name, index = self._io[which][k]
            t = self._tensors[index]
            shape = self._shape(which, k)
            if any(d < 0 for d in shape):
                raise InvalidArgumentError(
                    f"tensor {name!r} has a dynamic shape {list(shape)}; "
                    "opmarket.litert runs static shapes"
                )
            dtype = np.dtype(SCHEMA_TYPES[t.type])
            array = _aligned(shape, dtype)
            self._arrays[index] = array
            if array.size == 0:  # LiteRT makes no buffer of zero bytes; see invoke()
                self._buffers.append(None)
                continue
            ttype = _capi.RankedTensorType()
            ttype.element_type = _capi.element_type_of(dtype)
            ttype.layout.rank = len(shape)
            for axis, d in enumerate(shape):
                ttype.layout.dimensions[axis] = d
            buf = ctypes.c_void_p()
            _check(
                lib,
                lib.LiteRtCreateTensorBufferFromHostMemory(
                    ctypes.byref(ttype),
                    array.ctypes.data,
                    max(array.nbytes, 1),
                    None,
                    ctypes.byref(buf),
                ),
                f"buffer for {name!r}",
            )
            self._buffers.append(buf)

    def set_tensor(self, tensor_index: int, value: Any) -> None:
        """Copy ``value`` into input ``tensor_index`` (its dtype and shape must match)."""
        array = self._array(tensor_index)
        value = np.asarray(value)
        if value.dtype != array.dtype or value.shape != array.shape:
            raise InvalidArgumentError(
                f"tensor {tensor_index}: got {value.dtype}"
                f"{list(value.shape)}, expected {array.dtype}"
                f"{list(array.shape)}"
            )
        array[...] = value

    def get_tensor(self, tensor_index: int) -> np.ndarray[Any, Any]:
        """A copy of input or output ``tensor_index``."""
        return self._array(tensor_index).copy()

    def invoke(self) -> None:
        """Run the model; the first opmarket kernel error is raised with its message."""
        lib = _capi.lib()
        if not self._buffers:
            raise InvalidArgumentError("allocate_tensors() must be called before invoke()")
        n_in = len(self._io["inputs"])
        del self._errors[:]
        if len(self._buffers) > n_in and all(b is None for b in self._buffers[n_in:]):
            return  # every output is empty: nothing to compute, nothing LiteRT could hold
        empty = [
            f"{name!r} {list(self._arrays[index].shape)}"
            for (name, index), b in zip(
                [*self._io["inputs"], *self._io["outputs"]], self._buffers, strict=True
            )
            if b is None
        ]
        if empty:
            raise InvalidArgumentError(
                f"tensor {', '.join(empty)} has no elements: LiteRT makes no buffer for an "
                "empty tensor, so a model with one runs only when every output is empty"
            )
        values = [b.value for b in self._buffers]
        ins = (ctypes.c_void_p * max(n_in, 1))(*values[:n_in])
        outs = (ctypes.c_void_p * max(len(values) - n_in, 1))(*values[n_in:])
        status = lib.LiteRtRunCompiledModel(
            self._handles["compiled"], 0, n_in, ins, len(self._buffers) - n_in, outs
        )
        # LiteRT does not always pass a custom kernel's failure on: the kernels' own record
        # of it counts too.
        if status != _capi.STATUS_OK or self._errors:
            raise InvalidArgumentError(
                "; ".join(self._errors) or f"LiteRT failed to run the model (status {status})"
            )

    def _array(self, index: int) -> np.ndarray[Any, Any]:
        if index not in self._arrays:
            raise InvalidArgumentError(f"tensor {index} is not an allocated input or output")
        return self._arrays[index]

    def _free_buffers(self) -> None:
        lib = _capi.lib()
        for buf in self._buffers:
            if buf is not None:
                lib.LiteRtDestroyTensorBuffer(buf)
        self._buffers = []

    def __del__(self) -> None:
        try:
            lib = _capi.lib()
            self._free_buffers()
            h = self._handles
            for key, fn in (
                ("compiled", lib.LiteRtDestroyCompiledModel),
                ("options", lib.LiteRtDestroyOptions),
                ("model", lib.LiteRtDestroyModel),
                ("env", lib.LiteRtDestroyEnvironment),
            ):
                if h.get(key) is not None and h[key].value:
                    fn(h[key])
        except Exception:  # interpreter shutdown: nothing left to free into
            pass


def interpreter_from(
    model_path: str | os.PathLike[str] | None,
    model_content: bytes | None,
    kwargs: Mapping[str, Any],
) -> Interpreter:
    """The Interpreter for a path or bytes (exactly one)."""
    if (model_path is None) == (model_content is None):
        raise InvalidArgumentError("give exactly one of model_path and model_content")
    if model_path is not None:
        with open(model_path, "rb") as f:
            content = f.read()
    else:
        assert model_content is not None
        content = bytes(model_content)
    return Interpreter(content, **kwargs)
