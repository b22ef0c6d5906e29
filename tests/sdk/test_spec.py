"""The REGISTER_OP spec language: every form of the seed document, and what is rejected."""

from __future__ import annotations

from typing import Any

import pytest

from opmarket.sdk import (
    ArgDef,
    AttrDef,
    DType,
    FuncValue,
    InvalidOpDefError,
    OpDef,
    TensorShape,
    TensorValue,
    finalize_op,
    op,
)
from opmarket.sdk._dtypes import NUMBER_TYPES, QUANTIZED_TYPES, REAL_NUMBER_TYPES

F, I32 = DType.FLOAT, DType.INT32


def one_attr(spec: str, **extra: Any) -> AttrDef:
    built = op("Op").attr(spec)
    for arg in extra.get("inputs", ()):
        built.input(arg)
    return built.build().attrs[0]


ATTRS: list[tuple[str, AttrDef]] = [
    # types
    ("a: string", AttrDef("a", "string")),
    ("a: int", AttrDef("a", "int")),
    ("a: float", AttrDef("a", "float")),
    ("a: bool", AttrDef("a", "bool")),
    ("a: type", AttrDef("a", "type")),
    ("a: shape", AttrDef("a", "shape")),
    ("a: tensor", AttrDef("a", "tensor")),
    ("a: func", AttrDef("a", "func")),
    ("a: list(string)", AttrDef("a", "list(string)")),
    ("a: list(int)", AttrDef("a", "list(int)")),
    ("a: list(float)", AttrDef("a", "list(float)")),
    ("a: list(bool)", AttrDef("a", "list(bool)")),
    ("a: list(type)", AttrDef("a", "list(type)")),
    ("a: list(shape)", AttrDef("a", "list(shape)")),
    ("a: list(tensor)", AttrDef("a", "list(tensor)")),
    ("a: list(func)", AttrDef("a", "list(func)")),
    ("a : list ( int )", AttrDef("a", "list(int)")),
    # constraints
    ("T: {int32, float}", AttrDef("T", "type", allowed_values=(I32, F))),
    ("T: {int32, float, }", AttrDef("T", "type", allowed_values=(I32, F))),
    (
        "T: {float16, float32, float64}",
        AttrDef("T", "type", allowed_values=(DType.HALF, F, DType.DOUBLE)),
    ),
    ("s: {'apple', 'orange'}", AttrDef("s", "string", allowed_values=("apple", "orange"))),
    ('s: {"apple", "or\\x41nge"}', AttrDef("s", "string", allowed_values=("apple", "orAnge"))),
    ("T: numbertype", AttrDef("T", "type", allowed_values=NUMBER_TYPES)),
    ("T: numerictype", AttrDef("T", "type", allowed_values=NUMBER_TYPES)),
    ("T: realnumbertype", AttrDef("T", "type", allowed_values=REAL_NUMBER_TYPES)),
    ("T: quantizedtype", AttrDef("T", "type", allowed_values=QUANTIZED_TYPES)),
    ("T: {numbertype, bool}", AttrDef("T", "type", allowed_values=(*NUMBER_TYPES, DType.BOOL))),
    (
        "T: {realnumerictype, int4}",
        AttrDef("T", "type", allowed_values=(*REAL_NUMBER_TYPES, DType.INT4)),
    ),
    ("T: list({float, int32})", AttrDef("T", "list(type)", allowed_values=(F, I32))),
    ("n: int >= 2", AttrDef("n", "int", has_minimum=True, minimum=2)),
    ("n: int >= -2", AttrDef("n", "int", has_minimum=True, minimum=-2)),
    ("l: list(type) >= 3", AttrDef("l", "list(type)", has_minimum=True, minimum=3)),
    ("l: list(int) >= 0", AttrDef("l", "list(int)", has_minimum=True, minimum=0)),
    # defaults, as in the seed's AttrDefaultExample
    ("i: int = 0", AttrDef("i", "int", default=0)),
    ("s: string = 'foo'", AttrDef("s", "string", default="foo")),
    ('s: string = "foo"', AttrDef("s", "string", default="foo")),
    ("b: bool = false", AttrDef("b", "bool", default=False)),
    ("b: bool = True", AttrDef("b", "bool", default=True)),
    ("f: float = 1e-05", AttrDef("f", "float", default=1e-05)),
    ("f: float = 0.1", AttrDef("f", "float", default=0.1)),
    ("ty: type = DT_INT32", AttrDef("ty", "type", default=I32)),
    ("T: {float, int32} = DT_INT32", AttrDef("T", "type", default=I32, allowed_values=(F, I32))),
    (
        "sh: shape = { dim { size: 1 } dim { size: 2 } }",
        AttrDef("sh", "shape", default=TensorShape((1, 2))),
    ),
    ("sh: shape = { unknown_rank: true }", AttrDef("sh", "shape", default=TensorShape(None))),
    ("sh: shape = {}", AttrDef("sh", "shape", default=TensorShape(()))),
    (
        "te: tensor = { dtype: DT_INT32 int_val: 5 }",
        AttrDef("te", "tensor", default=TensorValue(I32, values=(("int_val", (5,)),))),
    ),
    ("fn: func = { name: 'f' }", AttrDef("fn", "func", default=FuncValue("f"))),
    ("l_empty: list(int) = []", AttrDef("l_empty", "list(int)", default=())),
    ("l_int: list(int) = [2, 3, 5, 7]", AttrDef("l_int", "list(int)", default=(2, 3, 5, 7))),
    ("l: list(type) = [DT_FLOAT, DT_INT32]", AttrDef("l", "list(type)", default=(F, I32))),
    (
        "l: list(shape) = [{ dim { size: 1 } }, { unknown_rank: true }]",
        AttrDef("l", "list(shape)", default=(TensorShape((1,)), TensorShape(None))),
    ),
    ("n: int >= 1 = 2", AttrDef("n", "int", default=2, has_minimum=True, minimum=1)),
]


