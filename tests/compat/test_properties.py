"""Property tests over generated ops and generated changes to them."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from opmarket.compat import RULES_BY_ID, Severity, compare_ops
from opmarket.sdk import DType, OpDef, op

_TYPES = ["float", "double", "int32", "int64", "bool", "string"]

# Attr variants by name; args below only name attrs that exist.
_ATTRS = {
    "T": [
        "T: type",
        "T: {float, int32}",
        "T: {float, int32, int64} = DT_INT32",
        "T: type = DT_FLOAT",
    ],
    "N": ["N: int >= 1", "N: int >= 0 = 2", "N: int >= 2"],
    "Tl": ["Tl: list(type) >= 0", "Tl: list(type) = [DT_FLOAT]"],
    "s": ["s: string = 'a'", "s: {'A', 'B'} = 'A'", "s: string"],
    "f": ["f: float = 1.5", "f: float"],
    "l": ["l: list(int) = [1, 2]", "l: list(int) >= 1"],
}


@st.composite
def ops(draw: st.DrawFn) -> OpDef:
    attrs = {
        name: draw(st.sampled_from(specs)) for name, specs in _ATTRS.items() if draw(st.booleans())
    }

    def arg() -> str:
        choices = [draw(st.sampled_from(_TYPES))]
        if "T" in attrs:
            choices.append("T")
        if "N" in attrs:
            choices.append(f"N * {'T' if 'T' in attrs else choices[0]}")
        if "Tl" in attrs:
            choices.append("Tl")
        body = draw(st.sampled_from(choices))
        return body

    b = op("Gen")
    for spec in attrs.values():
        b.attr(spec)
    for i in range(draw(st.integers(0, 3))):
        b.input(f"in{i}: {arg()}")
    for i in range(draw(st.integers(0, 2))):
        b.output(f"out{i}: {arg()}")
    if draw(st.booleans()):
        b.stateful()
    return b.build()


def _breaking(old: OpDef, new: OpDef) -> list[str]:
    return [f.rule for f in compare_ops(old, new) if f.severity is Severity.BREAKING]


@given(ops())
def test_an_unchanged_op_has_no_findings(o: OpDef) -> None:
    assert compare_ops(o, o) == []


@given(ops())
def test_findings_carry_their_rules_severity(o: OpDef) -> None:
    for old, new in ((o, o.replace(attrs=o.attrs[1:])), (o.replace(outputs=()), o)):
        for f in compare_ops(old, new):
            assert f.severity is RULES_BY_ID[f.rule].severity
            assert f.op == "Gen"


def _rebuild(o: OpDef, extra: Callable[[object], object]) -> OpDef:
    b = op(o.name)
    for a in o.attrs:
        b.attr(a.spec)
    for arg in o.inputs:
        b.input(arg.spec)
    for arg in o.outputs:
        b.output(arg.spec)
    if o.is_stateful:
        b.stateful()
    extra(b)
    return b.build()


# Changes TensorFlow accepts: none of them may be breaking.
_SAFE: dict[str, Callable[[object], object]] = {
    "attr with default": lambda b: b.attr("added: int = 3"),  # type: ignore[attr-defined]
    "list input of default length 0": lambda b: b.attr("M: int >= 0 = 0").input("more: M * float"),  # type: ignore[attr-defined]
    "type-list input defaulting to empty": lambda b: b.attr("Tm: list(type) >= 0 = []").input(
        "more: Tm"
    ),  # type: ignore[attr-defined]
}


@given(ops(), st.sampled_from(sorted(_SAFE)))
def test_compatible_changes_never_break(o: OpDef, change: str) -> None:
    new = _rebuild(o, _SAFE[change])
    assert _breaking(o, new) == []
    # ... and undoing them always does: the old op lacks what graphs of the new one use.
    assert _breaking(new, o) != []


@given(ops())
def test_removing_any_attr_breaks(o: OpDef) -> None:
    for i, a in enumerate(o.attrs):
        new = o.replace(attrs=o.attrs[:i] + o.attrs[i + 1 :])
        assert "attr-removed" in _breaking(o, new), a.name


@given(ops(), st.sampled_from(_TYPES))
def test_changing_a_fixed_input_type_breaks(o: OpDef, dtype: str) -> None:
    for i, arg in enumerate(o.inputs):
        if arg.type is DType.INVALID or arg.type.spec_name == dtype or arg.is_list:
            continue
        new = o.replace(
            inputs=(
                *o.inputs[:i],
                arg.__class__(arg.name, type=DType[dtype.upper()]),
                *o.inputs[i + 1 :],
            )
        )
        assert "input-signature-changed" in _breaking(o, new)


@given(ops())
def test_a_fixed_input_made_polymorphic_with_its_old_type_as_default_is_compatible(
    o: OpDef,
) -> None:
    for i, arg in enumerate(o.inputs):
        if arg.type is DType.INVALID or arg.is_list:
            continue
        attr = f"P{i}: type = DT_{arg.type.name}"
        new = _rebuild(o, lambda b, attr=attr: b.attr(attr))  # type: ignore[attr-defined,misc]
        new = new.replace(
            inputs=(
                *new.inputs[:i],
                arg.__class__(arg.name, type_attr=f"P{i}"),
                *new.inputs[i + 1 :],
            )
        )
        assert _breaking(o, new) == []


@given(ops())
def test_renaming_inputs_is_compatible_but_renaming_outputs_breaks(o: OpDef) -> None:
    from dataclasses import replace

    renamed_in = o.replace(inputs=tuple(replace(a, name=a.name + "_r") for a in o.inputs))
    assert _breaking(o, renamed_in) == []
    if o.inputs:
        assert "python-signature-changed" in {f.rule for f in compare_ops(o, renamed_in)}
    renamed_out = o.replace(outputs=tuple(replace(a, name=a.name + "_r") for a in o.outputs))
    # Every output names attrs both releases have, so each is a token TensorFlow compares.
    assert _breaking(o, renamed_out) == (["output-renamed"] if o.outputs else [])


@given(ops(), ops())
def test_an_attr_added_one_way_is_removed_the_other_way(a: OpDef, b: OpDef) -> None:
    def attrs(findings: list[object], rule: str) -> set[str]:
        return {f.message.split("'")[1] for f in findings if f.rule == rule}  # type: ignore[attr-defined]

    forward, backward = compare_ops(a, b), compare_ops(b, a)
    added = attrs(forward, "attr-added") | attrs(forward, "attr-added-without-default")
    assert added == attrs(backward, "attr-removed")
