"""XLA-style custom-call targets: a named function per platform over raw buffers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from opmarket.sdk._kernel import declare

__all__ = ["PLATFORMS", "CustomCallTarget", "custom_call_target"]

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
