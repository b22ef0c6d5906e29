"""Graph replay: graphs saved with the old release, validated against the new one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from opmarket.compat import check_sources
from opmarket.compat._graphs import replay_graphs
from opmarket.compat._sources import Source
from opmarket.registry import Graph, Node, save_graph
from opmarket.sdk import DType, OpSet

Release = Callable[..., OpSet]


def _zero_out_graph(dtype: str = "int32") -> Graph:
    g = Graph()
    x = g.placeholder(dtype, name="x")
    g.add_node(Node("zero", "Opm>ZeroOut", (x.output(0),), {"T": DType[dtype.upper()]}))
    return g


def _narrow(opset: OpSet) -> OpSet:
    """The same release with ZeroOut's T no longer allowing int32."""
    (zero,) = opset.ops
    t = zero.attr("T")
    assert t is not None
    narrowed = zero.replace(attrs=(t.__class__("T", "type", allowed_values=(DType.FLOAT,)),))
    return OpSet.of([narrowed], opset.kernels, name=opset.name, version=opset.version)


def test_a_graph_that_no_longer_validates_is_breaking(tmp_path: Path, release: Release) -> None:
    old = release("1.0.0")
    save_graph(_zero_out_graph("int32"), tmp_path / "int.json", ops=old)
    (tmp_path / "nested").mkdir()
    save_graph(_zero_out_graph("float"), tmp_path / "nested" / "float.json", ops=old)
    count, findings = replay_graphs(tmp_path, old, _narrow(old))
    assert count == 2
    assert [(f.rule, f.op, Path(f.graph).name) for f in findings] == [
        ("graph-invalid", "Opm>ZeroOut", "int.json")
    ]
    assert "int32" in findings[0].message


def test_a_graph_invalid_before_is_a_warning(tmp_path: Path, release: Release) -> None:
    g = Graph([Node("u", "NoSuchOp")])
    old = release("1.0.0")
    save_graph(g, tmp_path / "odd.json", ops=old)
    count, findings = replay_graphs(tmp_path, old, old)
    assert count == 1
    assert [(f.rule, f.severity.value) for f in findings] == [("graph-invalid-before", "warning")]


def test_graph_findings_make_the_report_incompatible(tmp_path: Path, release: Release) -> None:
    old = release("1.0.0")
    save_graph(_zero_out_graph("int32"), tmp_path / "g.json", ops=old)
    report = check_sources(
        Source("old", old, True), Source("new", _narrow(old), True), graphs=tmp_path
    )
    assert report.graphs_checked == 1
    assert not report.compatible
    rules = {f.rule for f in report.findings}
    assert {"graph-invalid", "attr-allowed-values-narrowed"} <= rules


def test_an_unreadable_graph_is_reported_and_the_others_replayed(
    tmp_path: Path, release: Release
) -> None:
    (tmp_path / "bad.json").write_text("{", encoding="utf-8")
    old = release("1.0.0")
    save_graph(_zero_out_graph("int32"), tmp_path / "good.json", ops=old)
    count, findings = replay_graphs(tmp_path, old, _narrow(old))
    assert count == 2
    assert [(f.rule, f.severity.value, Path(f.graph).name) for f in findings] == [
        ("graph-invalid-before", "warning", "bad.json"),
        ("graph-invalid", "breaking", "good.json"),
    ]
    assert findings[0].message.startswith("unreadable: ")


def test_a_graph_using_a_removed_op_names_the_op(tmp_path: Path, release: Release) -> None:
    old = release("1.0.0")
    save_graph(_zero_out_graph("int32"), tmp_path / "g.json", ops=old)
    count, findings = replay_graphs(tmp_path, old, OpSet.of([], name=old.name, version="2.0.0"))
    assert count == 1
    assert [(f.rule, f.op) for f in findings] == [("graph-invalid", "Opm>ZeroOut")]
    assert findings[0].message == "node 'zero': op 'Opm>ZeroOut' is not registered"