@pytest.mark.parametrize(("spec", "expected"), ATTRS, ids=[s for s, _ in ATTRS])
def test_attr_forms(spec: str, expected: AttrDef) -> None:
    assert one_attr(spec) == expected


ARGS: list[tuple[str, ArgDef]] = [
    ("x: float", ArgDef("x", type=F)),
    ("x: float32", ArgDef("x", type=F)),
    ("x: half", ArgDef("x", type=DType.HALF)),
    ("x: float8_e4m3fn", ArgDef("x", type=DType.FLOAT8_E4M3FN)),
    ("x: int4", ArgDef("x", type=DType.INT4)),
    ("x: T", ArgDef("x", type_attr="T")),
    ("x: N * T", ArgDef("x", type_attr="T", number_attr="N")),
    ("x: N*int32", ArgDef("x", type=I32, number_attr="N")),
    ("x: TL", ArgDef("x", type_list_attr="TL")),
    ("x: Ref(T)", ArgDef("x", type_attr="T", is_ref=True)),
    ("x: Ref( float )", ArgDef("x", type=F, is_ref=True)),
    ("x_2: variant", ArgDef("x_2", type=DType.VARIANT)),
]


@pytest.mark.parametrize(("spec", "expected"), ARGS, ids=[s for s, _ in ARGS])
def test_input_and_output_forms(spec: str, expected: ArgDef) -> None:
    built = (
        op("Op")
        .input(spec)
        .output(spec.replace("x", "y", 1))
        .attr("T: type")
        .attr("N: int")
        .attr("TL: list(type)")
        .build()
    )
    assert built.inputs == (expected,)
    assert built.outputs[0].name == expected.name.replace("x", "y", 1)


def test_list_length_attr_gets_implicit_minimum_of_one() -> None:
    built = (
        op("Op")
        .input("x: N * T")
        .input("y: TL")
        .attr("N: int")
        .attr("T: type")
        .attr("TL: list(type)")
        .build()
    )
    assert built.attr("N") == AttrDef("N", "int", has_minimum=True, minimum=1)
    assert built.attr("TL") == AttrDef("TL", "list(type)", has_minimum=True, minimum=1)


def test_explicit_minimum_is_kept_for_list_lengths() -> None:
    built = op("Op").input("x: N * float").attr("N: int >= 0").build()
    assert built.attr("N") == AttrDef("N", "int", has_minimum=True, minimum=0)


def test_resource_argument_makes_op_stateful() -> None:
    assert op("Op").input("h: resource").build().is_stateful
    assert not op("Op").input("h: T").attr("T: type").build().is_stateful


def test_flags_and_deprecation() -> None:
    built = (
        op("Op")
        .input("x: float")
        .output("y: float")
        .stateful()
        .commutative()
        .aggregate()
        .allows_uninitialized_input()
        .distributed_communication()
        .deprecated(9, "Use Op2")
        .build()
    )
    assert (built.is_stateful, built.is_commutative, built.is_aggregate) == (True, True, True)
    assert built.allows_uninitialized_input and built.is_distributed_communication
    assert built.deprecation is not None and built.deprecation.version == 9


def test_doc_is_split_as_tensorflow_reads_it() -> None:
    built = (
        op("ZeroOut")
        .input("to_zero: int32")
        .output("zeroed: int32")
        .attr("keep: int = 0")
        .doc(
            "\n Zeroes all elements but one.  \n\nLonger text\nover two lines.\n\n"
            "to_zero: the input\n  continued\n      deeper\nzeroed: the output\n\n"
            "keep: the index\n"
        )
        .build()
    )
    assert built.summary == " Zeroes all elements but one."
    assert built.description == "Longer text\nover two lines."
    assert built.inputs[0].description == "the input\ncontinued\n    deeper"
    assert built.outputs[0].description == "the output"
    assert built.attrs[0].description == "the index"


