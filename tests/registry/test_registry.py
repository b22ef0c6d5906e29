from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from opmarket.registry import RegistrationError, Registry
from opmarket.sdk import DType, KernelDef, OpDef, kernel, not_differentiable, op, shape_fn
from tests.registry.conftest import ZERO_OUT_ALL


def test_identical_reregistration_is_fine(registry: Registry, zero_out: OpDef) -> None:
    registry.register(*ZERO_OUT_ALL, source="again")
    assert registry.source("Opm>ZeroOut") == "tests"
    assert len(registry.kernels("Opm>ZeroOut")) == 1


def test_a_different_definition_names_both_sources(registry: Registry, zero_out: OpDef) -> None:
    other = op("Opm>ZeroOut").input("to_zero: int32").output("zeroed: int32").build()
    with pytest.raises(RegistrationError) as info:
        registry.register(other, source="plugin other (opmarket-other 2.0)")
    assert str(info.value) == (
        "op 'Opm>ZeroOut' from plugin other (opmarket-other 2.0) differs from the one "
        "registered by tests"
    )


def test_kernel_for_unknown_op(registry: Registry) -> None:
    @kernel("Opm>Nope")
    def impl(x: Any) -> Any:
        return x

    with pytest.raises(RegistrationError, match="kernel for unknown op 'Opm>Nope' from here"):
        registry.register(impl, source="here")


def test_constraint_outside_allowed_types(registry: Registry, zero_out: OpDef) -> None:
    @kernel("Opm>ZeroOut", constraints={"T": [np.int64, np.int32]})
    def impl(x: Any, *, preserve_index: int) -> Any:
        return x

    with pytest.raises(RegistrationError) as info:
        registry.register(impl, source="here")
    assert "T constraint int64 is outside the op's allowed types (float, double, int32)" in str(
        info.value
    )


def test_every_problem_is_reported_and_nothing_is_kept(registry: Registry) -> None:
    x = op("Opm>X").input("a: T").output("b: T").attr("T: type").build()

    @kernel("Opm>X", constraints={"U": [np.int32]}, host_memory=["c"], priority=1)
    def impl(a: Any) -> Any:
        return a

    @kernel("Opm>X")
    def clash1(a: Any) -> Any:
        return a

    @kernel("Opm>X")
    def clash2(a: Any) -> Any:
        return a

    with pytest.raises(RegistrationError) as info:
        registry.register(x, impl, clash1, clash2, source="here")
    lines = str(info.value).splitlines()
    assert len(lines) == 3
    assert "constraint on 'U', which is not a type attr of Opm>X" in lines[0]
    assert "host_memory names 'c'" in lines[1]
    assert "overlaps kernel" in lines[2] and "give one a higher priority" in lines[2]
    assert "Opm>X" not in registry


def test_conflicting_shape_functions(registry: Registry, zero_out: OpDef) -> None:
    @shape_fn("Opm>ZeroOut")
    def other(c: Any) -> None:
        pass

    with pytest.raises(
        RegistrationError,
        match="shape function for 'Opm>ZeroOut' from b conflicts with the one registered by tests",
    ):
        registry.register(other, source="b")


def test_register_rejects_other_things(registry: Registry) -> None:
    with pytest.raises(RegistrationError, match="cannot register 42"):
        registry.register(42)


def test_kernels_export_as_kernel_defs(registry: Registry, zero_out: OpDef) -> None:
    (kd,) = registry.kernel_defs("Opm>ZeroOut")
    assert kd == KernelDef("Opm>ZeroOut", "CPU", (("T", (DType.FLOAT, DType.DOUBLE, DType.INT32)),))
    snap = registry.snapshot(source="tests", name="zero-out", version="1")
    assert [o.name for o in snap] == ["Opm>ZeroOut"]
    assert snap.kernels == (kd,)


def test_unregister_source(registry: Registry, zero_out: OpDef) -> None:
    registry.register(op("Opm>Other").build(), not_differentiable("Opm>Other"), source="other")
    registry.unregister_source("tests")
    assert "Opm>ZeroOut" not in registry
    assert registry.gradient("Opm>Other") == not_differentiable("Opm>Other")
    assert "Identity" in registry
