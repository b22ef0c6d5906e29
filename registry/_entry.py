"""A prepared call: the chosen kernel with its attrs, its lifecycle and its lock, and the
checks of what it returns against the op's outputs and the shape function."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from opmarket.registry._binding import show_value
from opmarket.registry._errors import KernelError
from opmarket.registry._signature import arg_dtypes
from opmarket.sdk import OpDef
from opmarket.sdk._kernel import KernelSpec
from opmarket.sdk._shape_inference import Shape, format_shape

if TYPE_CHECKING:
    from opmarket.registry._dispatch import Dispatcher

__all__ = ["Entry"]


class Entry:
    """A prepared call: the chosen kernel with its attrs, for one cache key.

    A lifecycle kernel's instance is shared by every thread that calls with these attrs, and
    ``prepare`` leaves state that ``compute`` reads, so its shape check, ``prepare`` and
    ``compute`` run under the entry's lock; ``shapes`` are then the shapes it is prepared for
    (None while it is not). Function kernels hold no state and run without a lock.
    """

    __slots__ = (
        "attrs",
        "dispatcher",
        "fn",
        "instance",
        "kw",
        "lock",
        "mode",
        "odt",
        "out_dtypes",
        "shapes",
        "spec",
    )

    def __init__(self, dispatcher: Dispatcher, spec: KernelSpec, attrs: dict[str, Any]) -> None:
        self.dispatcher = dispatcher
        self.spec = spec
        self.attrs = attrs
        self.shapes: Any = None
        self.instance: Any = None
        self.lock: threading.Lock | None = None
        if spec.is_lifecycle:
            self.instance = spec.impl(attrs, spec.options)
            self.lock = threading.Lock()
            self.fn: Callable[..., Any] = self.instance.compute
            self.kw: dict[str, Any] = {}
        else:
            self.fn = spec.impl
            names = spec.attr_names
            self.kw = (
                {k: v for k, v in attrs.items() if not k.startswith("_")}
                if names is None
                else {k: attrs[k] for k in names if k in attrs}
            )
        # How the generated wrapper calls the kernel: 0 with **kw, 1 passing the wrapper's
        # own attr arguments by name (they are what the kernel takes), 2 with inputs only.
        self.mode = 0 if self.kw else 2
        outs = dispatcher.op_def.outputs
        self.out_dtypes = [arg_dtypes(a, attrs) for a in outs]
        single = len(outs) == 1 and not outs[0].is_list and self.out_dtypes[0]
        self.odt = single[0].numpy if single else None

    def run(self, inputs: Sequence[Any], shapes: Any) -> Any:
        """Call with input shapes new to this entry: shape function, (prepare,) compute."""
        if self.lock is not None:
            return self._run_lifecycle(inputs, shapes)
        inferred = self.dispatcher.infer(self._flat(shapes), self.attrs)
        out = self.finish(self.fn(*inputs, **self.kw), inferred)
        self.shapes = shapes
        return out

    def _flat(self, shapes: Any) -> list[Shape]:
        return [shapes] if self.dispatcher.single_input else list(shapes)

    def _run_lifecycle(self, inputs: Sequence[Any], shapes: Any) -> Any:
        assert self.lock is not None
        inferred: list[Shape] | None = None
        with self.lock:  # another thread may be between its prepare and its compute
            instance = self.instance
            if instance is None:  # closed by invalidate() while this call was on its way
                inferred = self.dispatcher.infer(self._flat(shapes), self.attrs)
                instance = self.spec.impl(self.attrs, self.spec.options)
                try:
                    instance.prepare(*inputs)
                    out = instance.compute(*inputs)
                finally:
                    instance.close()
            else:
                if shapes != self.shapes:
                    inferred = self.dispatcher.infer(self._flat(shapes), self.attrs)
                    self.shapes = None  # until prepare has finished
                    instance.prepare(*inputs)
                    self.shapes = shapes
                out = instance.compute(*inputs)
        return self.finish(out, inferred)

    def finish(self, out: Any, inferred: list[Shape] | None = None) -> Any:
        """Check ``out`` against the op's outputs; numpy scalars become arrays."""
        op = self.dispatcher.op_def
        n = len(op.outputs)
        if n == 0:
            return None
        items = (out,) if n == 1 else out
        if not isinstance(items, (tuple, list)) or len(items) != n:
            raise KernelError(
                f"{op.name}: kernel {self.spec.name} returned {show_value(out)}, "
                f"expected {n} outputs"
            )
        result: list[Any] = []
        flat_i = 0
        for arg, expected, value in zip(op.outputs, self.out_dtypes, items, strict=True):
            values = value if arg.is_list else (value,)
            if arg.is_list and not isinstance(value, (list, tuple)):
                raise KernelError(
                    f"{op.name}: kernel {self.spec.name} returned {show_value(value)} "
                    f"for list output {arg.name!r}"
                )
            if expected is not None and len(values) != len(expected):
                raise KernelError(
                    f"{op.name}: kernel {self.spec.name} returned "
                    f"{len(values)} tensors for output {arg.name!r}, expected "
                    f"{len(expected)}"
                )
            arrays = []
            for j, v in enumerate(values):
                a = v if isinstance(v, np.ndarray) else np.asarray(v)
                if expected is not None:
                    want = expected[j].numpy
                    if a.dtype != want:
                        raise KernelError(
                            f"{op.name}: kernel {self.spec.name} returned {a.dtype} for output "
                            f"{arg.name!r}, declared {expected[j].spec_name}"
                        )
                if inferred is not None and flat_i < len(inferred):
                    _check_shape(op, self.spec, arg.name, a.shape, inferred[flat_i])
                flat_i += 1
                arrays.append(a)
            result.append(arrays if arg.is_list else arrays[0])
        return result[0] if n == 1 else tuple(result)

    def close(self) -> None:
        if self.lock is None:
            return
        with self.lock:  # not while another thread computes with it
            if self.instance is not None:
                self.shapes = None
                self.instance.close()
                self.instance = None


def _check_shape(op: OpDef, spec: KernelSpec, name: str, got: tuple[int, ...], want: Shape) -> None:
    if want is None:
        return
    if len(want) != len(got) or any(
        w is not None and w != g for w, g in zip(want, got, strict=False)
    ):
        raise KernelError(
            f"{op.name}: kernel {spec.name} returned shape "
            f"{format_shape(tuple(got))} for output {name!r}; the shape "
            f"function says {format_shape(want)}"
        )
