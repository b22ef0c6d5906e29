"""opmarket's exception tree: one base, each subclass also the builtin it refines."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "DocumentError",
    "InvalidArgumentError",
    "InvalidDeclarationError",
    "InvalidOpDefError",
    "NotFoundError",
    "OpmarketError",
    "Problem",
    "UnknownDTypeError",
]


class OpmarketError(Exception):
    """Base of every error opmarket raises on purpose."""


class UnknownDTypeError(OpmarketError, ValueError):
    """A value that names no dtype opmarket knows."""


class InvalidArgumentError(OpmarketError, ValueError):
    """A call got arguments its op does not accept (TensorFlow's InvalidArgumentError)."""


class NotFoundError(OpmarketError, LookupError):
    """An op, kernel or plugin that is not registered."""


class InvalidDeclarationError(OpmarketError, TypeError):
    """A decorator or ``register`` given something it cannot declare (not a function, a
    Kernel subclass or a declaration)."""


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an op definition, with where it was found."""

    message: str
    op: str = ""
    field: str = ""  # e.g. 'Attr("T: {float}")', 'input to_zero', 'doc'
    source: str = ""  # a file name, ``file:line``, or ``<python>``

    def __str__(self) -> str:
        where = ": ".join(p for p in (self.source, self.op and f"op {self.op}", self.field) if p)
        return f"{where}: {self.message}" if where else self.message


class InvalidOpDefError(OpmarketError, ValueError):
    """One or more op definitions are invalid; ``problems`` lists every one found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems) or "invalid op definition")


class DocumentError(OpmarketError, ValueError):
    """A file that cannot be read as any op-set format opmarket knows."""

    def __init__(self, source: str, message: str) -> None:
        self.source = source
        self.message = message
        super().__init__(f"{source}: {message}")


# What native kernels built against opmarket 0.1's kernel.h look up (by this name) to raise
# from OPM_REQUIRES: kept so that those compiled plugins keep working.
InvalidArgument = InvalidArgumentError
