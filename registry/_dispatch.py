"""Dispatch: generated Python wrappers, attr inference and checks, cached kernel choice.

The per-call path of a wrapper is generated code: one dict lookup keyed by the input dtypes,
the attr values with their types (lists as tuples, so that ``[1, 3]`` can be a key and ``1``,
``1.0`` and ``True`` are different keys) and the device scope finds a prepared entry (kernel
chosen, attrs checked, lifecycle kernel created); a change of input shapes runs the shape
function (and ``prepare``) once; outputs are checked against the declared dtypes. Everything
else, and every first call, goes through :meth:`Dispatcher.slow_call`, which shares one entry
(one lifecycle kernel) among all spellings of an attr set.
"""

from __future__ import annotations

import inspect
import keyword
import reprlib
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import numpy as np

from opmarket.registry._attrjson import coerce_attr
from opmarket.registry._errors import KernelError, KernelNotFound
from opmarket.registry._signature import arg_dtypes, inferred_attrs
from opmarket.sdk import (
    ArgDef,
    DType,
    InvalidArgument,
    OpDef,
    TensorShape,
    as_dtype,
    check_attr_value,
)
from opmarket.sdk._kernel import KernelSpec
from opmarket.sdk._shape_inference import InferenceContext, Shape, format_shape

if TYPE_CHECKING:
    from opmarket.registry._registry import Registry

__all__ = ["DEVICE_PREFERENCE", "Dispatcher", "current_device", "device"]

#: Where a call runs when no ``device()`` scope says: the first device with a kernel.
DEVICE_PREFERENCE: tuple[str, ...] = ("GPU", "CPU")

_device_scope: ContextVar[str | None] = ContextVar("opmarket_device", default=None)
_MAX_ENTRIES = 1024
_MISS = object()  # the generated wrapper's "not prepared for these shapes"


@contextmanager
def device(name: str) -> Iterator[None]:
    """Run the ops called inside on ``name`` (``"CPU"``, ``"GPU"``): ``with device("GPU"):``."""
    token = _device_scope.set(name.upper())
    try:
        yield
    finally:
        _device_scope.reset(token)


def current_device() -> str | None:
    """The device of the innermost ``device()`` scope, or None."""
    return _device_scope.get()


_np_to_dtype: dict[np.dtype[Any], DType] = {}


def dtype_of(array: Any) -> DType:
    npdt = array.dtype
    found = _np_to_dtype.get(npdt)
    if found is None:
        found = _np_to_dtype[npdt] = as_dtype(npdt)
    return found


class _Entry:
    """A prepared call: the chosen kernel with its attrs, for one cache key.

    A lifecycle kernel's instance is shared by every thread that calls with these attrs, and
    ``prepare`` leaves state that ``compute`` reads, so its shape check, ``prepare`` and
    ``compute`` run under the entry's lock; ``shapes`` are then the shapes it is prepared for
    (None while it is not). Function kernels hold no state and run without a lock.
    """

    __slots__ = ("attrs", "dispatcher", "fn", "instance", "kw", "lock", "mode", "odt",
                 "out_dtypes", "shapes", "spec")

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
            self.kw = {k: v for k, v in attrs.items() if not k.startswith("_")} if names is None \
                else {k: attrs[k] for k in names if k in attrs}
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
            raise KernelError(f"{op.name}: kernel {self.spec.name} returned {_show(out)}, "
                              f"expected {n} outputs")
        result: list[Any] = []
        flat_i = 0
        for arg, expected, value in zip(op.outputs, self.out_dtypes, items, strict=True):
            values = value if arg.is_list else (value,)
            if arg.is_list and not isinstance(value, (list, tuple)):
                raise KernelError(f"{op.name}: kernel {self.spec.name} returned {_show(value)} "
                                  f"for list output {arg.name!r}")
            if expected is not None and len(values) != len(expected):
                raise KernelError(f"{op.name}: kernel {self.spec.name} returned "
                                  f"{len(values)} tensors for output {arg.name!r}, expected "
                                  f"{len(expected)}")
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


def _check_shape(op: OpDef, spec: KernelSpec, name: str, got: tuple[int, ...],
                 want: Shape) -> None:
    if want is None:
        return
    if len(want) != len(got) or any(w is not None and w != g for w, g in zip(want, got,
                                                                               strict=False)):
        raise KernelError(f"{op.name}: kernel {spec.name} returned shape "
                          f"{format_shape(tuple(got))} for output {name!r}; the shape "
                          f"function says {format_shape(want)}")


