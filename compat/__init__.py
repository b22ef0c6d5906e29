"""The compatibility engine: op-set sources, the rule table, reports, version policy and
``compat-check``.

Names are imported on first use, so that ``compat-check --help`` starts without the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket._lazy import lazy_exports

if TYPE_CHECKING:
    from opmarket.compat._check import check, check_sources
    from opmarket.compat._dists import (
        ENTRY_POINT_GROUP,
        MANIFEST,
        opset_from_dist,
        opset_from_wheel,
    )
    from opmarket.compat._engine import compare_history, compare_ops, compare_opsets
    from opmarket.compat._history import add_release, read_history, write_history
    from opmarket.compat._index import opset_from_index
    from opmarket.compat._report import FAIL_ON, FORMATS, Finding, Report, render
    from opmarket.compat._rules import RULES, RULES_BY_ID, Example, Rule, Scope, Severity
    from opmarket.compat._snapshot import take_snapshot
    from opmarket.compat._sources import Source, load_source
    from opmarket.compat._version import InvalidVersionError, VersionVerdict, check_bump

__all__ = [
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
]

# name -> the module that defines it (imported when the name is first read)
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "ENTRY_POINT_GROUP": "opmarket.compat._dists",
        "Example": "opmarket.compat._rules",
        "FAIL_ON": "opmarket.compat._report",
        "FORMATS": "opmarket.compat._report",
        "Finding": "opmarket.compat._report",
        "InvalidVersionError": "opmarket.compat._version",
        "MANIFEST": "opmarket.compat._dists",
        "RULES": "opmarket.compat._rules",
        "RULES_BY_ID": "opmarket.compat._rules",
        "Report": "opmarket.compat._report",
        "Rule": "opmarket.compat._rules",
        "Scope": "opmarket.compat._rules",
        "Severity": "opmarket.compat._rules",
        "Source": "opmarket.compat._sources",
        "VersionVerdict": "opmarket.compat._version",
        "add_release": "opmarket.compat._history",
        "check": "opmarket.compat._check",
        "check_bump": "opmarket.compat._version",
        "check_sources": "opmarket.compat._check",
        "compare_history": "opmarket.compat._engine",
        "compare_ops": "opmarket.compat._engine",
        "compare_opsets": "opmarket.compat._engine",
        "load_source": "opmarket.compat._sources",
        "opset_from_dist": "opmarket.compat._dists",
        "opset_from_index": "opmarket.compat._index",
        "opset_from_wheel": "opmarket.compat._dists",
        "read_history": "opmarket.compat._history",
        "render": "opmarket.compat._report",
        "take_snapshot": "opmarket.compat._snapshot",
        "write_history": "opmarket.compat._history",
    },
)
