"""Run-time errors, each a subclass of the sdk's ``OpmarketError`` tree (see docs/runtime.md)."""

from __future__ import annotations

from collections.abc import Iterable

from opmarket.sdk import InvalidArgument, NotFound, OpmarketError

__all__ = [
    "AmbiguousOpName",
    "InvalidGraph",
    "KernelError",
    "KernelNotFound",
    "LibraryError",
    "RegistrationError",
]


class RegistrationError(OpmarketError, ValueError):
    """An op, kernel, gradient or target that conflicts with what is already registered."""


class KernelNotFound(NotFound):
    """No registered kernel matches an op's device and type attrs."""


class AmbiguousOpName(OpmarketError, AttributeError):  # named like NotFound
    """A short op name that more than one registered op has; the message names them all."""


class InvalidGraph(InvalidArgument):
    """A graph that does not validate against the op-set; ``problems`` lists every one."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems) or "invalid graph")


class KernelError(OpmarketError, RuntimeError):
    """A kernel that broke its contract: outputs of the wrong number, dtype or shape."""


class LibraryError(OpmarketError, ImportError):
    """A native library that cannot be loaded or declares nothing; the message names its path."""
