"""The rule table: every TensorFlow rule's examples behave as the table says, and the table
is sound (PyTorch's rows: test_torch_rules.py)."""

from __future__ import annotations

import pytest

from opmarket.compat import RULES, RULES_BY_ID, Rule, Scope, Severity, compare_ops
from opmarket.compat._examples import example_op

TENSORFLOW = [r for r in RULES if r.rules == "tensorflow"]
CHECKED = [r for r in TENSORFLOW if r.check is not None]
EXAMPLES = [
    pytest.param(rule, ex, id=f"{rule.id}-{'fires' if ex.fires else 'silent'}-{i}")
    for rule in CHECKED
    for i, ex in enumerate(rule.examples)
]


@pytest.mark.parametrize(("rule", "example"), EXAMPLES)
def test_example(rule: Rule, example: object) -> None:
    from opmarket.compat import Example

    assert isinstance(example, Example)
    old, old_kernels = example_op(example.old)
    new, new_kernels = example_op(example.new)
    known = rule.scope is Scope.KERNELS
    findings = compare_ops(old, new, old_kernels if known else None, new_kernels if known else None)
    fired = [f for f in findings if f.rule == rule.id]
    assert bool(fired) == example.fires, findings
    for f in fired:
        assert f.severity is rule.severity
        assert f.op == "Example"
        assert f.message


@pytest.mark.parametrize("rule", CHECKED, ids=lambda r: r.id)
def test_every_rule_has_a_safe_and_an_unsafe_example(rule: Rule) -> None:
    assert any(ex.fires for ex in rule.examples)
    assert any(not ex.fires for ex in rule.examples)


def test_ids_are_unique_kebab_case() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids)) == len(RULES_BY_ID)
    for rule_id in ids:
        assert rule_id == rule_id.lower() and " " not in rule_id and "_" not in rule_id


def test_every_rule_has_summary_and_hint() -> None:
    for rule in RULES:
        assert rule.summary.endswith(".") and rule.hint.endswith("."), rule.id


def test_every_rule_belongs_to_a_rule_set_and_its_directions() -> None:
    from opmarket.compat._rule import DIRECTIONS, RULE_SETS

    for rule in RULES:
        assert rule.rules in RULE_SETS, rule.id
        assert rule.directions and set(rule.directions) <= set(DIRECTIONS), rule.id
    assert {r.directions for r in TENSORFLOW} == {("backward",)}
    assert [r.rules for r in RULES] == sorted((r.rules for r in RULES), key=RULE_SETS.index)


def test_only_graph_and_document_rules_lack_a_check() -> None:
    unchecked = {r.id for r in RULES if r.check is None}
    assert unchecked == {r.id for r in RULES if r.scope in (Scope.GRAPH, Scope.DOCUMENT)}
    assert unchecked == {
        "graph-default-changed",
        "graph-invalid",
        "graph-invalid-before",
        "invalid-opdef",
    }


def test_tensorflow_rules_are_the_breaking_ones() -> None:
    # Every TensorFlow rejection reason the issue names has its own breaking rule.
    tf = {
        "op-removed",
        "attr-removed",
        "attr-added-without-default",
        "attr-type-changed",
        "attr-allowed-values-narrowed",
        "attr-restriction-added",
        "attr-minimum-raised",
        "attr-minimum-added",
        "attr-default-changed",
        "attr-default-removed",
        "input-signature-changed",
        "output-signature-changed",
        "input-became-ref",
        "output-lost-ref",
        "output-renamed",
    }
    assert all(RULES_BY_ID[r].severity is Severity.BREAKING for r in tf)


def test_a_removed_op_that_reappears_under_another_name_is_called_a_rename() -> None:
    from opmarket.compat import compare_opsets
    from opmarket.sdk import OpSet, op

    old = op("ZeroOut").input("x: int32").output("y: int32").build()
    new = op("ZeroOutV2").input("x: int32").output("y: int32").build()
    findings = compare_opsets(OpSet.of([old]), OpSet.of([new]))
    assert [(f.rule, f.op) for f in findings] == [
        ("op-removed", "ZeroOut"),
        ("op-added", "ZeroOutV2"),
    ]
    assert "renamed to ZeroOutV2?" in findings[0].message
