"""Building OpDefs from spec strings: the ``op("ZeroOut").input(...)`` builder."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Self, TypedDict, cast

from opmarket.sdk._errors import InvalidOpDefError, Problem
from opmarket.sdk._opdef import Deprecation, OpDef
from opmarket.sdk._spec import (
    _OpUnderConstruction,
    parse_attr,
    parse_control_output,
    parse_doc,
    parse_input_or_output,
)
from opmarket.sdk._validate import is_valid_op_name, opdef_problems

__all__ = ["OpBuilder", "OpFlags", "finalize_op", "op"]


class OpFlags(TypedDict, total=False):
    """The boolean OpDef fields, as keyword arguments of finalize_op."""

    is_stateful: bool
    is_commutative: bool
    is_aggregate: bool
    allows_uninitialized_input: bool
    is_distributed_communication: bool


def finalize_op(
    name: str,
    *,
    inputs: Iterable[str] = (),
    outputs: Iterable[str] = (),
    attrs: Iterable[str] = (),
    control_outputs: Iterable[str] = (),
    doc: str = "",
    is_stateful: bool = False,
    is_commutative: bool = False,
    is_aggregate: bool = False,
    allows_uninitialized_input: bool = False,
    is_distributed_communication: bool = False,
    deprecation: Deprecation | None = None,
    errors: Iterable[str] = (),
) -> tuple[OpDef | None, list[str]]:
    """Parse spec strings into an OpDef as OpDefBuilder::Finalize and ValidateOpDef do.

    Attrs are read first, so arguments may name attrs declared after them. Returns the OpDef
    and no problems, or None and every problem found.
    """
    inputs, outputs, attrs = list(inputs), list(outputs), list(attrs)
    build = _OpUnderConstruction(name)
    problems = list(errors)
    for spec in attrs:
        parse_attr(spec, build.attrs, problems)
    for spec in inputs:
        parse_input_or_output(spec, False, build, problems)
    for spec in outputs:
        parse_input_or_output(spec, True, build, problems)
    for spec in control_outputs:
        parse_control_output(spec, build, problems)
    parse_doc(doc, build, problems)
    if problems:
        # TensorFlow validates only what parsed; the name can be judged regardless.
        if not is_valid_op_name(name):
            problems.extend(m for k, _, m in opdef_problems(OpDef(name)) if k == "op")
        return None, problems
    opdef = OpDef(
        name=name,
        inputs=tuple(a.freeze() for a in build.inputs),
        outputs=tuple(a.freeze() for a in build.outputs),
        attrs=tuple(a.freeze() for a in build.attrs),
        control_outputs=tuple(build.control_outputs),
        deprecation=deprecation,
        summary=build.summary,
        description=build.description,
        is_commutative=is_commutative,
        is_aggregate=is_aggregate,
        is_stateful=is_stateful or build.is_stateful,
        allows_uninitialized_input=allows_uninitialized_input,
        is_distributed_communication=is_distributed_communication,
    )
    specs = {
        "attr": _spec_by_name(attrs, "Attr"),
        "input": _spec_by_name(inputs, "Input"),
        "output": _spec_by_name(outputs, "Output"),
    }
    invalid = [
        f"{specs[kind][name]}: {message}" if name in specs.get(kind, {}) else message
        for kind, name, message in opdef_problems(opdef)
    ]
    return (None, invalid) if invalid else (opdef, [])


def _spec_by_name(specs: Iterable[str], kind: str) -> dict[str, str]:
    """Map each declared name to how it was written, so problems can quote the spec."""
    out: dict[str, str] = {}
    for spec in specs:
        out.setdefault(spec.partition(":")[0].strip(), f'{kind}("{spec}")')
    return out


class OpBuilder:
    """Declares an op in REGISTER_OP's spec language; ``build()`` returns the OpDef.

    >>> zero_out = (op("ZeroOut").input("to_zero: T").output("zeroed: T")
    ...             .attr("T: {float, int32} = DT_INT32").build())
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._attrs: list[str] = []
        self._control_outputs: list[str] = []
        self._doc: str | None = None
        self._flags: dict[str, bool] = {}
        self._deprecation: Deprecation | None = None
        self._errors: list[str] = []
        self._built: OpDef | None = None

    def input(self, spec: str) -> Self:
        """Add an input, e.g. ``"x: T"``, ``"values: N * T"``, ``"ref: Ref(float)"``."""
        self._inputs.append(spec)
        return self._changed()

    def output(self, spec: str) -> Self:
        """Add an output, in the same form as an input."""
        self._outputs.append(spec)
        return self._changed()

    def attr(self, spec: str) -> Self:
        """Add an attr, e.g. ``"T: {float, int32} = DT_INT32"`` or ``"n: int >= 1"``."""
        self._attrs.append(spec)
        return self._changed()

    def control_output(self, name: str) -> Self:
        """Add a named control output (TensorFlow's ControlOutput); ``build()`` checks the name."""
        self._control_outputs.append(name)
        return self._changed()

    def doc(self, text: str) -> Self:
        """Set the documentation: summary line, description, then ``name: text`` per arg/attr."""
        if self._doc is not None:
            self._errors.append("Doc(): documentation was set twice")
        else:
            self._doc = text
        return self._changed()

    def stateful(self, value: bool = True) -> Self:
        """Mark the op stateful: it is not constant-folded and each call may differ."""
        self._flags["is_stateful"] = value
        return self._changed()

    def commutative(self, value: bool = True) -> Self:
        """Mark the op commutative (``op(a, b) == op(b, a)``): optimizers may swap its inputs."""
        self._flags["is_commutative"] = value
        return self._changed()

    def aggregate(self, value: bool = True) -> Self:
        """Mark the op an aggregate like AddN: associative and commutative over N inputs.

        Its inputs and output share one type and shape, and optimizers may split it into a tree of
        partial aggregates.
        """
        self._flags["is_aggregate"] = value
        return self._changed()

    def allows_uninitialized_input(self, value: bool = True) -> Self:
        """Let an input be an uninitialized tensor, as ops that initialize variables (Assign) do."""
        self._flags["allows_uninitialized_input"] = value
        return self._changed()

    def distributed_communication(self, value: bool = True) -> Self:
        """Mark the op as talking across hosts: its network errors trigger failure handling."""
        self._flags["is_distributed_communication"] = value
        return self._changed()

    def deprecated(self, version: int, explanation: str) -> Self:
        """Declare the op gone from GraphDef ``version`` on, with the reason."""
        if self._deprecation is not None:
            self._errors.append("Deprecated(): the deprecation was set twice")
        else:
            self._deprecation = Deprecation(version, explanation)
        return self._changed()

    def _changed(self) -> Self:
        self._built = None
        return self

    def build(self) -> OpDef:
        """The finished OpDef; raises InvalidOpDefError listing every problem."""
        if self._built is None:
            opdef, problems = finalize_op(
                self.name,
                inputs=self._inputs,
                outputs=self._outputs,
                attrs=self._attrs,
                control_outputs=self._control_outputs,
                doc=self._doc or "",
                deprecation=self._deprecation,
                errors=self._errors,
                **cast(OpFlags, self._flags),
            )
            if opdef is None:
                raise InvalidOpDefError(Problem(p, op=self.name) for p in problems)
            self._built = opdef
        return self._built

    def __repr__(self) -> str:
        return f"op({self.name!r})"


def op(name: str) -> OpBuilder:
    """Start declaring the op ``name`` (CamelCase, optionally ``Namespace>Name``)."""
    return OpBuilder(name)