def _show(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype}"
    return f"a {type(value).__name__}"


class Dispatcher:
    """Everything needed to call one op: its wrapper, its kernel choice and its caches."""

    def __init__(self, registry: Registry, op_def: OpDef) -> None:
        self.registry = registry
        self.op_def = op_def
        self.inferred = inferred_attrs(op_def)
        self.keyword_attrs = tuple(a for a in op_def.attrs if a.name not in self.inferred)
        self.single_input = len(op_def.inputs) == 1 and not op_def.inputs[0].is_list
        self.cache: dict[Any, _Entry] = {}
        self.graph_cache: dict[Any, _Entry] = {}
        self._wrapper: Callable[..., Any] | None = None

    def invalidate(self) -> None:
        """Drop every prepared entry (kernels changed), closing lifecycle kernels."""
        for e in (*self.cache.values(), *self.graph_cache.values()):
            e.close()
        self.cache.clear()
        self.graph_cache.clear()

    # --- binding inputs and attrs ------------------------------------------------------------

    def bind(self, inputs: Sequence[Any], given: Mapping[str, Any]) -> tuple[list[Any],
                                                                            dict[str, Any]]:
        """Inputs as arrays (one list per list argument) and every attr, inferred, defaulted
        and checked; InvalidArgument naming the op otherwise."""
        op = self.op_def
        if len(inputs) != len(op.inputs):
            raise InvalidArgument(f"{op.name} takes {len(op.inputs)} inputs, got {len(inputs)}")
        attrs: dict[str, Any] = {}
        for key, value in given.items():
            a = op.attr(key)
            if a is None:
                if key.startswith("_"):
                    attrs[key] = value
                    continue
                raise InvalidArgument(f"{op.name} has no attr {key!r}")
            try:
                attrs[key] = coerce_attr(value, a.type, strict=True)
            except (ValueError, TypeError) as exc:
                raise InvalidArgument(f"{op.name}: attr {key!r}: {exc}") from None
            if a.base_type == "type":
                attrs[key] = self._dtypes(key, attrs[key])
        bound: list[Any] = []
        for arg, value in zip(op.inputs, inputs, strict=True):
            bound.append(self._bind_arg(arg, value, attrs))
        for a in op.attrs:
            if a.name not in attrs:
                if a.default is None:
                    raise InvalidArgument(f"{op.name} needs attr {a.name!r} ({a.type})")
                attrs[a.name] = a.default
            problem = check_attr_value(attrs[a.name], a)
            if problem is not None:
                raise InvalidArgument(f"{op.name}: {problem}")
        return bound, attrs

    def _dtypes(self, name: str, value: Any) -> Any:
        """A type attr's value with TensorFlow's DataType numbers (``3``, as a TensorFlow
        file holds them) made DTypes, so that kernels only ever see DTypes; a bool is refused
        (it would pass as the number 0 or 1)."""
        if isinstance(value, tuple):
            return tuple(self._dtypes(name, v) for v in value)
        if isinstance(value, bool):
            raise InvalidArgument(f"{self.op_def.name}: attr {name!r}: expected a dtype "
                                  f"(np.int32, 'int32' or DType.INT32), got {value!r}")
        if isinstance(value, int) and not isinstance(value, DType) and (
                value in DType._value2member_map_):
            return DType(value)
        return value  # anything else is for check_attr_value to refuse

    def _bind_arg(self, arg: ArgDef, value: Any, attrs: dict[str, Any]) -> Any:
        op = self.op_def
        if arg.is_list:
            if not isinstance(value, (list, tuple)):
                raise InvalidArgument(f"{op.name}: input {arg.name!r} is a list of tensors, "
                                      f"got {_show(value)}")
            if arg.number_attr:
                self._set_inferred(arg.number_attr, len(value), arg, attrs)
            arrays = [self._convert(arg, v, attrs) for v in value]
            if arg.type_list_attr:
                self._set_inferred(arg.type_list_attr, tuple(dtype_of(a) for a in arrays), arg,
                                   attrs)
            return arrays
        return self._convert(arg, value, attrs)

    def _convert(self, arg: ArgDef, value: Any, attrs: dict[str, Any]) -> Any:
        op = self.op_def
        want: DType | None = arg.type.base if arg.type is not DType.INVALID else None
        if arg.type_attr and isinstance(attrs.get(arg.type_attr), DType):
            want = attrs[arg.type_attr]
        if isinstance(value, np.ndarray):
            array = value
        elif isinstance(value, np.generic):
            array = np.asarray(value)
        else:
            array = self._from_python(arg, value, want)
        try:
            got = dtype_of(array)
        except Exception:
            raise InvalidArgument(f"{op.name}: input {arg.name!r} has dtype {array.dtype}, "
                                  "which opmarket has no type for") from None
        if arg.type_attr:
            self._set_inferred(arg.type_attr, got, arg, attrs)
        elif want is not None and got is not want:
            raise InvalidArgument(f"{op.name}: input {arg.name!r} must be {want.spec_name}, "
                                  f"got {got.spec_name}")
        return array

    def _from_python(self, arg: ArgDef, value: Any, want: DType | None) -> Any:
        """A Python value (a number, a list of them) as an array of the type the input takes;
        converted only where no value changes (see :meth:`_cast`)."""
        if want is not None and want.numpy is not None and want.numpy.kind == "O":
            return np.asarray(value, dtype=want.numpy)  # strings: Python objects as they are
        try:
            array = np.asarray(value)
        except (ValueError, TypeError, OverflowError) as exc:  # ragged lists, odd objects
            raise InvalidArgument(f"{self.op_def.name}: input {arg.name!r}: cannot make an "
                                  f"array of {_brief(value)}: {exc}") from None
        if want is not None and want.numpy is not None:
            return self._cast(arg, value, array, want, want.spec_name)
        attr = self.op_def.attr(arg.type_attr) if arg.type_attr else None
        if attr is None:
            return array
        candidates = [t for t in (attr.default, *(attr.allowed_values or ())) if t is not None]
        if not candidates or _np_dtype_ok(array.dtype, candidates):
            return array
        same_kind = [t for t in candidates if t.numpy is not None and t.numpy.kind ==
                     array.dtype.kind]
        pick = same_kind[0] if same_kind else candidates[0]
        if pick.numpy is None:
            return array
        allowed = ", ".join(t.spec_name for t in dict.fromkeys(candidates))
        return self._cast(arg, value, array, pick, f"one of {allowed}")

    def _cast(self, arg: ArgDef, value: Any, array: Any, want: DType, expected: str) -> Any:
        """``array`` (made from the Python ``value``) as ``want``: a cast numpy calls
        same-kind that keeps every value (in range; finite stays finite), or any numeric
        cast that gives back exactly the numbers written (``[1.0, 2.0]`` to int32);
        InvalidArgument naming the op and the input otherwise."""
        npdt = want.numpy
        assert npdt is not None
        if array.dtype == npdt:
            return array
        op = self.op_def.name
        if array.dtype.kind not in "biuf":
            raise InvalidArgument(f"{op}: input {arg.name!r} must be {expected}, "
                                  f"got {_brief(value)}")
        same_kind = bool(np.can_cast(array.dtype, npdt, "same_kind"))
        if same_kind or (array.dtype.kind != "b" and not _inexact(npdt)):
            with np.errstate(all="ignore"):  # overflow is judged below, not warned about
                cast = array.astype(npdt)
                if same_kind and _inexact(npdt):
                    fits = bool(np.all(np.isfinite(cast) | ~np.isfinite(array)))
                else:
                    fits = bool(np.array_equal(cast.astype(array.dtype), array))
            if fits:
                return cast
        raise InvalidArgument(f"{op}: input {arg.name!r} must be {expected}; {_brief(value)} "
                              f"({array.dtype}) does not convert to {want.spec_name} without "
                              "changing its values")

    def _set_inferred(self, name: str, value: Any, arg: ArgDef, attrs: dict[str, Any]) -> None:
        have = attrs.get(name)
        if have is None:
            attrs[name] = value
        elif have != value:
            raise InvalidArgument(
                f"{self.op_def.name}: input {arg.name!r} makes {name}={_show_attr(value)}, "
                f"but {name} is {_show_attr(have)}"
            )

    # --- kernel choice -------------------------------------------------------------------

    def choose(self, attrs: Mapping[str, Any], device: str | None, label: str = "") -> KernelSpec:
        """The highest-priority kernel matching ``device`` (or the preferred device that has
        one), the type attrs and the label; KernelNotFound listing what exists."""
        kernels = self.registry.kernels(self.op_def.name)
        if device is not None:
            devices: Sequence[str] = (device,)
        else:
            devices = [*DEVICE_PREFERENCE,
                       *dict.fromkeys(k.device for k in kernels if k.device not in
                                      DEVICE_PREFERENCE)]
        for dev in devices:
            best: KernelSpec | None = None
            for k in kernels:
                if k.device == dev and k.label == label and _matches(k, attrs) and (
                        best is None or k.priority > best.priority):
                    best = k
            if best is not None:
                return best
        raise KernelNotFound(self._missing(attrs, device, label, kernels))

    def _missing(self, attrs: Mapping[str, Any], device: str | None, label: str,
                 kernels: Sequence[KernelSpec]) -> str:
        op = self.op_def
        types = [f"{a.name}={_show_attr(attrs.get(a.name))}" for a in op.attrs
                 if a.base_type == "type" and a.name in attrs]
        where = f"on {device}" if device else f"on any of {', '.join(DEVICE_PREFERENCE)}"
        lines = [f"no kernel for {op.name} {where}" + (f" with {', '.join(types)}" if types
                                                       else "")
                 + (f" and label {label!r}" if label else "")]
        if kernels:
            lines.append("  registered kernels:")
            lines.extend(f"    {k.describe()}" for k in kernels)
        else:
            lines.append("  no kernels are registered for this op")
        return "\n".join(lines)

    # --- calls -----------------------------------------------------------------------------

    def infer(self, shapes: list[Shape], attrs: Mapping[str, Any]) -> list[Shape] | None:
        """Output shapes from the registered shape function (None without one)."""
        spec = self.registry.shape_fn(self.op_def.name)
        if spec is None:
            return None
        c = InferenceContext(self.op_def, shapes, attrs, num_outputs=_num_outputs(
            self.op_def, attrs))
        try:
            spec.fn(c)
        except InvalidArgument as exc:
            raise InvalidArgument(f"{self.op_def.name}: {exc}") from None
        return c.finish()

    def _shared_entry(self, attrs: dict[str, Any], device: str | None, label: str,
                      kernel: KernelSpec | None) -> tuple[_Entry, bool, bool]:
        """The entry for bound ``attrs``, shared by every call that binds to them: (entry,
        created now, cached). An entry that is not cached is the caller's to close."""
        try:
            key: Any = (tuple(sorted((k, _typed(v)) for k, v in attrs.items())), device, label,
                        kernel)
            entry = self.graph_cache.get(key)
        except TypeError:  # an attr value nothing makes hashable
            key, entry = None, None
        if entry is not None:
            return entry, False, True
        spec = kernel if kernel is not None else self.choose(attrs, device, label)
        entry = _Entry(self, spec, attrs)
        if key is None:
            return entry, True, False
        if len(self.graph_cache) >= _MAX_ENTRIES:
            self.invalidate()
        self.graph_cache[key] = entry
        return entry, True, True

    def slow_call(self, inputs: tuple[Any, ...], given: dict[str, Any],
                  key: Any = None) -> Any:
        """A wrapper call that missed the cache: bind, choose, prepare, remember, run.
        ``key`` is the wrapper's cache key for this call (None if it could not make one)."""
        bound, attrs = self.bind(inputs, given)
        dev = _device_scope.get()
        if len(self.cache) >= _MAX_ENTRIES:
            self.invalidate()
        entry, created, cached = self._shared_entry(attrs, dev, "", None)
        # Mode 1 hands the wrapper's own arguments to the kernel: right only while every
        # spelling that reaches this entry is exactly the bound value (no list for a tuple,
        # no int for a float).
        exact = bool(entry.kw) and entry.kw.keys() == given.keys() and all(
            _typed(v) == _typed(entry.kw[k]) for k, v in given.items())
        if created and exact:
            entry.mode = 1
        elif entry.mode == 1 and not exact:
            entry.mode = 0
        if key is not None and cached and all(isinstance(x, np.ndarray) for x in inputs):
            try:
                hash(key)
            except TypeError:
                pass
            else:
                self.cache[key] = entry
        try:
            return entry.run(bound, _shapes(bound, self.single_input))
        finally:
            if not cached:
                entry.close()

    def call(self, inputs: Sequence[Any], attrs: Mapping[str, Any], *,
             device: str | None = None, label: str = "",
             kernel: KernelSpec | None = None) -> Any:
        """Run the op on ``inputs`` (one value or list per input argument) with ``attrs``
        (inferred ones may be given; they must agree); returns what the wrapper returns.
        ``kernel`` runs that kernel instead of the one dispatch would choose."""
        bound, full = self.bind(inputs, attrs)
        dev = device if device is not None else _device_scope.get()
        entry, _, cached = self._shared_entry(full, dev, label, kernel)
        shapes = _shapes(bound, self.single_input)
        try:
            if entry.lock is not None or shapes != entry.shapes:
                return entry.run(bound, shapes)
            return entry.finish(entry.fn(*bound, **entry.kw))
        finally:
            if not cached:
                entry.close()

    # --- the generated wrapper -------------------------------------------------------------

    @property
    def wrapper(self) -> Callable[..., Any]:
        if self._wrapper is None:
            self._wrapper = make_wrapper(self)
        return self._wrapper


