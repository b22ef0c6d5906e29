from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from opmarket.registry import Graph, OpResolver, Registry, run_graph, selective_resolver
from opmarket.sdk import Kernel, NotFoundError, OpDef


class Negate(Kernel):
    def compute(self, x: Any) -> Any:
        return -x


def graph_with_versions() -> Graph:
    g = Graph()
    x = g.placeholder(np.int32, [2], name="x")
    g.add("Opm>ZeroOut", x, name="v1")
    g.add("Opm>ZeroOut", x, name="v2", _version=2)
    return g


def test_custom_versions_pick_kernels(zero_out: OpDef, registry: Registry) -> None:
    r = OpResolver.from_registry(registry)
    r.add_custom("Opm>ZeroOut", Negate, version=2)
    v1, v2 = run_graph(graph_with_versions(), {"x": [3, 4]}, ["v1", "v2"], resolver=r)
    assert v1.tolist() == [3, 0] and v2.tolist() == [-3, -4]


def test_builtin_version_ranges(zero_out: OpDef) -> None:
    r = OpResolver()
    r.add_builtin("Opm>ZeroOut", None, min_version=1, max_version=3)
    assert r.ops() == [("Opm>ZeroOut", (1, 2, 3))]
    assert r.find("Opm>ZeroOut", 3) is None  # dispatch chooses
    with pytest.raises(
        NotFoundError,
        match=r"version 4 is not in the resolver \(it has "
        "versions 1, 2, 3\\)",
    ):
        r.find("Opm>ZeroOut", 4)
    with pytest.raises(ValueError, match="max_version 0 is below min_version 1"):
        r.add_builtin("Opm>ZeroOut", None, 1, 0)


def test_selective_resolver_keeps_what_the_graph_uses(zero_out: OpDef, registry: Registry) -> None:
    full = OpResolver.from_registry(registry)
    full.add_custom("Opm>ZeroOut", lambda x, *, preserve_index: x, version=2)
    g = graph_with_versions()
    small = selective_resolver(g, full)
    assert small.ops() == [("Opm>ZeroOut", (1, 2))]
    assert len(small) == 2 < len(full)
    assert run_graph(g, {"x": [3, 4]}, "v2", resolver=small).tolist() == [3, 4]
    g.add("Identity", "v1:0", name="i", _version=7)
    with pytest.raises(NotFoundError, match="the resolver lacks ops the graph uses: Identity v7"):
        selective_resolver(g, full)
