"""LiteRT's rows: a model holding the op (converted from a ``tf.function`` with
``allow_custom_ops``) run by ``opmarket.litert.interpreter(...).invoke()`` against the same
model run by LiteRT's CompiledModel with the op's custom code bound to a C custom-op kernel
(``litert_ops.cc``) through ``LiteRtAddCustomOpKernelOption``, the call the bridge makes."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from own_ops._common import Case, Row, Timing, build_library, measure, reported_path


def rows(timing: Timing) -> Iterator[str]:
    """The LiteRT invoke lines."""
    import ai_edge_litert
    import tensorflow as tf

    import opmarket.litert as olr
    import opmarket.tensorflow as otf

    folder = Path(ai_edge_litert.__file__).parent
    flags = [f"-L{folder}", "-l:libLiteRt.so", f"-Wl,-rpath,{folder}"]
    version = getattr(ai_edge_litert, "__version__", "")
    kernels = ctypes.CDLL(str(build_library("litert_ops", "litert_ops.cc", flags, version)))

    def convert(case: Case) -> bytes:
        op = getattr(otf.ops, case.op)
        spec = tf.TensorSpec(case.x.shape, tf.as_dtype(case.x.dtype))
        fn = tf.function(lambda v: op(v, **case.attrs), input_signature=[spec])
        converter = tf.lite.TFLiteConverter.from_concrete_functions(
            [fn.get_concrete_function()], fn
        )
        converter.allow_custom_ops = True
        content: bytes = converter.convert()
        return content

    def make(mode: str, case: Case) -> Row:
        content = convert(case)
        it = olr.interpreter(model_content=content)
        it.allocate_tensors()
        it.set_tensor(it.get_input_details()[0]["index"], case.x)
        out = it.get_output_details()[0]["index"]
        own = OwnModel(content, case, kernels)

        def ours() -> Any:
            it.invoke()
            return it

        return Row(
            ours,
            own.invoke,
            reported_path(olr, case, lambda: False),
            result=lambda r: it.get_tensor(out) if r is it else np.asarray(r),
        )

    yield from measure("LiteRT", ["invoke"], make, timing)


def renamed(content: bytes, name: str, to: str) -> bytes:
    """The model with custom code ``name`` renamed ``to``."""
    import flatbuffers

    from opmarket.litert._model import read_model

    model = read_model(content)
    for code in model.operatorCodes or []:
        if code.customCode is not None and code.customCode.decode() == name:
            code.customCode = to.encode()
    builder = flatbuffers.Builder(len(content) + 1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


class OwnModel:
    """The model with its op's custom code bound to the C kernel ``bench_litert_<op>``, run
    by LiteRtRunCompiledModel on host buffers made once; ``invoke`` returns the output."""

    def __init__(self, content: bytes, case: Case, kernels: ctypes.CDLL) -> None:
        from opmarket.litert import _capi

        lib = self._lib = _capi.lib()
        code = f"Bench{case.name.split('>')[-1]}"
        self._blob = renamed(content, case.name, code)
        self._attr = ctypes.c_int64(int(case.attrs.get("preserve_index", 0)))
        kernel = _capi.CustomOpKernel.in_dll(kernels, f"bench_litert_{case.op}")
        h = self._h = {k: ctypes.c_void_p() for k in ("env", "model", "options", "compiled")}
        check = _check
        check(lib.LiteRtCreateEnvironment(0, None, ctypes.byref(h["env"])))
        check(
            lib.LiteRtCreateModelFromBuffer(
                h["env"], self._blob, len(self._blob), ctypes.byref(h["model"])
            )
        )
        check(lib.LiteRtCreateOptions(ctypes.byref(h["options"])))
        check(lib.LiteRtSetOptionsHardwareAccelerators(h["options"], _capi.CPU))
        check(
            lib.LiteRtAddCustomOpKernelOption(
                h["options"], code.encode(), 1, ctypes.byref(kernel), ctypes.byref(self._attr)
            )
        )
        check(
            lib.LiteRtCreateCompiledModel(
                h["env"], h["model"], h["options"], ctypes.byref(h["compiled"])
            )
        )
        layout = (_capi.Layout * 1)()
        check(lib.LiteRtGetCompiledModelOutputTensorLayouts(h["compiled"], 0, 1, layout, True))
        out_shape = tuple(int(d) for d in layout[0].dimensions[: layout[0].rank])
        self._input = _aligned(case.x.shape, case.x.dtype)
        self._input[...] = case.x
        self._output = _aligned(out_shape, case.x.dtype)
        self._buffers = [self._buffer(a) for a in (self._input, self._output)]
        self._ins = (ctypes.c_void_p * 1)(self._buffers[0])
        self._outs = (ctypes.c_void_p * 1)(self._buffers[1])
        self._run = lib.LiteRtRunCompiledModel
        self._compiled = h["compiled"]

    def _buffer(self, array: np.ndarray[Any, Any]) -> Any:
        from opmarket.litert import _capi

        t = _capi.RankedTensorType()
        t.element_type = _capi.element_type_of(array.dtype)
        t.layout.rank = array.ndim
        for axis, d in enumerate(array.shape):
            t.layout.dimensions[axis] = d
        buf = ctypes.c_void_p()
        _check(
            self._lib.LiteRtCreateTensorBufferFromHostMemory(
                ctypes.byref(t), array.ctypes.data, array.nbytes, None, ctypes.byref(buf)
            )
        )
        return buf.value

    def invoke(self) -> np.ndarray[Any, Any]:
        _check(self._run(self._compiled, 0, 1, self._ins, 1, self._outs))
        return self._output


def _check(status: int) -> None:
    if status != 0:
        raise RuntimeError(f"LiteRT call failed (LiteRtStatus {status})")


def _aligned(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """A zeroed array with 64-byte aligned data, as LiteRT's host buffers must be."""
    nbytes = max(int(np.prod(shape, dtype=np.int64)), 1) * dtype.itemsize
    raw = np.zeros(nbytes + 64, np.uint8)
    offset = (-raw.ctypes.data) % 64
    return raw[offset : offset + nbytes].view(dtype)[: int(np.prod(shape))].reshape(shape)
