"""Graph replay: load every graph saved with the old release and validate it against the new."""

from __future__ import annotations

from pathlib import Path

from opmarket.compat._report import Finding
from opmarket.compat._rules import RULES_BY_ID
from opmarket.compat._values import show_value, values_equal
from opmarket.registry import Graph, GraphProblem, graph_problems, load_graph
from opmarket.sdk import DocumentError, OpSet

__all__ = ["default_reliances", "graph_files", "replay_graphs"]


def graph_files(folder: str | Path) -> list[Path]:
    """The saved graphs (``*.json``) under ``folder``, recursively, sorted."""
    return sorted(p for p in Path(folder).rglob("*.json") if p.is_file())


def _op_of(problem: GraphProblem) -> str:
    return problem.op or "(graph)"


def default_reliances(graph: Graph, old: OpSet, new: OpSet) -> list[tuple[str, str, str]]:
    """``(node, op, message)`` for each node that leaves an attr to its op's default when
    that default differs between ``old`` and ``new``: the node computes something else under
    the new release, though the graph still validates. A node that stores the value (every
    graph saved with format_version 3 does) keeps its meaning."""
    out: list[tuple[str, str, str]] = []
    for node in graph:
        before, after = old.get(node.op), new.get(node.op)
        if before is None or after is None:
            continue
        for attr in before.attrs:
            changed = after.attr(attr.name)
            if attr.name in node.attrs or attr.default is None or changed is None:
                continue
            if changed.default is None:
                continue  # the graph no longer validates: graph-invalid names it
            if attr.type == changed.type and values_equal(attr.type, attr.default, changed.default):
                continue
            saved = " (saved before defaults were stored)" if graph.relies_on_defaults else ""
            out.append(
                (
                    node.name,
                    node.op,
                    f"node {node.name!r} takes attr {attr.name!r} from its default{saved}: "
                    f"{show_value(attr.type, attr.default)} when saved, "
                    f"{show_value(changed.type, changed.default)} now, so its result changes",
                )
            )
    return out


def replay_graphs(folder: str | Path, old: OpSet, new: OpSet) -> tuple[int, list[Finding]]:
    """How many graphs were replayed, and a finding for each that validated against ``old``
    but not ``new`` (breaking), or that did not validate against ``old`` either (warning).

    A file that cannot be read as a graph proves nothing about the change either: it is
    reported as that graph's warning, and the other graphs are still replayed.
    """
    files = graph_files(folder)
    out: list[Finding] = []
    invalid, before = RULES_BY_ID["graph-invalid"], RULES_BY_ID["graph-invalid-before"]
    reliance = RULES_BY_ID["graph-default-changed"]
    for path in files:
        label = str(path)
        try:
            graph = load_graph(path)
        except DocumentError as exc:
            out.append(
                Finding(
                    "(graph)",
                    before.id,
                    before.severity,
                    f"unreadable: {str(exc).splitlines()[0]}",
                    graph=label,
                )
            )
            continue
        old_problems = graph_problems(graph, old)
        if old_problems:
            out.append(
                Finding(
                    _op_of(old_problems[0]),
                    before.id,
                    before.severity,
                    "; ".join(p.message for p in old_problems),
                    graph=label,
                )
            )
            continue
        out.extend(
            Finding(_op_of(p), invalid.id, invalid.severity, p.message, graph=label)
            for p in graph_problems(graph, new)
        )
        out.extend(
            Finding(op, reliance.id, reliance.severity, message, graph=label)
            for _, op, message in default_reliances(graph, old, new)
        )
    return len(files), out
