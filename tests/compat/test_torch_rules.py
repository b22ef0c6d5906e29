"""PyTorch's schema rules: every row's examples behave as the table says, in each direction
the row is checked in, and the schema reader reads what PyTorch writes."""

from __future__ import annotations

import re

import pytest

from opmarket.compat import RULES, Rule, Scope, Severity
from opmarket.compat._torch_check import compare_schemas
from opmarket.compat._torch_list import SchemaLine
from opmarket.compat._torch_schema import parse_schema
from opmarket.compat._torch_types import is_subtype

TORCH = [r for r in RULES if r.rules == "pytorch"]


def _lines(text: str) -> list[SchemaLine]:
    return [] if text == "-" else [SchemaLine("f", text, "example")]


EXAMPLES = [
    pytest.param(
        rule, ex, direction, id=f"{rule.id}-{direction}-{'fires' if ex.fires else 'silent'}-{i}"
    )
    for rule in TORCH
    for direction in rule.directions
    for i, ex in enumerate(rule.examples)
]


@pytest.mark.parametrize(("rule", "example", "direction"), EXAMPLES)
def test_example(rule: Rule[object], example: object, direction: str) -> None:
    from opmarket.compat import Example

    assert isinstance(example, Example)
    findings = compare_schemas(_lines(example.old), _lines(example.new), direction)
    fired = [f for f in findings if f.rule == rule.id]
    assert bool(fired) == example.fires, findings
    for f in fired:
        assert f.severity is rule.severity
        assert f.rules == "pytorch"
        assert f.op == "f"
        assert f.message and f.hint == rule.hint


@pytest.mark.parametrize("rule", TORCH, ids=lambda r: r.id)
def test_every_rule_has_a_safe_and_an_unsafe_example(rule: Rule[object]) -> None:
    assert any(ex.fires for ex in rule.examples)
    assert any(not ex.fires for ex in rule.examples)
    assert rule.summary.endswith(".") and rule.hint.endswith(".")
    assert rule.check is not None


def test_the_rule_ids_do_not_collide_with_tensorflows() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    assert {r.scope for r in TORCH} == {Scope.PRESENCE, Scope.SCHEMA}
    breaking = {r.id for r in TORCH if r.severity is Severity.BREAKING}
    assert {"schema-removed", "argument-renamed", "argument-type-narrowed"} <= breaking


def test_a_renamed_argument_breaks_backward_but_an_added_default_only_forward() -> None:
    old = _lines("aten::qr(Tensor self, bool some=True) -> (Tensor Q, Tensor R)")
    renamed = _lines("aten::qr(Tensor self, bool reduced=True) -> (Tensor Q, Tensor R)")
    assert [f.rule for f in compare_schemas(old, renamed)] == ["argument-renamed"]
    old = _lines("f(Tensor x, int n) -> Tensor")
    new = _lines("f(Tensor x, int n=1) -> Tensor")
    assert compare_schemas(old, new, "backward") == []
    assert [f.rule for f in compare_schemas(old, new, "forward")] == ["argument-default-added"]


def test_out_arguments_are_paired_from_their_start() -> None:
    # A new argument with a default goes before the out arguments; an out argument that is
    # no longer written is no out argument: the old one is missing, and a new argument
    # without a default took its place.
    old = _lines("f.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)")
    new = _lines("f.out(Tensor x, int n=0, *, Tensor(a!) out) -> Tensor(a!)")
    assert [f.rule for f in compare_schemas(old, new)] == ["argument-added"]
    gone = _lines("f.out(Tensor x, *, Tensor(a) out) -> Tensor(a!)")
    rules = {f.rule for f in compare_schemas(old, gone)}
    assert rules == {"out-arguments-changed", "argument-added-without-default"}


@pytest.mark.parametrize(
    "text",
    [
        "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)",
        "aten::items.str(Dict(str, t) self) -> ((str, t)[])",
        "aten::max_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], "
        "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> Tensor",
        "prim::TupleUnpack(Any tup) -> ...",
        "aten::split.str(str self, str? separator=None, int max=-1) -> str[]",
        "aten::norm.names_ScalarOpt_dim(Tensor self, Scalar? p, str[1] dim, bool keepdim=False)"
        " -> Tensor",
        "quantized::linear(Tensor X, __torch__.torch.classes.quantized.LinearPackedParamsBase "
        "W_prepack, float Y_scale_i, int Y_zero_point_i) -> Tensor Y",
        "aten::_foreach_add_.List(Tensor(a!)[] self, Tensor[] other, *, Scalar alpha=1) -> ()",
        "aten::to.dtype(Tensor(a) self, ScalarType dtype, bool non_blocking=False, "
        "bool copy=False, MemoryFormat? memory_format=None) -> Tensor(a)",
    ],
)
def test_real_schemas_parse(text: str) -> None:
    schema = parse_schema(text)
    assert schema.full_name == text[: text.index("(")]
    assert [a.text for a in schema.arguments] == [
        a.strip() for a in text[text.index("(") + 1 : text.index(") ->")].split(", ") if a != "*"
    ] or "," in text  # nested commas: checked by the parse itself


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("aten::f(Tensor x -> Tensor", "expected ','"),
        ("aten::f(Foo x) -> Tensor", "unknown type 'Foo'"),
        ("aten::f(int x=abc) -> Tensor", "unknown constant 'abc'"),
        ("aten::f(Tensor x) -> Tensor $", "unexpected character '$'"),
    ],
)
def test_bad_schemas_say_where(text: str, error: str) -> None:
    with pytest.raises(ValueError, match="column"):
        parse_schema(text)
    with pytest.raises(ValueError, match=re.escape(error)):
        parse_schema(text)


@pytest.mark.parametrize(
    ("a", "b", "sub"),
    [
        ("int", "Scalar", True),
        ("Scalar", "int", False),
        ("int", "int?", True),
        ("int?", "int", False),
        ("SymInt", "int", True),
        ("ScalarType", "int", True),
        ("t", "t1", True),
        ("t", "Any", True),
        ("Any", "t", False),
        ("int[]", "Scalar[]", False),  # lists are invariant
        ("(int, int)", "(Scalar, int)", True),  # tuples are not
        ("None", "Tensor?", True),
    ],
)
def test_subtyping_is_pytorchs(a: str, b: str, sub: bool) -> None:
    def typ(text: str) -> object:
        return parse_schema(f"f({text} x) -> ()").arguments[0].type

    assert is_subtype(typ(a), typ(b)) is sub  # type: ignore[arg-type]


def test_repeated_arguments_are_read_once_but_alias_shorthands_are_numbered_per_schema() -> None:
    first = parse_schema("f(Tensor x, Tensor! a, Tensor! b) -> ()")
    again = parse_schema("g(Tensor! b) -> ()")
    assert first.arguments[0] is parse_schema("h(Tensor x) -> ()").arguments[0]
    assert [a.alias.before for a in first.arguments[1:]] == [{"$0"}, {"$1"}]  # type: ignore[union-attr]
    assert again.arguments[0].alias.before == {"$0"}  # type: ignore[union-attr]
    assert parse_schema("f(Tensor x, *, int n=1) -> ()").arguments[1].kwarg_only
    assert not parse_schema("f(Tensor x, int n=1) -> ()").arguments[1].kwarg_only
