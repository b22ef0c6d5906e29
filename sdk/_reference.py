"""What conformance runs on: an op's reference implementation and its input generator."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from opmarket.sdk._kernel import declare

__all__ = ["InputGeneratorSpec", "ReferenceSpec", "input_generator", "reference"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class ReferenceSpec:
    """``fn(*inputs, **attrs)`` computes the op in plain numpy, the truth kernels match."""

    op: str
    fn: Callable[..., Any]


@dataclass(frozen=True, slots=True)
class InputGeneratorSpec:
    """``fn(rng, types) -> (inputs, attrs)``: valid random inputs and attrs for the op, given
    a ``numpy.random.Generator`` and the dtype for each type attr (``{"T": DType.FLOAT}``)."""

    op: str
    fn: Callable[..., tuple[list[Any], dict[str, Any]]]


def reference(op: str) -> Callable[[F], F]:
    """Declare the decorated numpy function the reference implementation of ``op``."""

    def decorate(fn: F) -> F:
        declare(fn, ReferenceSpec(op, fn))
        return fn

    return decorate


def input_generator(op: str) -> Callable[[F], F]:
    """Declare the decorated ``fn(rng, types) -> (inputs, attrs)`` the input generator of
    ``op``."""

    def decorate(fn: F) -> F:
        declare(fn, InputGeneratorSpec(op, fn))
        return fn

    return decorate
