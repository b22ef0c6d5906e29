"""The compatibility engine: op-set sources, the rule table, reports, version policy and
``compat-check``."""

from opmarket.compat._check import check, check_sources
from opmarket.compat._engine import compare_history, compare_ops, compare_opsets
from opmarket.compat._history import add_release, read_history, write_history
from opmarket.compat._report import FORMATS, Finding, Report, render
from opmarket.compat._rules import RULES, RULES_BY_ID, Example, Rule, Scope, Severity
from opmarket.compat._snapshot import take_snapshot
from opmarket.compat._sources import (
    ENTRY_POINT_GROUP,
    MANIFEST,
    Source,
    load_source,
    opset_from_dist,
    opset_from_index,
    opset_from_wheel,
)
from opmarket.compat._version import InvalidVersionError, VersionVerdict, check_bump

__all__ = [
    "ENTRY_POINT_GROUP",
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
]
