from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import AmbiguousOpNameError, Registry
from opmarket.sdk import NotFoundError, OpDef, kernel, op


def test_three_ways_to_reach_an_op(zero_out: OpDef) -> None:
    x = np.array([1, 2], np.int32)
    for f in (opmarket.ops.zero_out, opmarket.ops.opm.zero_out, opmarket.ops["Opm>ZeroOut"]):
        assert f(x).tolist() == [1, 0]
    assert opmarket.ops.opm["ZeroOut"] is opmarket.ops.zero_out
    assert "zero_out" in dir(opmarket.ops) and "opm" in dir(opmarket.ops)


def test_short_name_shared_by_two_ops(registry: Registry, zero_out: OpDef) -> None:
    other = op("Acme>ZeroOut").input("x: float").output("y: float").build()

    @kernel("Acme>ZeroOut")
    def impl(x: Any) -> Any:
        return x * 0

    assert opmarket.ops.zero_out is not None  # cached before the second op arrives
    registry.register(other, impl)
    with pytest.raises(AmbiguousOpNameError) as info:
        _ = opmarket.ops.zero_out
    assert str(info.value) == (
        "opmarket.ops.zero_out is ambiguous: Acme>ZeroOut and Opm>ZeroOut both have that "
        "name; use opmarket.ops.acme.zero_out or opmarket.ops.opm.zero_out"
    )
    assert opmarket.ops.acme.zero_out(np.ones(1, np.float32)).tolist() == [0]
    assert "zero_out" not in dir(opmarket.ops)


def test_unknown_names(zero_out: OpDef) -> None:
    with pytest.raises(AttributeError, match=r"opmarket\.ops has no op 'zero_in'"):
        _ = opmarket.ops.zero_in
    with pytest.raises(AttributeError, match=r"opmarket\.ops\.opm has no op 'nothing'"):
        _ = opmarket.ops.opm.nothing
    with pytest.raises(NotFoundError, match="no op named 'Opm>Nothing' is registered"):
        opmarket.ops["Opm>Nothing"]


def test_nested_namespaces(registry: Registry) -> None:
    registry.register(op("Acme>Vision>Blur").build())
    assert opmarket.ops.acme.vision.blur.__name__ == "blur"
    assert opmarket.ops.blur is opmarket.ops.acme.vision.blur


def test_ops_cannot_be_assigned() -> None:
    with pytest.raises(AttributeError, match="read-only"):
        opmarket.ops.zero_out = None


def test_ops_named_follows_the_namespace_rules(registry: Registry, zero_out: OpDef) -> None:
    from opmarket.registry._namespace import ops_named

    def names(name: str) -> list[str]:
        return [o.name for o in ops_named(registry, name)]

    assert names("Opm>ZeroOut") == names("zero_out") == names("ZeroOut") == ["Opm>ZeroOut"]
    assert names("zero_in") == [] and names("opm") == []  # a namespace is not an op
    registry.register(op("Acme>ZeroOut").input("x: float").output("y: float").build())
    assert names("zero_out") == ["Acme>ZeroOut", "Opm>ZeroOut"]
    assert names("Acme>ZeroOut") == ["Acme>ZeroOut"]
