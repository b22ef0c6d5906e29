from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from opmarket.registry import Registry, check_conformance
from opmarket.sdk import OpDef, kernel


def test_zero_out_conforms_on_every_dtype(zero_out: OpDef) -> None:
    report = check_conformance("Opm>ZeroOut")
    assert report.ok, str(report)
    assert [dict(r.types)["T"] for r in report.results] == ["float", "double", "int32"]
    assert all(r.status == "passed" for r in report.results)


def test_a_wrong_kernel_fails(zero_out: OpDef, registry: Registry) -> None:
    @kernel("Opm>ZeroOut", constraints={"T": [np.int32]}, priority=1)
    def off_by_one(x: Any, *, preserve_index: int) -> Any:
        out = np.zeros_like(x)
        out[preserve_index] = x[preserve_index] + 1
        return out

    registry.register(off_by_one)
    report = check_conformance("Opm>ZeroOut")
    assert not report.ok
    (failure,) = report.failures
    assert failure.kernel.endswith("off_by_one") and dict(failure.types) == {"T": "int32"}
    assert "differs from the reference" in failure.message
    with pytest.raises(AssertionError, match="conformance failed"):
        report.raise_for_failures()


def test_ops_without_reference_are_skipped(registry: Registry) -> None:
    report = check_conformance("Identity")
    assert report.ok
    assert {r.status for r in report.results} == {"skipped"}


def test_a_generator_that_raises_fails_each_binding(registry: Registry) -> None:
    from opmarket.sdk import input_generator, op, reference

    double = op("Test>Double").input("x: T").output("y: T").attr("T: {float, int32}").build()

    @kernel("Test>Double")
    def impl(x: Any) -> Any:
        return x * 2

    @reference("Test>Double")
    def ref(x: Any) -> Any:
        return x * 2

    @input_generator("Test>Double")
    def broken(rng: Any, types: Any) -> Any:
        raise ValueError("no inputs today")

    registry.register(double, impl, ref, broken)
    report = check_conformance("Test>Double")
    assert [r.message for r in report.failures] == [
        "input generator raised ValueError('no inputs today')"
    ] * 2


def test_check_kernel_runs_given_samples_and_names_the_failing_one(
    zero_out: OpDef, registry: Registry
) -> None:
    from opmarket.registry._conformance import (
        ConformanceStatus,
        Sample,
        check_kernel,
        generated_samples,
        type_bindings,
    )
    from opmarket.sdk import DType

    (spec,) = registry.kernels("Opm>ZeroOut")
    assert [b["T"] for b in type_bindings(spec, registry)] == [
        DType.FLOAT,
        DType.DOUBLE,
        DType.INT32,
    ]
    types = {"T": DType.INT32}
    samples = generated_samples(registry, spec, types, trials=2, seed=0)
    assert [s.label for s in samples] == ["trial 0", "trial 1"]
    ref = registry.reference("Opm>ZeroOut")
    assert ref is not None
    passed = check_kernel(registry, spec, types, samples, ref.fn)
    assert passed.status is ConformanceStatus.PASSED and passed.types == (("T", "int32"),)
    wrong = Sample(types, [np.array([1, 2], np.int32)], {"preserve_index": 5})
    failed = check_kernel(registry, spec, types, [*samples, wrong], ref.fn)
    assert failed.status is ConformanceStatus.FAILED
    # The reference takes index 5 of a pair; the kernel refuses it. The given sample has no label.
    assert failed.message.startswith("kernel raised InvalidArgumentError")
    assert "(trial" not in failed.message
