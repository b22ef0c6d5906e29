"""Data types: TensorFlow's enum, spec names, and their numpy dtypes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from opmarket.sdk import DType, UnknownDTypeError, as_dtype
from opmarket.sdk._dtypes import dtype_from_spec_name


def test_enum_numbers_follow_tensorflow() -> None:
    assert (DType.FLOAT, DType.HALF, DType.VARIANT, DType.UINT64) == (1, 19, 21, 23)
    assert (DType.FLOAT8_E5M2, DType.INT4, DType.UINT2, DType.FLOAT4_E2M1FN) == (24, 29, 32, 33)
    assert DType.FLOAT_REF == 101 and DType.FLOAT_REF.base is DType.FLOAT
    assert all(d.as_ref.base is d for d in DType if d and not d.is_ref)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("float", DType.FLOAT),
        ("float32", DType.FLOAT),
        ("float64", DType.DOUBLE),
        ("float16", DType.HALF),
        ("half", DType.HALF),
        ("bfloat16", DType.BFLOAT16),
        ("float8_e4m3b11fnuz", DType.FLOAT8_E4M3B11FNUZ),
        ("qint16", DType.QINT16),
        ("int32_ref", DType.INT32_REF),
        ("resource", DType.RESOURCE),
        ("variant", DType.VARIANT),
        ("float_ref_ref", None),
        ("INVALID", None),
        ("Float", None),
        ("int", None),
    ],
)
def test_spec_names(name: str, expected: DType | None) -> None:
    assert dtype_from_spec_name(name) is expected


def test_numpy_dtypes() -> None:
    assert DType.BFLOAT16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert DType.FLOAT8_E4M3FN.numpy == np.dtype(ml_dtypes.float8_e4m3fn)
    assert DType.INT4.numpy == np.dtype(ml_dtypes.int4)
    assert DType.FLOAT_REF.numpy == np.dtype(np.float32)
    assert DType.RESOURCE.numpy is None and DType.VARIANT.numpy is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (np.int32, DType.INT32),
        ("int32", DType.INT32),
        ("DT_INT32", DType.INT32),
        (DType.HALF, DType.HALF),
        (np.dtype("float16"), DType.HALF),
        (float, DType.DOUBLE),
        (ml_dtypes.bfloat16, DType.BFLOAT16),
        (np.uint8, DType.UINT8),
        (np.bool_, DType.BOOL),
    ],
)
def test_as_dtype(value: object, expected: DType) -> None:
    assert as_dtype(value) is expected


@pytest.mark.parametrize("value", ["int", "DT_NOPE", 3, True, None, np.dtype("datetime64[s]")])
def test_as_dtype_rejects_with_our_error(value: object) -> None:
    with pytest.raises(UnknownDTypeError, match="dtype"):
        as_dtype(value)
