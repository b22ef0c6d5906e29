"""A LiteRT model with opmarket custom ops, run by LiteRT's CompiledModel with opmarket's
kernels registered as custom-op kernels (``LiteRtAddCustomOpKernelOption``), behind the
interpreter's usual methods."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from opmarket._bridge import OpResolver, bridge_op, load_all, registry
from opmarket.litert import _capi, _native
from opmarket.litert._custom import CustomOp, check
from opmarket.litert._model import (
    SCHEMA_TYPES,
    attr_sets,
    attrs_from_options,
    custom_ops_of,
    input_dtypes,
    read_model,
    text,
)
from opmarket.sdk import InvalidArgumentError, KernelSpec, NotFoundError

__all__ = ["Interpreter", "custom_ops_of"]


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
        #: The native kernels' record of their first failure (see ``_failures``).
        self._record = _native.ErrorRecord()
        self._ops = self._resolve()
        self._io = self._signature()
        self._arrays: dict[int, np.ndarray[Any, Any]] = {}
        self._buffers: list[Any] = []
        self._run_args: tuple[Any, ...] | None = None
        self._run = _capi.lib().LiteRtRunCompiledModel
        self._handles: dict[str, Any] = {}
        self._create()

    # --- set-up ------------------------------------------------------------------------

    def _resolve(self) -> list[tuple[str, int, CustomOp]]:
        """One registration per custom op and distinct attr set (see ``attr_sets``)."""
        load_all()
        resolver = OpResolver.from_registry(registry())
        self._content, sets = attr_sets(self._content)
        dtype_rows = input_dtypes(self._content)
        ops: list[tuple[str, int, CustomOp]] = []
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
            custom = CustomOp(op, spec, self._errors, attrs)
            custom.native = _native.plan(bridge_op(name), attrs, dtype_rows.get(code, []), spec)
            ops.append((code, version, custom))
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
        check(lib, lib.LiteRtCreateEnvironment(0, None, ctypes.byref(h["env"])), "environment")
        self._blob = ctypes.create_string_buffer(self._content, len(self._content))
        check(
            lib,
            lib.LiteRtCreateModelFromBuffer(
                h["env"], self._blob, len(self._content), ctypes.byref(h["model"])
            ),
            "model",
        )
        check(lib, lib.LiteRtCreateOptions(ctypes.byref(h["options"])), "options")
        check(lib, lib.LiteRtSetOptionsHardwareAccelerators(h["options"], _capi.CPU), "options")
        for name, version, custom in self._ops:
            struct, user_data = custom.make_struct(self._record)
            check(
                lib,
                lib.LiteRtAddCustomOpKernelOption(
                    h["options"], name.encode(), version, ctypes.byref(struct), user_data or None
                ),
                f"custom op {name}",
            )
        status = lib.LiteRtCreateCompiledModel(
            h["env"], h["model"], h["options"], ctypes.byref(h["compiled"])
        )
        if status != _capi.STATUS_OK or self._failures():
            raise InvalidArgumentError(
                "LiteRT could not compile the model: "
                + ("; ".join(self._failures()) or f"status {status}")
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
        if status != _capi.STATUS_OK or self._failures():
            raise InvalidArgumentError(
                "LiteRT could not size the model's outputs: "
                + ("; ".join(self._failures()) or f"status {status}")
            )
        return [tuple(int(d) for d in layouts[i].dimensions[: layouts[i].rank]) for i in range(n)]

    def _failures(self) -> list[str]:
        """The kernels' failures since the last clear: the Python callbacks' and the first
        of the native kernels'."""
        found = list(self._errors)
        if self._record.failed:
            found.append(self._record.message.decode(errors="replace"))
        return found

    def native_paths(self) -> dict[str, str]:
        """Each custom code of the model (``Opm>ZeroOut``, ``Opm>ZeroOut#1`` for a second
        attr set): "native", or "python: " and why its kernel runs through Python."""
        return {
            code: "native" if not c.native.why else f"python: {c.native.why}"
            for code, _, c in self._ops
        }

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
            check(
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
        self._run_args = self._run_arguments()

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
        if self._run_args is None:
            self._no_run()
            return
        status = self._run(*self._run_args)
        # LiteRT does not always pass a custom kernel's failure on: the kernels' own record
        # of it counts too. Both are empty before each run: a failure clears them as it is
        # raised.
        if status != _capi.STATUS_OK or self._errors or self._record.failed:
            failures = self._failures()
            del self._errors[:]
            self._record.failed = 0
            raise InvalidArgumentError(
                "; ".join(failures) or f"LiteRT failed to run the model (status {status})"
            )

    def _no_run(self) -> None:
        """invoke() where LiteRT cannot run: before allocate_tensors(), or with an empty
        tensor (nothing to do when every output is empty)."""
        if not self._buffers:
            raise InvalidArgumentError("allocate_tensors() must be called before invoke()")
        n_in = len(self._io["inputs"])
        if len(self._buffers) > n_in and all(b is None for b in self._buffers[n_in:]):
            return  # every output is empty: nothing to compute, nothing LiteRT could hold
        empty = [
            f"{name!r} {list(self._arrays[index].shape)}"
            for (name, index), b in zip(
                [*self._io["inputs"], *self._io["outputs"]], self._buffers, strict=True
            )
            if b is None
        ]
        raise InvalidArgumentError(
            f"tensor {', '.join(empty)} has no elements: LiteRT makes no buffer for an "
            "empty tensor, so a model with one runs only when every output is empty"
        )

    def _run_arguments(self) -> tuple[Any, ...] | None:
        """LiteRtRunCompiledModel's arguments for the allocated buffers; None when one is
        missing (an empty tensor)."""
        if not self._buffers or any(b is None for b in self._buffers):
            return None
        n_in = len(self._io["inputs"])
        values = [b.value for b in self._buffers]
        ins = (ctypes.c_void_p * max(n_in, 1))(*values[:n_in])
        outs = (ctypes.c_void_p * max(len(values) - n_in, 1))(*values[n_in:])
        return (self._handles["compiled"], 0, n_in, ins, len(values) - n_in, outs)

    def _array(self, index: int) -> np.ndarray[Any, Any]:
        if index not in self._arrays:
            raise InvalidArgumentError(f"tensor {index} is not an allocated input or output")
        return self._arrays[index]

    def _free_buffers(self) -> None:
        lib = _capi.lib()
        self._run_args = None
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
            for _, _, custom in self._ops:  # LiteRT has run every node's Destroy by now
                if custom.registration:
                    _native.free(custom.registration)
                    custom.registration = 0
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
