"""The rule table's example language: a whole op (and its kernels) on one line.

Items are separated by ``;``: ``in x: T`` / ``out y: T`` (REGISTER_OP arg specs),
``attr T: type = DT_FLOAT`` (attr specs), ``stateful``, ``commutative``,
``deprecated VERSION EXPLANATION``, ``kernel DEVICE [ATTR=dtype,dtype ...]``.
``-`` means the op does not exist; an empty line is an op with nothing declared.
"""

from __future__ import annotations

from opmarket.sdk import DType, InvalidArgumentError, KernelDef, OpDef, op

__all__ = ["EXAMPLE_OP", "example_op"]

EXAMPLE_OP = "Example"


def _kernel(text: str) -> KernelDef:
    device, *constraints = text.split()
    pairs = []
    for c in constraints:
        attr, _, types = c.partition("=")
        pairs.append((attr, tuple(DType[t.upper()] for t in types.split(","))))
    return KernelDef(EXAMPLE_OP, device=device, constraints=tuple(sorted(pairs)))


def example_op(text: str) -> tuple[OpDef | None, tuple[KernelDef, ...]]:
    """The op (None for ``-``) and kernels an example line declares."""
    if text.strip() == "-":
        return None, ()
    builder = op(EXAMPLE_OP)
    kernels: list[KernelDef] = []
    for item in (i.strip() for i in text.split(";")):
        word, _, rest = item.partition(" ")
        if not item:
            continue
        if word == "in":
            builder.input(rest)
        elif word == "out":
            builder.output(rest)
        elif word == "attr":
            builder.attr(rest)
        elif word == "stateful":
            builder.stateful()
        elif word == "commutative":
            builder.commutative()
        elif word == "deprecated":
            version, _, why = rest.partition(" ")
            builder.deprecated(int(version), why)
        elif word == "kernel":
            kernels.append(_kernel(rest))
        else:
            raise InvalidArgumentError(f"unknown example item {item!r}")
    return builder.build(), tuple(kernels)
