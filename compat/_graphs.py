"""Graph replay: load every graph saved with the old release and validate it against the new."""

from __future__ import annotations

from pathlib import Path

from opmarket.compat._report import Finding
from opmarket.compat._rules import RULES_BY_ID
from opmarket.registry import GraphProblem, graph_problems, load_graph
from opmarket.sdk import DocumentError, OpSet

__all__ = ["graph_files", "replay_graphs"]


def graph_files(folder: str | Path) -> list[Path]:
    """The saved graphs (``*.json``) under ``folder``, recursively, sorted."""
    return sorted(p for p in Path(folder).rglob("*.json") if p.is_file())


def _op_of(problem: GraphProblem) -> str:
    return problem.op or "(graph)"


def replay_graphs(folder: str | Path, old: OpSet, new: OpSet) -> tuple[int, list[Finding]]:
    """How many graphs were replayed, and a finding for each that validated against ``old``
    but not ``new`` (breaking), or that did not validate against ``old`` either (warning).

    A file that cannot be read as a graph proves nothing about the change either: it is
    reported as that graph's warning, and the other graphs are still replayed.
    """
    files = graph_files(folder)
    out: list[Finding] = []
    invalid, before = RULES_BY_ID["graph-invalid"], RULES_BY_ID["graph-invalid-before"]
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
    return len(files), out
