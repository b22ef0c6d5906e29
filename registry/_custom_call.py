"""Custom calls (XLA's idea): call a named target on numpy buffers, tuple results included."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from opmarket.registry._registry import Registry
from opmarket.registry._runtime import registry_or_default
from opmarket.sdk import NotFoundError
from opmarket.sdk._custom_call import CustomCallTarget, install_runner

__all__ = ["custom_call", "register_custom_call_target"]

ResultSpec = tuple[Sequence[int], Any]


def register_custom_call_target(
    name: str,
    fn: Callable[[Any, list[Any], bytes], None],
    platform: str = "Host",
    *,
    registry: Registry | None = None,
) -> None:
    """Register ``fn(out, inputs, opaque)`` as target ``name`` on ``platform``."""
    reg = registry_or_default(registry)
    reg.register(CustomCallTarget(name, fn, platform), source=f"custom call {name}")


def custom_call(
    target: str,
    inputs: Sequence[Any],
    result: ResultSpec | list[ResultSpec],
    *,
    opaque: bytes = b"",
    platform: str = "Host",
    registry: Registry | None = None,
) -> Any:
    """Call ``target`` with input buffers and freshly allocated output buffers.

    ``result`` is ``(shape, dtype)`` for one output array, or a list of them for a tuple
    result (XLA's tuple-shaped custom call: the target gets a tuple of buffers, and may use
    some as scratch). Returns the output array, or the tuple.
    """
    reg = registry_or_default(registry)
    found = reg.custom_call_target(target, platform)
    if found is None:
        have = sorted(f"{t.name} ({t.platform})" for t in reg.custom_call_targets())
        listed = ", ".join(have) if have else "none"
        raise NotFoundError(f"no custom-call target {target!r} on {platform}; registered: {listed}")
    ins = [np.ascontiguousarray(x) for x in inputs]
    specs = result if isinstance(result, list) else [result]
    outs = tuple(np.zeros(tuple(shape), dtype=np.dtype(dtype)) for shape, dtype in specs)
    out: Any = outs if isinstance(result, list) else outs[0]
    found.fn(out, ins, bytes(opaque))
    return out


# Kernels call custom-call targets through opmarket.sdk.custom_call, which imports nothing of
# the run time: hand it this one (importing the registry is what makes kernels runnable).
install_runner(custom_call)
