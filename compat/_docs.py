"""docs/compat-rules.md, generated from the rule table so the two cannot drift.

Regenerate with ``python -m opmarket.compat._docs > docs/compat-rules.md``; a test fails
when the committed file differs.
"""

from __future__ import annotations

from opmarket.compat._rules import RULES, Rule, Scope, Severity

__all__ = ["rules_reference"]

_SCOPE = {
    Scope.PRESENCE: "an op in one release only",
    Scope.PAIR: "an op in both releases",
    Scope.KERNELS: "an op's kernels, when both releases list kernels",
    Scope.GRAPH: "saved graphs (`--graphs`)",
    Scope.DOCUMENT: "the op-set files",
}


def _code(text: str) -> str:
    return (
        "`" + text.replace("`", "'") + "`"
        if text.strip() not in ("", "-")
        else ("*(absent)*" if text.strip() == "-" else "*(no args or attrs)*")
    )


def _rule(rule: Rule) -> list[str]:
    lines = [
        f"### `{rule.id}`",
        "",
        f"**{rule.severity}**, checks {_SCOPE[rule.scope]}. {rule.summary}",
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
    lines = [
        "# compat-check rules",
        "",
        "<!-- Generated from opmarket/compat/_rules.py by "
        "`python -m opmarket.compat._docs`; do not edit. -->",
        "",
        f"{len(RULES)} rules. `breaking` fails the check (exit 1); the op-definition rules "
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
        for rule in RULES:
            if rule.severity is severity:
                lines.append(f"| [`{rule.id}`](#{rule.id}) | {severity} | {rule.summary} |")
    lines.append("")
    for severity in Severity:
        lines += [f"## {severity}", ""]
        for rule in RULES:
            if rule.severity is severity:
                lines += _rule(rule)
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    print(rules_reference(), end="")
