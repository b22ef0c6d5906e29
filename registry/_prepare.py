"""A call of one op prepared once: the public fast path that framework bridges share with
``opmarket.ops``.

``prepare(op, attrs, device, label)`` chooses the kernel and creates a lifecycle kernel once,
sharing the dispatcher's entry (and its lifecycle kernel) with every ``opmarket.ops`` call that
binds to the same attrs; the returned call then runs on arrays as the generated wrapper's fast
path does: the shape function (and ``prepare``) only on new input shapes, outputs checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, cast

import numpy as np

from opmarket.registry._dispatch import Dispatcher, _shapes
from opmarket.registry._entry import Entry
from opmarket.registry._errors import KernelNotFoundError
from opmarket.registry._runtime import get_registry
from opmarket.sdk import InvalidArgumentError, OpDef
from opmarket.sdk._kernel import KernelSpec

__all__ = ["PreparedCall", "prepare"]

_MISS = object()


class PreparedCall(Protocol):
    """What :func:`prepare` returns: call it with the op's inputs (numpy arrays, a list of
    them for a list argument); it returns what ``opmarket.ops.<op>`` returns."""

    #: The op.
    op_def: OpDef
    #: The kernel that runs.
    kernel: KernelSpec

    def __call__(self, *inputs: Any) -> Any: ...


def _call_of(op_def: OpDef, entry: Entry) -> PreparedCall:
    """The entry's call as a closure: the per-call path, as lean as the generated wrapper's."""
    single = entry.dispatcher.single_input
    fn, kw, lock = entry.fn, entry.kw, entry.lock
    run, finish, odt = entry.run, entry.finish, entry.odt
    nd = np.ndarray

    if any(a.is_list for a in op_def.inputs):  # list arguments: their shapes are a list's

        def call(*inputs: Any) -> Any:
            return run(inputs, _shapes(inputs, single))

    else:

        def call(*inputs: Any) -> Any:
            shapes = inputs[0].shape if single else tuple(a.shape for a in inputs)
            if lock is not None:
                with lock:
                    out = fn(*inputs) if shapes == entry.shapes else _MISS
                if out is _MISS:
                    return run(inputs, shapes)
            elif shapes != entry.shapes:
                return run(inputs, shapes)
            else:
                out = fn(*inputs, **kw)
            # As the generated wrapper: one array of the declared dtype needs no other check.
            if out.__class__ is nd and out.dtype is odt:
                return out
            return finish(out)

    call.op_def = op_def  # type: ignore[attr-defined]  # PreparedCall's attributes
    call.kernel = entry.spec  # type: ignore[attr-defined]
    return cast("PreparedCall", call)


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
    return _call_of(dispatcher.op_def, entry)


def _wrapper_choice(dispatcher: Dispatcher, attrs: dict[str, Any]) -> KernelSpec | None:
    try:
        return dispatcher.choose(attrs, None, "")
    except KernelNotFoundError:
        return None
