"""Ops every graph may use whatever plugins are installed: graph inputs, constants, plumbing.

They carry TensorFlow's names and signatures, so graphs exchanged with TensorFlow tools read
the same. An op-set that defines an op of the same name takes precedence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

from opmarket.sdk import OpDef, TensorShape, op

__all__ = ["BUILTIN_OPS"]


def _builtins() -> dict[str, OpDef]:
    defs = [
        op("Const")
        .output("output: dtype")
        .attr("value: tensor")
        .attr("dtype: type")
        .doc("A constant tensor."),
        op("Identity")
        .input("input: T")
        .output("output: T")
        .attr("T: type")
        .doc("Returns its input."),
        op("NoOp").doc("Does nothing; a target for control inputs."),
        op("AddN")
        .input("inputs: N * T")
        .output("sum: T")
        .attr("N: int >= 1")
        .attr("T: numbertype")
        .commutative()
        .aggregate()
        .doc("Adds all inputs elementwise."),
    ]
    built = {d.name: d for d in (b.build() for b in defs)}
    # Placeholder's "shape: shape = { unknown_rank: true }", its default given as the value:
    # reading it as text would load protobuf into every process that imports the registry
    # (a validation's plugin process among them), for this one default.
    placeholder = (
        op("Placeholder")
        .output("output: dtype")
        .attr("dtype: type")
        .attr("shape: shape")
        .doc("A graph input, fed when the graph runs.")
        .build()
    )
    unknown = TensorShape(None)
    attrs = tuple(
        dataclasses.replace(a, default=unknown) if a.name == "shape" else a
        for a in placeholder.attrs
    )
    return {"Placeholder": dataclasses.replace(placeholder, attrs=attrs), **built}


#: The built-in ops by name.
BUILTIN_OPS: Mapping[str, OpDef] = MappingProxyType(_builtins())
