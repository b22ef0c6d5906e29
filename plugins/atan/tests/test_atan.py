"""Atan: the lifecycle kernel, its gradient, and the seed's model trained through a graph."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import opmarket
from opmarket.registry import (
    Graph,
    Registry,
    check_conformance,
    check_gradient,
    gradients,
    isolated_registry,
    run_graph,
)
from opmarket.sdk import Kernel

# The seed's training data: y = atan(x + 1.0).
X = np.array([-8, 0.5, 2, 2.2, 201], np.float32)
Y = np.array([-1.4288993, 0.98279375, 1.2490457, 1.2679114, 1.5658458], np.float32)


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["atan"]) as reg:
        yield reg


def test_the_installed_plugin_runs_through_ops(registry: Registry) -> None:
    y = opmarket.ops.atan(np.array([0.0, 1.0, -1.0], np.float32))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, [0.0, np.pi / 4, -np.pi / 4], rtol=1e-6)
    assert opmarket.ops.opm.atan(np.float64(1.0)) == pytest.approx(np.pi / 4)
    assert registry.source("Opm>Atan") == "plugin atan (opmarket-atan 0.1.0)"


def test_the_kernel_goes_through_init_prepare_invoke(registry: Registry) -> None:
    (spec,) = registry.kernels("Opm>Atan")
    assert isinstance(spec.impl, type) and issubclass(spec.impl, Kernel)
    k = spec.impl({"T": "float"}, spec.options)
    assert k.compute_dtype == np.float64  # from the options bytes
    k.prepare(np.zeros((2, 3), np.float32))
    assert k.output_shape == (2, 3)  # prepare sizes the output
    assert k.compute(np.ones((2, 3), np.float32)).shape == (2, 3)
    with pytest.raises(ValueError, match="unknown options"):
        spec.impl({}, b'{"precision": 3}')


def test_every_kernel_matches_the_reference_and_the_gradient_is_right(registry: Registry) -> None:
    check_conformance("Opm>Atan", trials=5).raise_for_failures()
    assert check_gradient("Opm>Atan", [np.array([-3.0, -0.5, 0.0, 0.7, 4.0])]) < 1e-6


def test_the_seeds_model_learns_offset_near_one(registry: Registry) -> None:
    # y = atan(x + offset), offset a plain input added before the op, as in the seed.
    g = Graph()
    x = g.placeholder(np.float32, [5], name="x")
    offset = g.placeholder(np.float32, [5], name="offset")  # the scalar, broadcast
    g.add("AddN", x, offset, name="shifted")
    g.add("Opm>Atan", "shifted", name="y")
    value, rate = 0.0, 0.5
    for _ in range(300):
        feeds = {"x": X, "offset": np.full(5, value, np.float32)}
        predicted = run_graph(g, feeds, "y")
        # loss = sum((predicted - Y)^2); d loss / d predicted = 2 (predicted - Y)
        (grad,) = gradients(g, "y", "offset", feeds, grad_ys=[2 * (predicted - Y)])
        assert grad is not None
        value -= rate * float(grad.sum())
    assert value == pytest.approx(1.0, abs=1e-3)
