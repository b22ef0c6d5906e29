from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from opmarket.registry import (
    Graph,
    Registry,
    check_gradient,
    compute_gradient,
    gradients,
    max_error,
)
from opmarket.sdk import (
    GradientOp,
    NotFoundError,
    OpDef,
    kernel,
    not_differentiable,
    op,
    register_gradient,
)


def test_zero_out_passes_the_numeric_gradient_check(zero_out: OpDef) -> None:
    x = np.array([0.5, -1.0, 2.0, 3.0])
    assert check_gradient("Opm>ZeroOut", [x], {"preserve_index": 2}) < 1e-6


def test_compute_gradient_jacobians(zero_out: OpDef) -> None:
    g = Graph()
    x = g.placeholder(np.float64, [3], name="x")
    z = g.add("Opm>ZeroOut", x, name="z", preserve_index=1)
    ((theory, numeric),) = compute_gradient(g, ["x"], z.output(0), {"x": np.ones(3)})
    expected = np.zeros((3, 3))
    expected[1, 1] = 1
    np.testing.assert_allclose(theory, expected)
    np.testing.assert_allclose(numeric, expected, atol=1e-9)
    assert max_error([(theory, numeric)]) < 1e-9


def test_a_wrong_gradient_is_caught(registry: Registry) -> None:
    square = op("Opm>Square").input("x: double").output("y: double").build()

    @kernel("Opm>Square")
    def impl(x: Any) -> Any:
        return x * x

    @register_gradient("Opm>Square")
    def wrong(op: GradientOp, grad: Any) -> Any:
        return grad * op.inputs[0]  # missing the factor 2

    registry.register(square, impl, wrong)
    with pytest.raises(AssertionError, match=r"the gradient of Opm>Square is off by 3"):
        check_gradient("Opm>Square", [np.array([1.0, 3.0])])


def test_reverse_mode_sums_over_paths(zero_out: OpDef) -> None:
    g = Graph()
    x = g.placeholder(np.float64, [3], name="x")
    z = g.add("Opm>ZeroOut", x, name="z")
    i = g.add("Identity", x, name="i")
    g.add("AddN", z, i, x, name="s")
    (dx,) = gradients(g, "s", "x", {"x": np.array([1.0, 2.0, 3.0])})
    assert dx is not None and dx.tolist() == [3.0, 2.0, 2.0]


def test_unconnected_and_stopped_gradients(registry: Registry, zero_out: OpDef) -> None:
    registry.register(
        op("Opm>Stop").input("x: T").output("y: T").attr("T: type").build(),
        kernel("Opm>Stop")(lambda x: x),
        not_differentiable("Opm>Stop"),
    )
    g = Graph()
    x = g.placeholder(np.float64, [2], name="x")
    w = g.placeholder(np.float64, [2], name="w")
    s = g.add("Opm>Stop", x, name="stop")
    g.add("AddN", s, w, name="y")
    dx, dw = gradients(g, "y", ["x", "w"], {"x": np.ones(2), "w": np.ones(2)})
    assert dx is None
    assert dw is not None and dw.tolist() == [1.0, 1.0]


def test_missing_gradient_names_op_and_node(registry: Registry) -> None:
    registry.register(
        op("Opm>NoGrad").input("x: double").output("y: double").build(),
        kernel("Opm>NoGrad")(lambda x: x),
    )
    g = Graph()
    x = g.placeholder(np.float64, [1], name="x")
    g.add("Opm>NoGrad", x, name="n")
    with pytest.raises(
        NotFoundError,
        match="no gradient is registered for op 'Opm>NoGrad' "
        r"\(node 'n'\)",
    ):
        gradients(g, "n", "x", {"x": np.ones(1)})


def test_fit_by_gradient_descent(registry: Registry) -> None:
    # y = (x + offset) ** 2 summed; offset is a plain input, as in LiteRT's Atan example.
    sq = op("Opm>Sq").input("x: double").output("y: double").build()

    @kernel("Opm>Sq")
    def impl(x: Any) -> Any:
        return x * x

    @register_gradient("Opm>Sq")
    def grad(op: GradientOp, g: Any) -> Any:
        return 2 * op.inputs[0] * g

    registry.register(sq, impl, grad)
    g = Graph()
    x = g.placeholder(np.float64, [3], name="x")
    off = g.placeholder(np.float64, [3], name="offset")
    s = g.add("AddN", x, off, name="s")
    g.add("Opm>Sq", s, name="loss")
    xs = np.array([1.0, 2.0, 3.0])
    offset = np.zeros(3)
    for _ in range(100):
        (d,) = gradients(g, "loss", "offset", {"x": xs, "offset": offset})
        assert d is not None
        offset -= 0.1 * d
    np.testing.assert_allclose(offset, -xs, atol=1e-6)
