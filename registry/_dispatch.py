"""Dispatch: kernel choice and the cache of prepared calls, per op.

A call binds its arguments (``_binding``), chooses the kernel for its device, type attrs and
label, and prepares an entry (``_entry``) kept under a key of the input dtypes, the attr
values with their types (lists as tuples, so that ``[1, 3]`` can be a key and ``1``, ``1.0``
and ``True`` are different keys) and the device scope; the generated wrapper (``_wrapper``)
finds it with one dict lookup. A change of input shapes runs the shape function (and
``prepare``) once. Every first call goes through :meth:`Dispatcher.slow_call`, which shares
one entry (one lifecycle kernel) among all spellings of an attr set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from opmarket.registry._binding import Binder, dtype_of, show_attr
from opmarket.registry._bounded import BoundedCache
from opmarket.registry._device import DEVICE_PREFERENCE, current_device, device, device_scope
from opmarket.registry._entry import Entry
from opmarket.registry._errors import KernelNotFoundError
from opmarket.registry._keys import typed
from opmarket.registry._signature import arg_dtypes, inferred_attrs
from opmarket.registry._wrapper import make_wrapper
from opmarket.sdk import InvalidArgumentError, OpDef
from opmarket.sdk._kernel import KernelSpec
from opmarket.sdk._shape_inference import InferenceContext, Shape

if TYPE_CHECKING:
    from opmarket.registry._registry import Registry

# device, current_device and dtype_of stay importable from here, where they used to live.
__all__ = ["DEVICE_PREFERENCE", "Dispatcher", "current_device", "device", "dtype_of"]

_MAX_ENTRIES = 1024


class Dispatcher:
    """Everything needed to call one op: its wrapper, its kernel choice and its caches."""

    def __init__(self, registry: Registry, op_def: OpDef) -> None:
        self.registry = registry
        self.op_def = op_def
        self.inferred = inferred_attrs(op_def)
        self.keyword_attrs = tuple(a for a in op_def.attrs if a.name not in self.inferred)
        self.binder = Binder(op_def)
        self.single_input = len(op_def.inputs) == 1 and not op_def.inputs[0].is_list
        # The wrappers' fast path (its keys spell inputs and attrs as calls do) and the
        # entries by bound attrs; an entry of the first is one of the second, so the second
        # overflowing closes both, while the first overflowing only forgets spellings.
        self.cache: BoundedCache[Any, Entry] = BoundedCache(_MAX_ENTRIES)
        self.graph_cache: BoundedCache[Any, Entry] = BoundedCache(_MAX_ENTRIES, self.invalidate)
        self._wrapper: Callable[..., Any] | None = None

    def invalidate(self) -> None:
        """Drop every prepared entry (kernels changed), closing lifecycle kernels."""
        for e in (*self.cache.data.values(), *self.graph_cache.data.values()):
            e.close()
        self.cache.clear()
        self.graph_cache.clear()

    def bind(
        self, inputs: Sequence[Any], given: Mapping[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """Inputs as arrays (one list per list argument) and every attr, inferred, defaulted
        and checked; InvalidArgumentError naming the op otherwise."""
        return self.binder.bind(inputs, given)

    # --- kernel choice -------------------------------------------------------------------

    def choose(self, attrs: Mapping[str, Any], device: str | None, label: str = "") -> KernelSpec:
        """The highest-priority kernel matching ``device`` (or the preferred device that has
        one), the type attrs and the label; KernelNotFoundError listing what exists."""
        kernels = self.registry.kernels(self.op_def.name)
        if device is not None:
            devices: Sequence[str] = (device,)
        else:
            devices = [
                *DEVICE_PREFERENCE,
                *dict.fromkeys(k.device for k in kernels if k.device not in DEVICE_PREFERENCE),
            ]
        for dev in devices:
            best: KernelSpec | None = None
            for k in kernels:
                if (
                    k.device == dev
                    and k.label == label
                    and _matches(k, attrs)
                    and (best is None or k.priority > best.priority)
                ):
                    best = k
            if best is not None:
                return best
        raise KernelNotFoundError(self._missing(attrs, device, label, kernels))

    def _missing(
        self,
        attrs: Mapping[str, Any],
        device: str | None,
        label: str,
        kernels: Sequence[KernelSpec],
    ) -> str:
        op = self.op_def
        types = [
            f"{a.name}={show_attr(attrs.get(a.name))}"
            for a in op.attrs
            if a.base_type == "type" and a.name in attrs
        ]
        where = f"on {device}" if device else f"on any of {', '.join(DEVICE_PREFERENCE)}"
        lines = [
            f"no kernel for {op.name} {where}"
            + (f" with {', '.join(types)}" if types else "")
            + (f" and label {label!r}" if label else "")
        ]
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
        c = InferenceContext(
            self.op_def, shapes, attrs, num_outputs=_num_outputs(self.op_def, attrs)
        )
        try:
            spec.fn(c)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"{self.op_def.name}: {exc}") from None
        return c.finish()

    def _shared_entry(
        self, attrs: dict[str, Any], device: str | None, label: str, kernel: KernelSpec | None
    ) -> tuple[Entry, bool, bool]:
        """The entry for bound ``attrs``, shared by every call that binds to them: (entry,
        created now, cached). An entry that is not cached is the caller's to close."""
        try:
            key: Any = (
                tuple(sorted((k, typed(v)) for k, v in attrs.items())),
                device,
                label,
                kernel,
            )
            entry = self.graph_cache.data.get(key)
        except TypeError:  # an attr value nothing makes hashable
            key, entry = None, None
        if entry is not None:
            return entry, False, True
        spec = kernel if kernel is not None else self.choose(attrs, device, label)
        entry = Entry(self, spec, attrs)
        if key is None:
            return entry, True, False
        self.graph_cache.put(key, entry)
        return entry, True, True

    def slow_call(self, inputs: tuple[Any, ...], given: dict[str, Any], key: Any = None) -> Any:
        """A wrapper call that missed the cache: bind, choose, prepare, remember, run.
        ``key`` is the wrapper's cache key for this call (None if it could not make one)."""
        bound, attrs = self.bind(inputs, given)
        dev = device_scope.get()
        entry, created, cached = self._shared_entry(attrs, dev, "", None)
        # Mode 1 hands the wrapper's own arguments to the kernel: right only while every
        # spelling that reaches this entry is exactly the bound value (no list for a tuple,
        # no int for a float).
        exact = (
            bool(entry.kw)
            and entry.kw.keys() == given.keys()
            and all(typed(v) == typed(entry.kw[k]) for k, v in given.items())
        )
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
                self.cache.put(key, entry)
        try:
            return entry.run(bound, _shapes(bound, self.single_input))
        finally:
            if not cached:
                entry.close()

    def call(
        self,
        inputs: Sequence[Any],
        attrs: Mapping[str, Any],
        *,
        device: str | None = None,
        label: str = "",
        kernel: KernelSpec | None = None,
    ) -> Any:
        """Run the op on ``inputs`` (one value or list per input argument) with ``attrs``
        (inferred ones may be given; they must agree); returns what the wrapper returns.
        ``kernel`` runs that kernel instead of the one dispatch would choose."""
        bound, full = self.bind(inputs, attrs)
        dev = device if device is not None else device_scope.get()
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
    flat = [s for x in bound for s in ([a.shape for a in x] if isinstance(x, list) else [x.shape])]
    return flat[0] if single_input else tuple(flat)


def _matches(k: KernelSpec, attrs: Mapping[str, Any]) -> bool:
    for name, types in k.constraints:
        v = attrs.get(name)
        if isinstance(v, tuple):
            if not all(t in types for t in v):
                return False
        elif v not in types:
            return False
    return True