def _num_outputs(op: OpDef, attrs: Mapping[str, Any]) -> int:
    n = 0
    for a in op.outputs:
        types = arg_dtypes(a, attrs)
        n += len(types) if types is not None else 1
    return n


def _shapes(bound: Sequence[Any], single_input: bool) -> Any:
    """The input shapes as an entry remembers them: one shape for a single input."""
    flat = [s for x in bound for s in ([a.shape for a in x] if isinstance(x, list)
                                       else [x.shape])]
    return flat[0] if single_input else tuple(flat)


def _typed(value: Any) -> Any:
    """``value`` with its type, and each item's for a list or tuple: a cache key under which
    ``1``, ``1.0`` and ``True`` differ, as their checks do, and a list can be hashed."""
    cls = value.__class__
    if cls is list or cls is tuple:
        items = tuple(value)
        types = tuple(map(type, items))
        if list in types or tuple in types:
            return (cls, *map(_typed, items))
        return (cls, items, types)
    return (cls, value)


def _inexact(npdt: np.dtype[Any]) -> bool:
    """Whether ``npdt`` is a floating or complex type (ml_dtypes' floats too)."""
    if npdt.kind in "fc":
        return True
    import ml_dtypes  # deferred, as opmarket.sdk does: only Python values reach here

    try:
        ml_dtypes.finfo(npdt)  # type: ignore[no-untyped-call]  # ml_dtypes ships no types here
    except ValueError:
        return False
    return True


