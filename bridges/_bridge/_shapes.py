"""Output shapes from an op's shape function, on static input shapes: what every bridge asks
before it runs a kernel (TensorFlow's shape inference, LiteRT's Prepare, tracing in JAX and
PyTorch)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from opmarket._bridge import _registry
from opmarket.sdk import InferenceContext, InvalidArgumentError, OpDef, Shape

__all__ = ["num_outputs", "output_shapes"]


def num_outputs(op: OpDef, attrs: Mapping[str, Any]) -> list[int]:
    """How many tensors each output argument has under ``attrs`` (1 unless a list)."""
    counts = []
    for arg in op.outputs:
        if arg.number_attr:
            counts.append(int(attrs[arg.number_attr]))
        elif arg.type_list_attr:
            counts.append(len(attrs[arg.type_list_attr]))
        else:
            counts.append(1)
    return counts


def output_shapes(
    op: OpDef, shapes: Sequence[Shape], attrs: Mapping[str, Any]
) -> list[Shape] | None:
    """The shape of every output tensor (a list output's tensors one by one) from the op's
    shape function in the process registry, for inputs of ``shapes`` (None: unknown rank;
    None dims: unknown); None when the op has no shape function. Its InvalidArgumentError
    comes back with the op's name in front."""
    spec = _registry.registry().shape_fn(op.name)
    if spec is None:
        return None
    c = InferenceContext(op, list(shapes), attrs, num_outputs=sum(num_outputs(op, attrs)))
    try:
        spec.fn(c)
    except InvalidArgumentError as exc:
        message = str(exc)
        if not message.startswith(op.name):
            message = f"{op.name}: {message}"
        raise InvalidArgumentError(message) from None
    return c.finish()
