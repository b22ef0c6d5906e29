"""A custom op's registration in LiteRT (one per op and distinct attr set): its plan (native
or Python) and, on the Python path, its custom-op kernel callbacks on LiteRT's buffers."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opmarket._bridge import BridgeOp, bridge_op, c_array, output_shapes, readonly_array
from opmarket.litert import _capi, _native
from opmarket.sdk import InvalidArgumentError, KernelSpec, OpDef, OpmarketError

__all__ = ["CustomOp", "check"]


@dataclass
class CustomOp:
    """One registration of a custom op: the nodes that share one set of attrs (their custom
    options). LiteRT's output-layout and run callbacks see only the registration, not the
    node, so each distinct attr set gets a registration (and custom code) of its own."""

    op: OpDef
    kernel: KernelSpec | None
    errors: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    struct: Any = None
    #: How it runs: natively (``why`` "") or through these Python callbacks (and why).
    native: _native.Plan = field(default_factory=lambda: _native.Plan("not planned"))
    #: The shim's registration (its custom-op kernel's user data) when native.
    registration: int = 0
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

    def make_struct(self, record: _native.ErrorRecord) -> tuple[Any, int]:
        """The custom-op kernel to register and its user data: the shim's callbacks and a
        registration of it when native, else these Python callbacks."""
        layouts = _capi.OUTPUT_LAYOUTS(self.output_layouts)
        if not self.native.why:
            self.struct = layouts  # the shim asks it only for an op with no C shape function
            self.registration = _native.register(
                bridge_op(self.op.name), self.native, layouts, record
            )
            return _native.kernel_struct(), self.registration
        self.struct = _capi.CustomOpKernel(
            _capi.INIT(self.init), layouts, _capi.RUN(self.run), _capi.DESTROY(self.destroy)
        )
        return self.struct, 0


def _buffer_type(lib: Any, buffer: Any) -> tuple[np.dtype[Any], tuple[int, ...]]:
    t = _capi.RankedTensorType()
    check(lib, lib.LiteRtGetTensorBufferTensorType(buffer, ctypes.byref(t)), "tensor type")
    dims = tuple(int(d) for d in t.layout.dimensions[: t.layout.rank])
    return _capi.numpy_of(t.element_type), dims


def _read(lib: Any, buffer: Any, locked: list[Any]) -> np.ndarray[Any, Any]:
    """A read-only view of an input buffer, locked for reading (added to ``locked``, which
    the caller unlocks once the outputs are written)."""
    dtype, dims = _buffer_type(lib, buffer)
    addr = ctypes.c_void_p()
    check(lib, lib.LiteRtLockTensorBuffer(buffer, ctypes.byref(addr), _capi.LOCK_READ), "lock")
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
    check(lib, lib.LiteRtLockTensorBuffer(buffer, ctypes.byref(addr), _capi.LOCK_WRITE), "lock")
    try:
        data = c_array(value)
        ctypes.memmove(addr.value or 0, data.ctypes.data, data.nbytes)
    finally:
        lib.LiteRtUnlockTensorBuffer(buffer)


def check(lib: Any, status: int, what: str) -> None:
    if status != _capi.STATUS_OK:
        raise OpmarketError(f"LiteRT {what} failed (LiteRtStatus {status})")
