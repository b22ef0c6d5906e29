"""The generated wrappers of ``opmarket.ops`` (registry/_wrapper.py) for ops whose names
are awkward in Python."""

from __future__ import annotations

import numpy as np
import pytest

import opmarket
from opmarket.registry import isolated_registry
from opmarket.sdk import kernel, op


@pytest.mark.parametrize("name", ["Assert", "If"])  # TensorFlow's, whose snake_case is a keyword
def test_an_op_whose_python_name_is_a_keyword_gets_a_wrapper(name: str) -> None:
    with isolated_registry():
        opmarket.register(
            op(f"WrapperTest>{name}").input("x: float").output("y: float").build(),
            kernel(f"WrapperTest>{name}")(lambda x: x * 2),
        )
        wrapper = opmarket.ops[f"WrapperTest>{name}"]
        assert wrapper.__name__ == name.lower()
        np.testing.assert_array_equal(wrapper(np.float32([1.5])), [3.0])
