"""The compatibility engine: op-set sources, the rule table, reports, version policy and
``compat-check``'s checks (the command itself is in opmarket.cli).

Names are imported on first use, so that ``compat-check --help`` starts without the engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from opmarket.sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from opmarket.compat._check import check as check
    from opmarket.compat._check import check_sources as check_sources
    from opmarket.compat._dists import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
    from opmarket.compat._dists import MANIFEST as MANIFEST
    from opmarket.compat._dists import opset_from_dist as opset_from_dist
    from opmarket.compat._dists import opset_from_wheel as opset_from_wheel
    from opmarket.compat._engine import compare_history as compare_history
    from opmarket.compat._engine import compare_ops as compare_ops
    from opmarket.compat._engine import compare_opsets as compare_opsets
    from opmarket.compat._history import add_release as add_release
    from opmarket.compat._history import read_history as read_history
    from opmarket.compat._history import write_history as write_history
    from opmarket.compat._index import opset_from_index as opset_from_index
    from opmarket.compat._report import FAIL_ON as FAIL_ON
    from opmarket.compat._report import FORMATS as FORMATS
    from opmarket.compat._report import Finding as Finding
    from opmarket.compat._report import Report as Report
    from opmarket.compat._report import render as render
    from opmarket.compat._rules import RULES as RULES
    from opmarket.compat._rules import RULES_BY_ID as RULES_BY_ID
    from opmarket.compat._rules import Example as Example
    from opmarket.compat._rules import Rule as Rule
    from opmarket.compat._rules import Scope as Scope
    from opmarket.compat._rules import Severity as Severity
    from opmarket.compat._snapshot import take_snapshot as take_snapshot
    from opmarket.compat._sources import Source as Source
    from opmarket.compat._sources import load_source as load_source
    from opmarket.compat._version import InvalidVersionError as InvalidVersionError
    from opmarket.compat._version import VersionVerdict as VersionVerdict
    from opmarket.compat._version import check_bump as check_bump

# module -> its public names: __all__ and the names' loading on first use come from here
# (tests/test_exports.py checks the imports above against it).
EXPORTS = {
    "opmarket.compat._check": ("check", "check_sources"),
    "opmarket.compat._dists": (
        "ENTRY_POINT_GROUP",
        "MANIFEST",
        "opset_from_dist",
        "opset_from_wheel",
    ),
    "opmarket.compat._engine": ("compare_history", "compare_ops", "compare_opsets"),
    "opmarket.compat._history": ("add_release", "read_history", "write_history"),
    "opmarket.compat._index": ("opset_from_index",),
    "opmarket.compat._report": ("FAIL_ON", "FORMATS", "Finding", "Report", "render"),
    "opmarket.compat._rules": ("RULES", "RULES_BY_ID", "Example", "Rule", "Scope", "Severity"),
    "opmarket.compat._snapshot": ("take_snapshot",),
    "opmarket.compat._sources": ("Source", "load_source"),
    "opmarket.compat._version": ("InvalidVersionError", "VersionVerdict", "check_bump"),
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, EXPORTS)
