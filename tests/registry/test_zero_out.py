"""Issue 3's "done when": ZeroOut from TensorFlow's guide, end to end."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import opmarket
from opmarket.registry import (
    Graph,
    check_conformance,
    check_gradient,
    infer_graph_shapes,
    load_graph,
    run_graph,
    save_graph,
)
from opmarket.sdk import DType, InvalidArgumentError, OpDef, infer_error, infer_ok
from tests.registry.conftest import zero_out_shape


def test_zero_out_end_to_end(tmp_path: Path, zero_out: OpDef) -> None:
    # Polymorphic T, preserve_index, through opmarket.ops.
    assert opmarket.ops.zero_out(np.array([5, 4, 3], np.int32)).tolist() == [5, 0, 0]
    assert opmarket.ops.zero_out(np.array([5.0, 4.0], np.float64), preserve_index=1).tolist() == [
        0.0,
        4.0,
    ]
    # The vector check, before the kernel runs.
    with pytest.raises(InvalidArgumentError, match="Shape must be rank 1 but is rank 2"):
        opmarket.ops.zero_out(np.ones((2, 2), np.float32))
    # A saved graph round-trips, shape-infers and runs.
    g = Graph()
    x = g.placeholder(np.float32, [3], name="x")
    g.add("Opm>ZeroOut", x, name="zeroed", preserve_index=2)
    save_graph(g, tmp_path / "zero_out.json")
    loaded = load_graph(tmp_path / "zero_out.json")
    # Saved with every attr stored: the one given, and T inferred from the input.
    assert loaded["zeroed"].attrs == {"preserve_index": 2, "T": DType.FLOAT}
    assert infer_graph_shapes(loaded)["zeroed"] == [(3,)]
    assert run_graph(loaded, {"x": [1, 2, 3]}, "zeroed").tolist() == [0, 0, 3]
    # The shape function alone, and the gradient against central differences.
    infer_ok(zero_out, zero_out_shape, "?", "[?]")
    infer_error(zero_out, zero_out_shape, "[2,2]", "must be rank 1")
    assert check_gradient("Opm>ZeroOut", [np.array([1.0, -2.0, 3.0])], {"preserve_index": 1}) < 1e-6
    # Every kernel against the reference, per dtype.
    check_conformance("Opm>ZeroOut").raise_for_failures()
