"""docs/compat-rules.md, generated from the rule table so the two cannot drift.

Regenerate with ``python -m opmarket.compat._docs > docs/compat-rules.md``; a test fails
when the committed file differs.
"""

from __future__ import annotations

from typing import Any

from opmarket.compat._rules import RULES, Rule, Scope, Severity

__all__ = ["rules_reference"]

_SCOPE = {
    Scope.PRESENCE: "an op in one release only",
    Scope.PAIR: "an op in both releases",
    Scope.KERNELS: "an op's kernels, when both releases list kernels",
    Scope.GRAPH: "saved graphs (`--graphs`)",
    Scope.DOCUMENT: "the op-set files",
    Scope.SCHEMA: "an operator schema in both releases",
}


def _code(text: str) -> str:
    return (
        "`" + text.replace("`", "'") + "`"
        if text.strip() not in ("", "-")
        else ("*(absent)*" if text.strip() == "-" else "*(no args or attrs)*")
    )


def _rule(rule: Rule[Any]) -> list[str]:
    scope = _SCOPE[rule.scope]
    if rule.rules == "pytorch":
        scope = scope.replace("an op ", "an operator overload ", 1)
        scope += f", {' and '.join(rule.directions)}"
    lines = [
        f"#### `{rule.id}`",
        "",
        f"**{rule.severity}**, checks {scope}. {rule.summary}",
        "",
        f"Fix: {rule.hint}",
        "",
    ]
    if rule.examples:
        lines += ["| old | new | fires |", "| --- | --- | --- |"]
        for ex in rule.examples:
            fires = "yes" if ex.fires else "no"
            lines.append(f"| {_code(ex.old)} | {_code(ex.new)} | {fires} |")
        lines.append("")
    return lines


def rules_reference() -> str:
    """The rules reference page, in Markdown."""
    tf = [r for r in RULES if r.rules == "tensorflow"]
    torch = [r for r in RULES if r.rules == "pytorch"]
    lines = [
        "# compat-check rules",
        "",
        "<!-- Generated from opmarket/compat/_rules.py by "
        "`python -m opmarket.compat._docs`; do not edit. -->",
        "",
        f"{len(RULES)} rules in two rule sets: [TensorFlow's](#tensorflow-rules) "
        f"({len(tf)}), for op definitions, and [PyTorch's](#pytorch-schema-rules) "
        f"({len(torch)}), for operator schemas. Each finding names its rule set "
        '(`"rules"` in JSON).',
        "",
        "## TensorFlow rules",
        "",
        f"{len(tf)} rules. `breaking` fails the check (exit 1); the op-definition rules "
        "among them fire exactly where TensorFlow 2.21's OpDefCompatible and "
        "OpDefAttrDefaultsUnchanged reject a change. `warning` is what TensorFlow allows but "
        "users feel; `info` reports additions (they need a minor version bump).",
        "",
        "Examples are written one op per line: `in x: T` and `out y: T` are REGISTER_OP "
        "input and output specs, `attr ...` attr specs, `stateful`, `commutative`, "
        "`deprecated VERSION WHY`, and `kernel DEVICE ATTR=dtype,...` a kernel; items are "
        "separated by `;`.",
        "",
        "| rule | severity | summary |",
        "| --- | --- | --- |",
    ]
    for severity in Severity:
        for rule in tf:
            if rule.severity is severity:
                lines.append(f"| [`{rule.id}`](#{rule.id}) | {severity} | {rule.summary} |")
    lines.append("")
    for severity in Severity:
        lines += [f"### {severity}", ""]
        for rule in tf:
            if rule.severity is severity:
                lines += _rule(rule)
    lines += _torch_part(torch)
    return "\n".join(lines).rstrip("\n") + "\n"


def _torch_part(rules: list[Rule[Any]]) -> list[str]:
    lines = [
        "## PyTorch schema rules",
        "",
        f"{len(rules)} rules, for PyTorch schema lists and for the schemas `opmarket.torch` "
        "registers for a plugin's ops. The `breaking` ones are PyTorch 2.13's "
        "`FunctionSchema::isBackwardCompatibleWith` (`--direction backward`, the default) "
        "and `isForwardCompatibleWith` (`--direction forward`) taken apart: for every pair "
        "of schemas some rule fires exactly when PyTorch's check rejects the pair. A rule "
        "is checked in the directions it names. As in PyTorch's own check, every schema of "
        "the old release needs a schema of the same name and overload in the new one.",
        "",
        "Examples are two schemas of an operator `f`; `-` is a release without it.",
        "",
        "| rule | severity | directions | summary |",
        "| --- | --- | --- | --- |",
    ]
    for severity in Severity:
        for rule in rules:
            if rule.severity is severity:
                lines.append(
                    f"| [`{rule.id}`](#{rule.id}) | {severity} | {', '.join(rule.directions)} "
                    f"| {rule.summary} |"
                )
    lines.append("")
    for severity in Severity:
        if any(r.severity is severity for r in rules):
            lines += [f"### {severity} (PyTorch)", ""]
            lines += [x for r in rules if r.severity is severity for x in _rule(r)]
    return lines


if __name__ == "__main__":
    print(rules_reference(), end="")
