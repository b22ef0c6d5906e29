"""Gradient declarations: ``register_gradient`` and ``not_differentiable`` (TensorFlow's).

A gradient function gets the forward op (its attrs, input and output values) and the
gradient of the loss for each output, and returns the gradient for each input (None where
an input has none), computed with numpy or ``opmarket.ops``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar

from opmarket.sdk._errors import InvalidArgumentError
from opmarket.sdk._kernel import declare
from opmarket.sdk._opdef import OpDef

__all__ = ["GradientFn", "GradientOp", "GradientSpec", "not_differentiable", "register_gradient"]


@dataclass(frozen=True, slots=True)
class GradientOp:
    """The forward op a gradient function differentiates."""

    op_def: OpDef
    inputs: tuple[Any, ...]
    outputs: tuple[Any, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    def get_attr(self, name: str) -> Any:
        """Attr ``name`` of the forward op (TensorFlow's ``op.get_attr``); KeyError if none."""
        return self.attrs[name]

    @property
    def type(self) -> str:
        """The forward op's registered name, e.g. ``Opm>ZeroOut`` (TensorFlow's ``op.type``)."""
        return self.op_def.name


GradientFn: TypeAlias = Callable[..., Any]

F = TypeVar("F", bound=GradientFn)


@dataclass(frozen=True, slots=True)
class GradientSpec:
    """A gradient for ``op``; ``fn`` None marks the op not differentiable."""

    op: str
    fn: GradientFn | None


def register_gradient(op: str) -> Callable[[F], F]:
    """Declare the decorated ``fn(op: GradientOp, *grads) -> grads for inputs`` the gradient
    of ``op``; one returned value may stand for a one-input op's list."""

    def decorate(fn: F) -> F:
        declare(fn, GradientSpec(op, fn))
        return fn

    return decorate


def not_differentiable(op: str) -> GradientSpec:
    """A declaration that ``op`` has no gradient: gradients stop there, as zeros."""
    return GradientSpec(op, None)


def as_input_grads(result: Any, count: int, op: str) -> Sequence[Any]:
    """A gradient function's result as one entry per input."""
    items = result if isinstance(result, (list, tuple)) else (result,)
    if len(items) != count:
        raise InvalidArgumentError(
            f"the gradient of {op} returned {len(items)} value(s) for {count} input(s)"
        )
    return items
