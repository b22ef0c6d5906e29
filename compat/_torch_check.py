"""PyTorch's schema rules over two releases: schema lists, or the schemas the torch bridge
registers for two op-sets.

As PyTorch's own check (test/forward_backward_compatibility/check_forward_backward_
compatibility.py) does it: every schema of the old release must have a schema of the same
name and overload in the new release that passes the check in the chosen direction; a name
that repeats passes when any of its new schemas does.
"""

from __future__ import annotations

from collections.abc import Sequence

from opmarket.compat._report import Finding
from opmarket.compat._rule import Rule, Scope, Severity
from opmarket.compat._torch_list import SchemaLine
from opmarket.compat._torch_rules import TORCH_RULES, SchemaChange
from opmarket.compat._torch_schema import Schema
from opmarket.sdk import OpSet

__all__ = ["compare_opset_schemas", "compare_schemas", "opset_schema_lines"]

_REMOVED = next(r for r in TORCH_RULES if r.id == "schema-removed")
_ADDED = next(r for r in TORCH_RULES if r.id == "schema-added")


def _rules(direction: str) -> tuple[Rule[SchemaChange], ...]:
    return tuple(r for r in TORCH_RULES if r.scope is Scope.SCHEMA and direction in r.directions)


def _findings(rules: Sequence[Rule[SchemaChange]], change: SchemaChange) -> list[Finding]:
    out = []
    for rule in rules:
        assert rule.check is not None
        for message in rule.check(change):
            out.append(
                Finding(change.old.full_name, rule.id, rule.severity, message, rules="pytorch")
            )
    return out


def _finding(rule: Rule[SchemaChange], change: SchemaChange) -> list[Finding]:
    return _findings((rule,), change)


def compare_schemas(
    old: Sequence[SchemaLine], new: Sequence[SchemaLine], direction: str = "backward"
) -> list[Finding]:
    """Every finding of PyTorch's schema rules between two releases' schema lines, in the
    old release's order, then added schemas. ``direction`` is ``backward`` or ``forward``."""
    rules = _rules(direction)
    parsed: dict[str, Schema] = {}

    def parse(line: SchemaLine) -> Schema:
        s = parsed.get(line.text)
        if s is None:
            s = parsed[line.text] = line.parse()
        return s

    by_name: dict[str, list[SchemaLine]] = {}
    for line in new:
        by_name.setdefault(line.full_name, []).append(line)
    out: list[Finding] = []
    seen: set[tuple[str, str, str]] = set()
    old_names = set()
    for line in old:
        old_names.add(line.full_name)
        candidates = by_name.get(line.full_name, [])
        if any(c.text == line.text for c in candidates):
            continue  # the same text: nothing changed (PyTorch agrees: no NaN defaults parse)
        schema = parse(line)
        if not candidates:
            found = _finding(_REMOVED, SchemaChange(schema, None, direction))
        else:
            found = []
            for i, c in enumerate(candidates):
                got = _findings(rules, SchemaChange(schema, parse(c), direction))
                if i == 0 or not any(f.severity is Severity.BREAKING for f in got):
                    found = got
                if not any(f.severity is Severity.BREAKING for f in got):
                    break
        for f in found:
            key = (f.op, f.rule, f.message)
            if key not in seen:
                seen.add(key)
                out.append(f)
    added = [line for line in new if line.full_name not in old_names]
    for line in added:
        out += _finding(_ADDED, SchemaChange(parse(line), None, direction))
    return out


def opset_schema_lines(opset: OpSet, label: str) -> list[SchemaLine]:
    """The schemas ``import opmarket.torch`` registers for the op-set's ops (default
    overloads and one per kernel label), for comparing plugin releases."""
    return [line for _, line in _opset_lines(opset, label)]


def _opset_lines(opset: OpSet, label: str) -> list[tuple[str, SchemaLine]]:
    from opmarket.sdk.torch_schema import torch_schemas

    labels: dict[str, set[str]] = {}
    for k in opset.kernels:
        labels.setdefault(k.op, set()).add(k.label)
    out = []
    for op in opset:
        for text in torch_schemas(op, labels.get(op.name, ())):
            name = text[: text.index("(")]
            out.append((op.name, SchemaLine(name, text, f"{label}: {op.name}")))
    return out


def compare_opset_schemas(
    old: OpSet, new: OpSet, direction: str, old_label: str, new_label: str
) -> list[Finding]:
    """PyTorch's breaking findings for the schemas the torch bridge registers for two
    op-sets: what TensorFlow's rules do not already say (its op-removed covers the schemas
    of a removed op; additions are reported once, by TensorFlow's rules)."""
    pairs = _opset_lines(old, old_label)
    gone = {line.full_name for op, line in pairs if op not in new}
    old_lines = [line for _, line in pairs]
    return [
        f
        for f in compare_schemas(old_lines, opset_schema_lines(new, new_label), direction)
        if f.severity is not Severity.INFO and not (f.rule == "schema-removed" and f.op in gone)
    ]