def _brief(value: Any) -> str:
    """``value`` for a message, shortened as reprlib does."""
    return reprlib.repr(value)


def _np_dtype_ok(npdt: np.dtype[Any], candidates: Sequence[DType]) -> bool:
    return any(t.numpy == npdt for t in candidates)


def _show_attr(v: Any) -> str:
    if isinstance(v, DType):
        return v.spec_name
    if isinstance(v, TensorShape):
        return str(v)  # [2,?] or <unknown>, not the dataclass repr
    if isinstance(v, tuple):
        return "[" + ", ".join(_show_attr(x) for x in v) + "]"
    return repr(v)


def _matches(k: KernelSpec, attrs: Mapping[str, Any]) -> bool:
    for name, types in k.constraints:
        v = attrs.get(name)
        if isinstance(v, tuple):
            if not all(t in types for t in v):
                return False
        elif v not in types:
            return False
    return True


def _py_name(name: str, taken: set[str]) -> str:
    out = name
    while keyword.iskeyword(out) or out in taken or out.startswith("_"):
        out = out + "_" if not out.startswith("_") else "a" + out
    taken.add(out)
    return out


def make_wrapper(d: Dispatcher) -> Callable[..., Any]:
    """Generate the op's Python function: inputs positional, non-inferred attrs keyword-only
    with their defaults, the fast path inline."""
    op = d.op_def
    taken: set[str] = set()
    ins = [_py_name(a.name, taken) for a in op.inputs]
    attrs = [(a, _py_name(a.name, taken)) for a in d.keyword_attrs]
    env: dict[str, Any] = {"_cache": d.cache, "_slow": d.slow_call, "_nd": np.ndarray,
                           "_dev": _device_scope.get, "_typed": _typed, "_miss": _MISS}
    params = list(ins)
    if attrs:
        params.append("*")
    for i, (a, py) in enumerate(attrs):
        if a.default is None:
            params.append(py)
        else:
            env[f"_d{i}"] = a.default
            params.append(f"{py}=_d{i}")
    in_tuple = "".join(f"{x}, " for x in ins)
    attr_dict = "{" + ", ".join(f"{a.name!r}: {py}" for a, py in attrs) + "}"
    simple = not any(a.is_list for a in op.inputs)
    lines = [f"def {op.python_name}({', '.join(params)}):"]
    if simple:
        # The key holds each attr's type beside its value (a list attr's items too, as a
        # tuple): slow_call files the entry under exactly this key.
        key = "".join(f"{x}.dtype, " for x in ins) + "".join(
            f"_typed({py}), " if a.is_list else f"{py}.__class__, {py}, " for a, py in attrs)
        shape = f"{ins[0]}.shape" if d.single_input else "(" + "".join(
            f"{x}.shape, " for x in ins) + ")"
        single_out = len(op.outputs) == 1 and not op.outputs[0].is_list
        lines += [
            "    _k = None",
            "    try:",
            f"        _k = ({key}_dev())",
            "        _e = _cache[_k]",
            "    except (KeyError, AttributeError, TypeError):",
            f"        return _slow(({in_tuple}), {attr_dict}, _k)",
            f"    _s = {shape}",
            "    _l = _e.lock",
            "    if _l is not None:",  # a lifecycle kernel: check and compute under its lock
            "        with _l:",
            f"            _o = _e.fn({', '.join(ins)}) if _s == _e.shapes else _miss",
            "        if _o is _miss:",
            f"            return _e.run(({in_tuple}), _s)",
            "    elif _s != _e.shapes:",
            f"        return _e.run(({in_tuple}), _s)",
        ]
        pass_attrs = ", ".join([*ins, *(f"{a.name}={py}" for a, py in attrs)])
        lines += [
            "    else:",
            "        _m = _e.mode",
            "        if _m == 1:",
            f"            _o = _e.fn({pass_attrs})",
            "        elif _m == 2:",
            f"            _o = _e.fn({', '.join(ins)})",
            "        else:",
            f"            _o = _e.fn({''.join(f'{x}, ' for x in ins)}**_e.kw)",
        ]
        if single_out:
            lines += [
                "    if _o.__class__ is not _nd or _o.dtype is not _e.odt:",
                "        return _e.finish(_o)",
                "    return _o",
            ]
        else:
            lines.append("    return _e.finish(_o)")
    else:
        lines.append(f"    return _slow(({in_tuple}), {attr_dict})")
    exec("\n".join(lines), env)  # generated from the OpDef; names are sanitized above
    fn: Callable[..., Any] = env[op.python_name]
    fn.__doc__ = docstring(op, d)
    fn.__module__ = "opmarket.ops"
    fn.__qualname__ = op.python_name
    fn.__annotations__ = {}
    fn.__opmarket_op__ = op.name  # type: ignore[attr-defined]  # for introspection
    inspect.signature(fn)  # fail here, not at a user's call, if the signature is broken
    return fn


