"""A call of one op prepared once: the public fast path that framework bridges share with
``opmarket.ops``.

``prepare(op, attrs, device, label)`` chooses the kernel and creates a lifecycle kernel once,
sharing the dispatcher's entry (and its lifecycle kernel) with every ``opmarket.ops`` call that
binds to the same attrs; the returned call then runs on arrays as the generated wrapper's fast
path does: the shape function (and ``prepare``) only on new input shapes, outputs checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from opmarket.registry._dispatch import Dispatcher, _shapes
from opmarket.registry._entry import Entry
from opmarket.registry._errors import KernelNotFoundError
from opmarket.registry._runtime import get_registry
from opmarket.sdk import InvalidArgumentError, OpDef
from opmarket.sdk._kernel import KernelSpec

__all__ = ["PreparedCall", "prepare"]

_MISS = object()


class PreparedCall:
    """``op`` with bound attrs on one device: call it with the op's inputs (numpy arrays, a
    list of them for a list argument); it returns what ``opmarket.ops.<op>`` returns."""

    __slots__ = ("_entry", "_nd", "_single", "kernel", "op_def")

    def __init__(self, op_def: OpDef, entry: Entry) -> None:
        self.op_def = op_def
        #: The kernel that runs.
        self.kernel: KernelSpec = entry.spec
        self._entry = entry
        self._single = entry.dispatcher.single_input
        self._nd = not any(a.is_list for a in op_def.inputs)

    def __call__(self, *inputs: Any) -> Any:
        entry = self._entry
        if not self._nd:  # list arguments: their shapes are a list's
            return entry.run(inputs, _shapes(inputs, self._single))
        shapes = inputs[0].shape if self._single else tuple(a.shape for a in inputs)
        lock = entry.lock
        if lock is not None:
            with lock:
                out = entry.fn(*inputs) if shapes == entry.shapes else _MISS
            if out is _MISS:
                return entry.run(inputs, shapes)
        elif shapes != entry.shapes:
            return entry.run(inputs, shapes)
        else:
            out = entry.fn(*inputs, **entry.kw)
        # As the generated wrapper: one array of the declared dtype needs no other check.
        if out.__class__ is np.ndarray and out.dtype is entry.odt:
            return out
        return entry.finish(out)

    def __repr__(self) -> str:
        return f"<PreparedCall {self.op_def.name} kernel={self.kernel.name}>"


def prepare(
    op: str | OpDef,
    attrs: Mapping[str, Any],
    device: str | None = None,
    label: str = "",
    *,
    kernel: KernelSpec | None = None,
) -> PreparedCall:
    """A call of the registered op ``op`` (its full name or OpDef) with ``attrs`` (every attr
    of the op, as ``Dispatcher.bind`` gives them) on ``device`` (None: the preferred device
    that has a kernel) with kernel ``label``, prepared once. ``kernel`` runs that kernel
    instead of the one dispatch chooses. KernelNotFoundError when no kernel serves it;
    InvalidArgumentError naming the attrs that are missing."""
    name = op if isinstance(op, str) else op.name
    dispatcher = get_registry().dispatcher(name)
    missing = [a.name for a in dispatcher.op_def.attrs if a.name not in attrs]
    if missing:
        raise InvalidArgumentError(
            f"prepare({name!r}): attrs {', '.join(missing)} are missing (give every attr, "
            "inferred ones included)"
        )
    bound = dict(attrs)
    spec = kernel if kernel is not None else dispatcher.choose(bound, device, label)
    # The wrapper's entries are keyed by its device scope (None outside ``opmarket.device``):
    # a call whose kernel is the one the wrapper would choose shares the wrapper's entry.
    if not label and _wrapper_choice(dispatcher, bound) is spec:
        entry, _, cached = dispatcher._shared_entry(bound, None, "", None)
    else:
        entry, _, cached = dispatcher._shared_entry(bound, device, label, spec)
    if not cached:
        # Attrs nothing makes hashable: no shared entry. A closed entry creates, prepares
        # and closes its lifecycle kernel on each call, so nothing is left open.
        entry.close()
    return PreparedCall(dispatcher.op_def, entry)


def _wrapper_choice(dispatcher: Dispatcher, attrs: dict[str, Any]) -> KernelSpec | None:
    try:
        return dispatcher.choose(attrs, None, "")
    except KernelNotFoundError:
        return None
