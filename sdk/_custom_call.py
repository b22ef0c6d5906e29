"""XLA-style custom-call targets: a named function per platform over raw buffers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from opmarket.sdk._kernel import declare

__all__ = ["PLATFORMS", "CustomCallTarget", "custom_call", "custom_call_target"]

#: XLA's platform names: ``Host`` (CPU) and ``CUDA``.
PLATFORMS: tuple[str, ...] = ("Host", "CUDA")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class CustomCallTarget:
    """``fn(out, inputs, opaque)`` writes its results into ``out`` (one array, or a tuple
    of arrays for a tuple result) from the list ``inputs``; ``opaque`` is the call's bytes."""

    name: str
    fn: Callable[[Any, list[Any], bytes], None]
    platform: str = "Host"


def custom_call_target(name: str, platform: str = "Host") -> Callable[[F], F]:
    """Declare the decorated function the custom-call target ``name`` on ``platform``
    (XLA_REGISTER_CUSTOM_CALL_TARGET_WITH_SYM)."""

    def decorate(fn: F) -> F:
        declare(fn, CustomCallTarget(name, fn, platform))
        return fn

    return decorate


def custom_call(target: str, inputs: Sequence[Any], result: Any, *, opaque: bytes = b"",
                platform: str = "Host") -> Any:
    """Call the registered custom-call target ``target`` on ``platform`` with the input
    buffers and fresh output buffers, as an XLA program does: ``result`` is ``(shape,
    dtype)`` for one output array, or a list of them for a tuple (see
    ``opmarket.registry.custom_call``, which this calls on the process's registry). For
    kernels, which import only ``opmarket.sdk``."""
    from opmarket.registry import custom_call as call  # the run time, when a kernel runs

    return call(target, inputs, result, opaque=opaque, platform=platform)