def test_op_names() -> None:
    for good in ("ZeroOut", "Opm>ZeroOut", "A>B>C9_x", "_AnythingGoes here"):
        assert op(good).build().name == good
    for bad in ("zeroOut", "Opm>>ZeroOut", "Opm>zero", "Zero-Out", ""):
        with pytest.raises(InvalidOpDefError, match="invalid op name"):
            op(bad).build()


BAD: list[tuple[str, str, str]] = [
    # (kind, spec, a part of the message)
    ("attr", "1a: int", "expected '<name>:'"),
    ("attr", "a int", "expected '<name>:'"),
    ("attr", "a: int32", "unexpected '32'"),
    ("attr", "a: types", "unexpected 's'"),
    ("attr", "a: list(int", "expected ')' to close 'list('"),
    ("attr", "a: any", "cannot read a type"),
    ("attr", "a: realnumberictype", "unknown type word"),
    ("attr", "a: {float8_e5m2}", "names with '_'"),
    ("attr", "a: {FLOAT}", "cannot read a type name"),
    ("attr", "a: {float int32}", "expected ',' or '}'"),
    ("attr", "a: {'x}", "cannot read an allowed string"),
    ("attr", "a: {'\\q'}", "bad escape"),
    ("attr", "a: string >= 1", "unexpected '>= 1'"),
    ("attr", "a: int >= x", "integer minimum"),
    ("attr", "a: list(int) >= -1", "minimum must be >= 0"),
    ("attr", "a: int = 'x'", "not a valid int value"),
    ("attr", "a: int = 0x10", "not a valid int value"),
    ("attr", "a: bool = t", "not a valid bool value"),
    ("attr", "a: float = 1.0f", "not a valid float value"),
    ("attr", "a: list(int) = 2", "written in [ ]"),
    ("attr", "a: int >= 2 = 1", "below its minimum of 2"),
    ("attr", "a: list(int) >= 2 = [1]", "fewer than its minimum of 2"),
    ("attr", "a: {float, int32} = DT_DOUBLE", "may not be double"),
    ("attr", "a: {'x', 'y'} = 'z'", "may not be 'z'"),
    ("attr", "a: type = DT_FLOAT_REF", "reference type"),
    ("attr", "a: type = DT_INVALID", "DT_INVALID"),
    ("attr", "float: int", "named like a dtype"),
    ("attr", "int32_ref: int", "named like a dtype"),
    ("input", "X: float", "names are lower_case"),
    ("input", "x float", "expected '<name>:'"),
    ("input", "x: Unknown", "neither a dtype nor an attr"),
    ("input", "x: S", "has type string"),
    ("input", "x: Ref(float", "to close 'Ref('"),
    ("input", "x: float extra", "unexpected 'extra'"),
    ("input", "x: float_ref", "illegal reference type"),
    ("input", "x: N * TL", "both a length attr and a list(type) attr"),
    ("input", "x: M * float", "must have a minimum >= 0"),
    ("input", "x: S * float", "must have type int"),
]


@pytest.mark.parametrize(("kind", "spec", "part"), BAD, ids=[s for _, s, _ in BAD])
def test_rejected_specs_name_op_and_quote_spec(kind: str, spec: str, part: str) -> None:
    builder = op("Opm>Example").attr("S: string").attr("TL: list(type)").attr("M: int >= -1")
    builder = builder.attr(spec) if kind == "attr" else builder.input(spec)
    with pytest.raises(InvalidOpDefError) as info:
        builder.build()
    lines = str(info.value).split("\n")  # one problem a line
    assert len(lines) == len(info.value.problems)
    assert all(line.startswith("op Opm>Example: ") for line in lines)
    assert any(f'("{spec}")' in line and part in line for line in lines), lines


def test_every_problem_of_an_op_is_reported() -> None:
    _, problems = finalize_op(
        "Op",
        inputs=["X: float", "y: Nope"],
        attrs=["a: {float8_e5m2}", "b: int = 'x'"],
        outputs=["z: float extra"],
    )
    assert len(problems) == 5


def test_doc_naming_an_unknown_argument_is_rejected() -> None:
    with pytest.raises(InvalidOpDefError, match="'nope' names no input"):
        op("Op").input("x: float").doc("Summary.\n\nnope: what?").build()


def test_duplicate_names_across_args_and_attrs_are_rejected() -> None:
    with pytest.raises(InvalidOpDefError, match="duplicate name 'x'"):
        op("Op").input("x: T").attr("x: int").attr("T: type").build()


def test_attrs_may_be_declared_after_the_inputs_that_use_them() -> None:
    built: OpDef = op("Op").input("x: T").attr("T: type").build()
    assert built.inputs[0].type_attr == "T"


def test_spec_strings_round_trip_through_the_model() -> None:
    for spec, _ in ATTRS:
        attr = one_attr(spec)
        assert one_attr(attr.spec) == attr, spec


def test_builder_is_reusable_and_caches() -> None:
    b = op("Op").input("x: float")
    first = b.build()
    assert b.build() is first
    assert b.output("y: float").build() != first
