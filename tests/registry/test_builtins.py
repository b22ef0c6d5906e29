"""The built-in ops are the ops their TensorFlow specs declare."""

from __future__ import annotations

from opmarket.registry import BUILTIN_OPS
from opmarket.sdk import op


def test_placeholder_is_what_its_spec_says() -> None:
    # Its default is given as a value (no protobuf text parser at import): the same op.
    spec = (
        op("Placeholder")
        .output("output: dtype")
        .attr("dtype: type")
        .attr("shape: shape = { unknown_rank: true }")
        .doc("A graph input, fed when the graph runs.")
        .build()
    )
    assert BUILTIN_OPS["Placeholder"] == spec
    assert list(BUILTIN_OPS) == ["Placeholder", "Const", "Identity", "NoOp", "AddN"]
