"""Ops the run-time tests share: ZeroOut as the TensorFlow guide builds it up."""

from __future__ import annotations

import pytest
from opmarket.sdk import OpDef, op


@pytest.fixture(scope="session")
def zero_out_def() -> OpDef:
    return (
        op("Opm>ZeroOut")
        .input("to_zero: T")
        .output("zeroed: T")
        .attr("T: {float, double, int32} = DT_INT32")
        .attr("preserve_index: int >= 0 = 0")
        .doc("Zeroes all but one element.\n\npreserve_index: the element that is kept.")
        .build()
    )


@pytest.fixture(scope="session")
def add_def() -> OpDef:
    return (
        op("Opm>Concat").input("values: N * T").output("output: T")
        .attr("N: int >= 1").attr("T: type").build()
    )
