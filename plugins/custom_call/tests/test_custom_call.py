"""do_custom_call: the target with opaque sizes and a scratch output, and the op over it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from opmarket_custom_call import opaque_sizes

import opmarket
from opmarket.registry import (
    Registry,
    check_conformance,
    check_gradient,
    custom_call,
    isolated_registry,
)
from opmarket.sdk import InvalidArgumentError


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["custom_call"]) as reg:
        yield reg


def test_the_seeds_call_with_sizes_in_the_opaque_bytes(registry: Registry) -> None:
    rng = np.random.default_rng(0)
    b = rng.standard_normal(128).astype(np.float32)
    c = rng.standard_normal(2048).astype(np.float32)
    a, scratch = custom_call(
        "do_custom_call",
        [b, c],
        [((2048,), np.float32), ((2048,), np.float32)],
        opaque=opaque_sizes(128, 2048),
    )
    want = np.array([b[i % 128] + c[i] for i in range(2048)], np.float32)
    np.testing.assert_array_equal(a, want)
    np.testing.assert_array_equal(scratch, np.tile(b, 16))  # the temp buffer, as used


def test_the_target_refuses_sizes_that_do_not_match_the_buffers(registry: Registry) -> None:
    b, c = np.ones(4, np.float32), np.ones(10, np.float32)
    result = [((10,), np.float32), ((10,), np.float32)]
    with pytest.raises(InvalidArgumentError, match=r"len\(B\)=8, len\(C\)=10"):
        custom_call("do_custom_call", [b, c], result, opaque=opaque_sizes(8, 10))
    with pytest.raises(InvalidArgumentError, match="opaque must be 16 bytes"):
        custom_call("do_custom_call", [b, c], result, opaque=b"\x04")


def test_the_op_runs_the_target_and_matches_its_reference(registry: Registry) -> None:
    b = np.array([1, 2, 3], np.float32)
    c = np.array([10, 20, 30, 40, 50], np.float32)
    assert opmarket.ops.do_custom_call(b, c).tolist() == [11, 22, 33, 41, 52]
    check_conformance("Opm>DoCustomCall", trials=5).raise_for_failures()
    assert check_gradient("Opm>DoCustomCall", [b, c]) < 1e-2