def docstring(op: OpDef, d: Dispatcher) -> str:
    """Summary, description, then Args (inputs and keyword attrs) and Returns."""
    lines = [op.summary or f"The {op.name} op.", ""]
    if op.description:
        lines += [op.description, ""]
    if op.inputs or d.keyword_attrs:
        lines.append("Args:")
    for a in op.inputs:
        lines.append(f"    {a.name}: {_arg_type(op, a)}." + (f" {a.description}" if
                                                          a.description else ""))
    for attr in d.keyword_attrs:
        text = f"    {attr.name}: {attr.type}"
        if attr.has_minimum:
            text += f" >= {attr.minimum}"
        if attr.allowed_values is not None:
            text += " in {" + ", ".join(_show_attr(v) for v in attr.allowed_values) + "}"
        text += f", default {_show_attr(attr.default)}" if attr.default is not None \
            else ", required"
        text += "." + (f" {attr.description}" if attr.description else "")
        lines.append(text)
    if op.outputs:
        lines += ["", "Returns:"]
        lines += [f"    {a.name}: {_arg_type(op, a)}." + (f" {a.description}" if
                                                           a.description else "")
                  for a in op.outputs]
    return "\n".join(lines).rstrip() + "\n"


def _arg_type(op: OpDef, a: ArgDef) -> str:
    if a.type_list_attr:
        return f"A list of tensors with types {a.type_list_attr}"
    if a.type is not DType.INVALID:
        kind = f"A tensor of type {a.type.spec_name}"
    else:
        attr = op.attr(a.type_attr)
        allowed = attr.allowed_values if attr else None
        kind = f"A tensor of type {a.type_attr}" + (
            " in {" + ", ".join(_show_attr(v) for v in allowed) + "}" if allowed else "")
    if a.number_attr:
        kind = f"A list of {a.number_attr} tensors, each " + kind[2:].replace("tensor of ", "of ")
    return kind
