"""Attr value equality as TensorFlow's AreAttrValuesEqual decides it."""

from __future__ import annotations

import pytest

from opmarket.compat._values import show_value, values_equal
from opmarket.sdk import DType, FuncValue, TaggedValue, TensorShape, TensorValue

_INT_4 = TensorValue(DType.UINT8, TensorShape((4,)), (("int_val", (255, 0, 0, 255)),))


@pytest.mark.parametrize(
    ("attr_type", "a", "b", "equal"),
    [
        ("float", 0.0, -0.0, False),  # bytes differ
        ("float", float("nan"), float("nan"), True),
        ("float", 1.5, 1.5, True),
        ("list(float)", (1.0, -0.0), (1.0, 0.0), False),
        ("int", 1, 1, True),
        ("list(int)", (), (), True),
        ("list(int)", (1, 2), (2, 1), False),
        ("type", DType.FLOAT, DType.FLOAT, True),
        ("type", DType.FLOAT, DType.DOUBLE, False),
        ("string", "SAME", "VALID", False),
        ("shape", TensorShape(()), TensorShape(None), False),
        ("shape", TensorShape((2, -1)), TensorShape((2, -1)), True),
        # The same tensor spelled two ways: TensorFlow compares contents.
        (
            "tensor",
            _INT_4,
            TensorValue(DType.UINT8, TensorShape((4,)), (), bytes([255, 0, 0, 255])),
            True,
        ),
        (
            "tensor",
            TensorValue(DType.INT32, TensorShape((3,)), (("int_val", (7,)),)),
            TensorValue(DType.INT32, TensorShape((3,)), (("int_val", (7, 7, 7)),)),
            True,
        ),
        (
            "tensor",
            _INT_4,
            TensorValue(DType.UINT8, TensorShape((4,)), (("int_val", (255, 0, 0, 0)),)),
            False,
        ),
        (
            "func",
            FuncValue("f", (("x", TaggedValue("int", 1)),)),
            FuncValue("f", (("x", TaggedValue("int", 1)),)),
            True,
        ),
        (
            "func",
            FuncValue("f", (("x", TaggedValue("int", 1)),)),
            FuncValue("f", (("x", TaggedValue("int", 2)),)),
            False,
        ),
        ("func", FuncValue("f"), FuncValue("g"), False),
    ],
)
def test_values_equal(attr_type: str, a: object, b: object, equal: bool) -> None:
    assert values_equal(attr_type, a, b) is equal
    assert values_equal(attr_type, b, a) is equal


@pytest.mark.parametrize(
    ("attr_type", "value", "shown"),
    [
        ("type", DType.INT32, "int32"),
        ("list(type)", (DType.FLOAT, DType.HALF), "[float, half]"),
        ("string", "SAME", "'SAME'"),
        ("bool", False, "false"),
        ("shape", TensorShape(None), "<unknown rank>"),
        ("shape", TensorShape((2, -1)), "[2,?]"),
        ("tensor", _INT_4, "<uint8 tensor of shape [4]>"),
        ("func", FuncValue("body"), "<func body>"),
    ],
)
def test_show_value(attr_type: str, value: object, shown: str) -> None:
    assert show_value(attr_type, value) == shown
