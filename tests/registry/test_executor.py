from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opmarket.registry import (
    Graph,
    InvalidGraphError,
    Node,
    Registry,
    infer_graph_shapes,
    load_graph,
    run_graph,
    save_graph,
)
from opmarket.sdk import DType, InvalidArgumentError, OpDef, kernel


def zero_out_graph() -> Graph:
    g = Graph()
    x = g.placeholder(np.float32, [-1], name="x")
    z = g.add("Opm>ZeroOut", x, name="z", preserve_index=1)
    g.add("AddN", z, x, name="sum")
    return g


def test_zero_out_round_trips_through_a_saved_graph(tmp_path: Path, zero_out: OpDef) -> None:
    path = tmp_path / "zero_out.json"
    save_graph(zero_out_graph(), path)
    g = load_graph(path)
    x = np.array([5, 4, 3], np.float32)
    z, total = run_graph(g, {"x": x}, ["z:0", "sum"])
    assert z.tolist() == [0, 4, 0]
    assert total.tolist() == [5, 8, 3]
    assert run_graph(g, {"x": x}, "z").tolist() == [0, 4, 0]


def test_an_old_graph_gets_new_defaults(tmp_path: Path, zero_out: OpDef) -> None:
    # Saved before preserve_index existed: the default (0) applies.
    path = tmp_path / "old.json"
    path.write_text(
        '{"format": "opmarket.graph", "versions": {"producer": 1, "min_consumer": 0},'
        ' "nodes": [{"name": "x", "op": "Placeholder", "attrs": {"dtype": {"dtype": "int32"}}},'
        ' {"name": "z", "op": "Opm>ZeroOut", "inputs": ["x:0"],'
        ' "attrs": {"T": {"dtype": "int32"}}}]}'
    )
    out = run_graph(load_graph(path), {"x": [7, 8]}, "z")
    assert out.tolist() == [7, 0]


def test_invalid_graphs_do_not_run(zero_out: OpDef) -> None:
    g = zero_out_graph()
    g.add_node(Node("bad", "Opm>ZeroOut", ("x:0",), {"colour": 1}))
    with pytest.raises(InvalidGraphError) as info:
        run_graph(g, {"x": np.ones(2, np.float32)}, "z")
    assert info.value.problems == (
        "node 'bad' (Opm>ZeroOut): unknown attr 'colour'; Opm>ZeroOut has attrs T, preserve_index",
    )


@pytest.mark.parametrize(
    ("feeds", "message"),
    [
        ({}, "placeholder 'x' needs a value in feeds"),
        ({"x": np.ones(2, np.float64)}, "placeholder 'x' is float, fed float64"),
        ({"x": np.ones((2, 2), np.float32)}, "placeholder 'x' has shape [?], fed [2,2]"),
        ({"x": np.ones(1, np.float32)}, "node 'z': preserve_index out of range"),
    ],
)
def test_run_errors(zero_out: OpDef, feeds: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("[", r"\[").replace("?", r"\?")):
        run_graph(zero_out_graph(), feeds, "sum")


def test_shape_inference_without_running(zero_out: OpDef) -> None:
    shapes = infer_graph_shapes(zero_out_graph())
    assert shapes == {"x": [(None,)], "z": [(None,)], "sum": [(None,)]}
    g = Graph()
    x = g.placeholder(np.int32, [2, 3], name="x")
    g.add("Opm>ZeroOut", x, name="z")
    c = g.constant(np.zeros((4,), np.int32), name="c")
    g.add("AddN", c, c, name="s")
    with pytest.raises(InvalidGraphError) as info:
        infer_graph_shapes(g)
    assert info.value.problems == ("node 'z' (Opm>ZeroOut): Shape must be rank 1 but is rank 2",)
    assert infer_graph_shapes(g, input_shapes={"x": (5,)})["s"] == [(4,)]


def test_labels_and_devices_from_nodes(registry: Registry) -> None:
    from opmarket.sdk import op

    registry.register(op("Opm>Which").output("y: string").build())

    @kernel("Opm>Which")
    def plain() -> Any:
        return np.array("plain", dtype=object)

    @kernel("Opm>Which", label="special")
    def special() -> Any:
        return np.array("special", dtype=object)

    registry.register(plain, special)
    g = Graph([Node("a", "Opm>Which"), Node("b", "Opm>Which", attrs={"_kernel": "special"})])
    assert [v.item() for v in run_graph(g, {}, ["a", "b"])] == ["plain", "special"]
    g.add_node(Node("c", "Opm>Which", device="GPU"))
    with pytest.raises(Exception, match="no kernel for Opm>Which on GPU"):
        run_graph(g, {}, "c")
    assert DType.STRING.numpy == np.dtype(object)
