"""XLA-style custom-call targets: a named function per platform over raw buffers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from opmarket.sdk._errors import NotFoundError
from opmarket.sdk._kernel import declare

__all__ = ["PLATFORMS", "CustomCallTarget", "custom_call", "custom_call_target"]

#: XLA's platform names: ``Host`` (CPU) and ``CUDA``.
PLATFORMS: tuple[str, ...] = ("Host", "CUDA")

F = TypeVar("F", bound=Callable[..., Any])

# The run time's custom_call (opmarket.registry installs it when it is imported): the sdk
# imports nothing of ours, and a kernel only runs through the registry, so it is set by then.
_runner: list[Callable[..., Any]] = []


def install_runner(runner: Callable[..., Any]) -> None:
    """Install the run time's ``custom_call`` (what ``opmarket.registry`` does on import)."""
    _runner[:] = [runner]


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


def custom_call(
    target: str, inputs: Sequence[Any], result: Any, *, opaque: bytes = b"", platform: str = "Host"
) -> Any:
    """Call the registered custom-call target ``target`` on ``platform`` with the input
    buffers and fresh output buffers, as an XLA program does: ``result`` is ``(shape,
    dtype)`` for one output array, or a list of them for a tuple (see
    ``opmarket.registry.custom_call``, which this calls on the process's registry). For
    kernels, which import only ``opmarket.sdk``."""
    if not _runner:
        raise NotFoundError(
            f"custom_call({target!r}) needs opmarket's run time: import opmarket.registry"
        )
    return _runner[0](target, inputs, result, opaque=opaque, platform=platform)
