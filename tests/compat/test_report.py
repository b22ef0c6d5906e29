"""Reports: ordering, exit codes and the three formats."""

from __future__ import annotations

import json

import pytest

from opmarket.compat import Finding, Report, Severity, check_bump, render


def _report(*severities: Severity, version_ok: bool = True) -> Report:
    findings = [
        Finding(
            "Op" + str(i),
            {"breaking": "attr-removed", "warning": "stateful-changed", "info": "attr-added"}[
                s.value
            ],
            s,
            f"message {i}",
        )
        for i, s in enumerate(severities)
    ]
    version = check_bump("1.0.0", "2.0.0" if version_ok else "1.0.1", "major")
    return Report("old.json", "new.json", findings, version=version, ops_compared=3)


@pytest.mark.parametrize(
    ("severities", "version_ok", "code"),
    [
        ((), True, 0),
        ((Severity.INFO, Severity.WARNING), True, 0),
        ((Severity.BREAKING,), True, 1),
        ((Severity.INFO,), False, 1),
    ],
)
def test_exit_code(severities: tuple[Severity, ...], version_ok: bool, code: int) -> None:
    assert _report(*severities, version_ok=version_ok).exit_code == code


def test_findings_sort_breaking_first() -> None:
    report = _report(Severity.INFO, Severity.BREAKING, Severity.WARNING)
    assert [f.severity for f in report.sorted_findings()] == [
        Severity.BREAKING,
        Severity.WARNING,
        Severity.INFO,
    ]


def test_json_has_the_documented_keys() -> None:
    data = json.loads(render(_report(Severity.BREAKING), "json"))
    assert set(data) >= {"compatible", "findings", "version", "summary", "ok"}
    assert data["summary"] == {"breaking": 1, "warning": 0, "info": 0}
    assert set(data["findings"][0]) >= {"op", "rule", "severity", "message", "hint"}


def test_text_shows_hints_for_problems_only() -> None:
    text = render(_report(Severity.BREAKING, Severity.INFO), "text")
    assert "Op0: attr-removed [breaking] message 0\n    fix: Keep the attr" in text
    assert "Op1: attr-added [info] message 1\nversion:" in text


def test_markdown_escapes_pipes() -> None:
    report = Report("a", "b", [Finding("Op", "attr-removed", Severity.BREAKING, "x | y")])
    assert "x \\| y" in render(report, "markdown")


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown format 'xml'"):
        render(_report(), "xml")
