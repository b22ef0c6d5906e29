"""One whole check, as compat-check runs it: sources -> findings -> graphs -> version verdict."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from opmarket.compat._engine import compare_history, compare_opsets
from opmarket.compat._report import Finding, Report
from opmarket.compat._rules import RULES_BY_ID, Severity
from opmarket.compat._sources import Source, load_source
from opmarket.compat._version import check_bump, required_bump
from opmarket.sdk import DocumentError, Problem

__all__ = ["check", "check_sources"]


def _document_findings(problems: Iterable[Problem]) -> list[Finding]:
    rule = RULES_BY_ID["invalid-opdef"]
    return [
        Finding(
            p.op or "(file)",
            rule.id,
            rule.severity,
            ": ".join(x for x in (p.source, p.field, p.message) if x),
        )
        for p in problems
    ]


def check_sources(
    old: Source | None,
    new: Source,
    *,
    history: str | Path | None = None,
    graphs: str | Path | None = None,
    old_version: str | None = None,
    new_version: str | None = None,
    direction: str = "backward",
) -> Report:
    """Compare loaded sources: ``old`` (or every release of ``history``) against ``new``.

    PyTorch schema lists are compared with PyTorch's schema rules only, in ``direction``
    (``backward`` or ``forward``); op-sets with TensorFlow's rules (backward) and, for the
    schemas the torch bridge registers, PyTorch's rules in ``direction``.
    """
    from opmarket.compat._torch_check import compare_opset_schemas

    if new.schemas is not None or (old is not None and old.schemas is not None):
        return _schema_report(old, new, history=history, graphs=graphs, direction=direction)
    if history is not None:
        from opmarket.compat._history import read_history  # lazy: only with --history

        releases = read_history(history)
        findings = compare_history(releases, new.opset, new_kernels_known=new.kernels_known)
        old_label = str(history)
        latest = releases[-1][1] if releases else None
        old_version = old_version or (latest.version if latest is not None else None)
    else:
        assert old is not None
        findings = compare_opsets(
            old.opset,
            new.opset,
            old_kernels_known=old.kernels_known,
            new_kernels_known=new.kernels_known,
        )
        old_label = old.label
        latest = old.opset
        old_version = old_version or old.version or None
        findings = _document_findings(old.problems) + findings
    findings = _document_findings(new.problems) + findings
    plugins = new.torch and (old.torch if old is not None else Path(str(history)).suffix == ".json")
    if latest is not None and plugins:
        findings += compare_opset_schemas(latest, new.opset, direction, old_label, new.label)
    report = Report(old_label, new.label, findings, ops_compared=len(new.opset))
    if graphs is not None and latest is not None:
        from opmarket.compat._graphs import replay_graphs  # lazy: the graph run time

        report.graphs_checked, graph_findings = replay_graphs(graphs, latest, new.opset)
        report.findings.extend(graph_findings)
    new_version = new_version or new.version or None
    if old_version and new_version:
        op_findings = [f for f in report.findings if not f.graph and f.rule != "invalid-opdef"]
        level = required_bump(
            any(f.severity is Severity.BREAKING for f in report.findings), bool(op_findings)
        )
        report.version = check_bump(old_version, new_version, level)
    return report


def _schema_report(
    old: Source | None,
    new: Source,
    *,
    history: str | Path | None,
    graphs: str | Path | None,
    direction: str,
) -> Report:
    from opmarket.compat._torch_check import compare_schemas

    if history is not None or graphs is not None:
        what = "--history" if history is not None else "--graphs"
        raise DocumentError(new.label, f"{what} does not apply to PyTorch schema lists")
    assert old is not None
    for a, b in ((old, new), (new, old)):
        if a.schemas is None:
            raise DocumentError(
                a.label, f"is an op-set, {b.label} a PyTorch schema list: compare like with like"
            )
    assert old.schemas is not None and new.schemas is not None
    findings = compare_schemas(old.schemas, new.schemas, direction)
    return Report(old.label, new.label, findings, ops_compared=len(new.schemas))


def check(
    old: str | None,
    new: str,
    *,
    history: str | Path | None = None,
    graphs: str | Path | None = None,
    old_version: str | None = None,
    new_version: str | None = None,
    index_url: str | None = None,
    direction: str = "backward",
) -> Report:
    """Check release ``new`` against ``old`` (or against every release in ``history``).

    Sources are paths, installed distribution names or ``name==version`` (see load_source).
    Raises DocumentError/InvalidVersionError for input that cannot be read.
    """
    fetcher = None
    if index_url is not None:  # one deadline for all the command asks of the index
        from opmarket.compat._index import new_fetcher  # lazy: an HTTP client

        fetcher = new_fetcher()
    old_source = None
    if old is not None:
        old_source = load_source(old, index_url=index_url, fetcher=fetcher)
    new_source = load_source(new, index_url=index_url, fetcher=fetcher)
    return check_sources(
        old_source,
        new_source,
        history=history,
        graphs=graphs,
        old_version=old_version,
        new_version=new_version,
        direction=direction,
    )
