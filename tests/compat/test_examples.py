"""The rule table's one-line example language."""

from __future__ import annotations

import pytest

from opmarket.compat._examples import example_op
from opmarket.sdk import DType, InvalidOpDefError


def test_a_whole_op_on_one_line() -> None:
    op, kernels = example_op(
        "in x: T; out y: T; attr T: {float, int32} = DT_FLOAT; stateful; "
        "deprecated 7 use Other; kernel GPU T=float,int32"
    )
    assert op is not None
    assert [a.name for a in op.inputs] == ["x"] and op.is_stateful
    assert op.deprecation is not None and op.deprecation.explanation == "use Other"
    assert kernels[0].device == "GPU"
    assert kernels[0].constraint("T") == (DType.FLOAT, DType.INT32)


def test_absent_and_empty() -> None:
    assert example_op("-") == (None, ())
    op, kernels = example_op("")
    assert op is not None and not op.inputs and not op.attrs and kernels == ()


def test_mistakes_are_errors() -> None:
    with pytest.raises(ValueError, match="unknown example item 'input x: float'"):
        example_op("input x: float")
    with pytest.raises(InvalidOpDefError):
        example_op("in x: T")
