"""The generated rules reference is up to date, and the public API is pinned."""

from __future__ import annotations

from pathlib import Path

import opmarket.compat
from opmarket.compat._docs import rules_reference

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_rules_reference_is_up_to_date() -> None:
    committed = (DOCS / "compat-rules.md").read_text(encoding="utf-8")
    assert committed == rules_reference(), (
        "docs/compat-rules.md is stale: run "
        "`python -m opmarket.compat._docs > docs/compat-rules.md`"
    )


def test_every_rule_is_in_the_user_guide() -> None:
    guide = (DOCS / "compat.md").read_text(encoding="utf-8")
    assert "compat-rules.md" in guide
    for option in (
        "--history",
        "--graphs",
        "--format",
        "--fail-on",
        "--old-version",
        "--index-url",
        "--direction",
    ):
        assert option in guide


def test_exported_members() -> None:
    exported = opmarket.compat.__all__
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n[0].islower(), n))
    assert set(exported) == {
        "ENTRY_POINT_GROUP",
        "FAIL_ON",
        "FORMATS",
        "MANIFEST",
        "RULES",
        "RULES_BY_ID",
        "Example",
        "Finding",
        "InvalidVersionError",
        "Report",
        "Rule",
        "Scope",
        "Severity",
        "Source",
        "VersionVerdict",
        "add_release",
        "check",
        "check_bump",
        "check_sources",
        "compare_history",
        "compare_ops",
        "compare_opsets",
        "load_source",
        "opset_from_dist",
        "opset_from_index",
        "opset_from_wheel",
        "read_history",
        "render",
        "take_snapshot",
        "write_history",
    }
    for name in exported:
        assert getattr(opmarket.compat, name).__doc__ or name.isupper(), name
