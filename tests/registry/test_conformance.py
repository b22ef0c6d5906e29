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
