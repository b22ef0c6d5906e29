"""Run-time errors, each a subclass of the sdk's ``OpmarketError`` tree (see docs/runtime.md)."""

from __future__ import annotations

from collections.abc import Iterable

from opmarket.sdk import InvalidArgumentError, NotFoundError, OpmarketError

__all__ = [
    "AmbiguousOpNameError",
    "InvalidGraphError",
    "KernelError",
    "KernelNotFoundError",
    "LibraryError",
    "RegistrationError",
]


class RegistrationError(OpmarketError, ValueError):
    """An op, kernel, gradient or target that conflicts with what is already registered."""


class KernelNotFoundError(NotFoundError):
    """No registered kernel matches an op's device and type attrs."""


class AmbiguousOpNameError(OpmarketError, AttributeError):  # named like NotFoundError
    """A short op name that more than one registered op has; the message names them all."""


class InvalidGraphError(InvalidArgumentError):
    """A graph that does not validate against the op-set; ``problems`` lists every one."""

    def __init__(self, problems: Iterable[str]) -> None:
        self.problems: tuple[str, ...] = tuple(problems)
        super().__init__("\n".join(self.problems) or "invalid graph")


class KernelError(OpmarketError, RuntimeError):
    """A kernel that broke its contract: outputs of the wrong number, dtype or shape."""


class LibraryError(OpmarketError, ImportError):
    """A native library that cannot be loaded or declares nothing; the message names its path."""
