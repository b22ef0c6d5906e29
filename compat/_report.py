"""Findings and the report: what compat-check found, as text, JSON or Markdown."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from opmarket.compat._rules import RULES_BY_ID, Severity
from opmarket.compat._version import VersionVerdict
from opmarket.sdk import InvalidArgumentError

__all__ = ["FAIL_ON", "FORMATS", "Finding", "Report", "render"]

FORMATS: tuple[str, ...] = ("text", "json", "markdown")
#: What makes a check fail (exit 1), for ``--fail-on``: any breaking change or a version bump
#: too small (the default); only a version bump too small for what changed; nothing.
FAIL_ON: tuple[str, ...] = ("breaking", "version", "never")

_ORDER = {Severity.BREAKING: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing a rule found about one op (or graph)."""

    op: str
    rule: str
    severity: Severity
    message: str
    release: str = ""  # which recorded release it concerns, in a history check
    graph: str = ""  # the saved graph, for graph replay
    rules: str = "tensorflow"  # the rule set (compat._rule.RULE_SETS) of the rule

    @property
    def hint(self) -> str:
        """How to fix what was found: the rule's hint, or ``""`` for a rule id not in the table."""
        rule = RULES_BY_ID.get(self.rule)
        return rule.hint if rule is not None else ""

    def sort_key(self) -> tuple[Any, ...]:
        """Report order: breaking findings first, then by op, rule, graph, release, message."""
        return (_ORDER[self.severity], self.op, self.rule, self.graph, self.release, self.message)

    def to_json(self) -> dict[str, Any]:
        """The finding as a JSON object; ``release`` and ``graph`` only when set."""
        out: dict[str, Any] = {
            "op": self.op,
            "rule": self.rule,
            "rules": self.rules,
            "severity": str(self.severity),
            "message": self.message,
            "hint": self.hint,
        }
        if self.release:
            out["release"] = self.release
        if self.graph:
            out["graph"] = self.graph
        return out


@dataclass
class Report:
    """Every finding of one check, the version verdict, and what was compared."""

    old: str
    new: str
    findings: list[Finding] = field(default_factory=list)
    version: VersionVerdict | None = None
    graphs_checked: int = 0
    ops_compared: int = 0
    fail_on: str = "breaking"  # one of FAIL_ON

    @property
    def compatible(self) -> bool:
        """No breaking finding (the version verdict is separate)."""
        return not any(f.severity is Severity.BREAKING for f in self.findings)

    @property
    def exit_code(self) -> int:
        """1 when the check fails under :attr:`fail_on`, else 0: ``breaking`` fails on a
        breaking change or a version bump too small, ``version`` only on a bump too small for
        what changed (an intended, honestly versioned break passes), ``never`` never."""
        bump_ok = self.version is None or self.version.ok
        if self.fail_on == "never":
            return 0
        if self.fail_on == "version":
            return 0 if bump_ok else 1
        return 0 if self.compatible and bump_ok else 1

    def counts(self) -> dict[str, int]:
        """The number of findings per severity name, every severity present (0 when none)."""
        c = Counter(str(f.severity) for f in self.findings)
        return {str(s): c.get(str(s), 0) for s in Severity}

    def sorted_findings(self) -> list[Finding]:
        """The findings in the order reports list them (:meth:`Finding.sort_key`)."""
        return sorted(self.findings, key=Finding.sort_key)

    def to_json(self) -> dict[str, Any]:
        """The report as ``--format json`` prints it, findings sorted."""
        return {
            "compatible": self.compatible,
            "ok": self.exit_code == 0,
            "fail_on": self.fail_on,
            "old": self.old,
            "new": self.new,
            "ops_compared": self.ops_compared,
            "graphs_checked": self.graphs_checked,
            "summary": self.counts(),
            "version": self.version.to_json() if self.version is not None else None,
            "findings": [f.to_json() for f in self.sorted_findings()],
        }


def _where(f: Finding) -> str:
    extra = [f"graph {f.graph}"] if f.graph else []
    if f.release:
        extra.append(f"since release {f.release}")
    return f.op + (f" ({', '.join(extra)})" if extra else "")


def _text(report: Report) -> str:
    lines = []
    for f in report.sorted_findings():
        tag = f"{f.severity}, pytorch" if f.rules == "pytorch" else str(f.severity)
        lines.append(f"{_where(f)}: {f.rule} [{tag}] {f.message}")
        if f.severity is not Severity.INFO and f.hint:
            lines.append(f"    fix: {f.hint}")
    if report.version is not None:
        lines.append(f"version: {report.version.message}")
    counts = report.counts()
    verdict = "compatible" if report.compatible else "NOT compatible"
    lines.append(
        f"{report.old} -> {report.new}: {verdict}; {report.ops_compared} ops compared, "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
        + (f", {report.graphs_checked} graphs replayed" if report.graphs_checked else "")
    )
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _rule_set(f: Finding) -> str:
    return " (pytorch)" if f.rules == "pytorch" else ""


def _markdown(report: Report) -> str:
    counts = report.counts()
    if report.compatible and report.exit_code == 0:
        head = "### compat-check: compatible"
    elif report.version is not None and not report.version.ok:
        head = "### compat-check: version bump too small"
    elif report.version is not None:
        head = "### compat-check: breaking changes, released as a major bump"
    else:
        head = "### compat-check: breaking changes"
    lines = [
        head,
        "",
        f"`{_md_cell(report.old)}` -> `{_md_cell(report.new)}`: {report.ops_compared} ops "
        f"compared; **{counts['breaking']} breaking**, {counts['warning']} warning(s), "
        f"{counts['info']} info.",
    ]
    if report.version is not None:
        label = "**Version:**" if report.version.ok else "**Version too small:**"
        lines += ["", f"{label} {_md_cell(report.version.message)}"]
    if report.findings:
        lines += [
            "",
            "| severity | op | rule | what changed | fix |",
            "| --- | --- | --- | --- | --- |",
        ]
        for f in report.sorted_findings():
            sev = f"**{f.severity}**" if f.severity is Severity.BREAKING else str(f.severity)
            hint = f.hint if f.severity is not Severity.INFO else ""
            lines.append(
                f"| {sev} | `{_md_cell(_where(f))}` | `{f.rule}`{_rule_set(f)} "
                f"| {_md_cell(f.message)} "
                f"| {_md_cell(hint)} |"
            )
    return "\n".join(lines) + "\n"


def render(report: Report, fmt: str) -> str:
    """The report in ``fmt`` (one of FORMATS)."""
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, ensure_ascii=False) + "\n"
    if fmt == "markdown":
        return _markdown(report)
    if fmt == "text":
        return _text(report)
    raise InvalidArgumentError(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
