"""PyTorch operator schemas generated from OpDefs: the text builder lives in
:mod:`opmarket._bridge._torch_schema` (torch-free, so compat-check compares schemas too)."""

from __future__ import annotations

from typing import Any

from opmarket._bridge._torch_schema import backward_schema, forward_schema
from opmarket.sdk import TensorShape

__all__ = ["backward_schema", "forward_schema", "shape_value"]


def shape_value(value: Any) -> Any:
    """A shape argument's value as opmarket reads it (-1 an unknown dim)."""
    if value is None:
        return None
    return TensorShape(tuple(int(d) for d in value))
