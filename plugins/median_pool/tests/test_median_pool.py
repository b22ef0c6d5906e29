"""The installed median_pool plugin: the C++ kernel against the numpy composition (and
scipy), SAME/VALID edges, NaN, thread counts, SIMD variants, errors, shapes, gradient."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from opmarket_median_pool import _median_pool, median_pool_reference, median_pool_shape

import opmarket
from opmarket.registry import Registry, check_conformance, check_gradient, isolated_registry
from opmarket.sdk import InvalidArgumentError, infer_error, infer_ok, set_intra_op_threads


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["median_pool"]) as reg:
        yield reg


@pytest.fixture(params=["best", "sse2"])
def isa(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test that takes it runs with the CPU's best fast path and with SSE2."""
    _median_pool.use_isa(request.param)
    yield _median_pool.isa()
    _median_pool.use_isa("best")


def pool(x: np.ndarray[Any, Any], k: tuple[int, int], s: tuple[int, int], padding: str) -> Any:
    return opmarket.ops.median_pool(x, ksize=[1, *k, 1], strides=[1, *s, 1], padding=padding)


def reference(x: np.ndarray[Any, Any], k: tuple[int, int], s: tuple[int, int], padding: str) -> Any:
    return median_pool_reference(x, [1, *k, 1], [1, *s, 1], padding)


def test_the_benchmark_case_matches_the_composition_and_scipy(registry: Registry, isa: str) -> None:
    ndimage = pytest.importorskip("scipy.ndimage")
    x = np.random.default_rng(1).random((1, 130, 257, 1), dtype=np.float32)
    got = pool(x, (3, 3), (1, 1), "VALID")
    assert got.dtype == np.float32
    assert got.shape == (1, 128, 255, 1)
    np.testing.assert_array_equal(got, reference(x, (3, 3), (1, 1), "VALID"))
    np.testing.assert_array_equal(
        got[0, :, :, 0], ndimage.median_filter(x[0, :, :, 0], size=3)[1:-1, 1:-1]
    )
    (kernel,) = [
        k for k in registry.kernels("Opm>MedianPool") if k.constraints[0][1][0].spec_name == "float"
    ]
    assert kernel.impl.__module__ == "opmarket_median_pool._median_pool"


def test_every_kernel_matches_the_reference(registry: Registry) -> None:
    check_conformance("Opm>MedianPool", trials=40).raise_for_failures()


SHAPES = [
    (1, 1, 1, 1),
    (1, 2, 2, 1),
    (1, 3, 3, 1),
    (1, 4, 5, 1),
    (2, 7, 9, 3),
    (1, 17, 33, 2),
    (1, 3, 40, 1),
    (1, 40, 3, 1),
]
WINDOWS = [
    ((3, 3), (1, 1)),
    ((2, 2), (1, 1)),
    ((2, 2), (2, 2)),
    ((3, 3), (2, 2)),
    ((1, 1), (1, 1)),
    ((4, 3), (1, 3)),
    ((1, 5), (3, 1)),
    ((3, 3), (4, 4)),
]


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("window", WINDOWS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_same_and_valid_edges(
    registry: Registry, isa: str, *, shape: tuple[int, ...], window: Any, padding: str, dtype: Any
) -> None:
    (k, s) = window
    rng = np.random.default_rng(sum(shape) + sum(k) + sum(s))
    # Few distinct values: ties, and even counts whose two middle values differ.
    x = (rng.integers(-8, 8, shape) / 4).astype(dtype)
    if padding == "VALID" and (shape[1] - k[0] + s[0] < 0 or shape[2] - k[1] + s[1] < 0):
        with pytest.raises(InvalidArgumentError, match="would be negative"):
            pool(x, k, s, padding)
        return
    got = pool(x, k, s, padding)
    want = reference(x, k, s, padding)
    assert got.shape == want.shape
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)


def test_same_edges_take_the_median_of_in_bounds_values(registry: Registry) -> None:
    x = np.arange(1, 10, dtype=np.float32).reshape(1, 3, 3, 1)
    got = pool(x, (3, 3), (1, 1), "SAME")[0, :, :, 0]
    # Corner (0, 0): values 1, 2, 4, 5 -> mean of 2 and 4; edge (0, 1): 1, 2, 3, 4, 5, 6.
    assert got[0, 0] == 3.0
    assert got[0, 1] == 3.5
    assert got[1, 1] == 5.0


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_a_window_with_nan_gives_nan(registry: Registry, isa: str, padding: str) -> None:
    x = np.random.default_rng(2).random((1, 12, 40, 1), dtype=np.float32)
    x[0, 5, 17, 0] = np.nan
    got = pool(x, (3, 3), (1, 1), padding)
    np.testing.assert_array_equal(got, reference(x, (3, 3), (1, 1), padding))
    assert np.isnan(got).sum() == 9


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_thread_counts_give_identical_results(registry: Registry, padding: str) -> None:
    x = np.random.default_rng(3).standard_normal((2, 301, 203, 2)).astype(np.float32)
    results = []
    old = set_intra_op_threads(1)
    try:
        for n in (1, 2, 3, 8):
            set_intra_op_threads(n)
            assert _median_pool.intra_op_threads() == n
            results.append([pool(x, k, s, padding) for k, s in WINDOWS[:4]])
    finally:
        set_intra_op_threads(old)
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"ksize": [1, 3, 3]}, "ksize' has 3 element"),
        ({"ksize": [1, 3, 3, 1, 1]}, "must specify 4 dimensions"),
        ({"strides": [1, 1, 1, 1, 1]}, "must specify 4 dimensions"),
        ({"ksize": [2, 3, 3, 1]}, "not yet supported on the batch dimension"),
        ({"ksize": [1, 3, 3, 2]}, "does not pool over depth"),
        ({"strides": [1, 0, 1, 1]}, "must be positive"),
        ({"padding": "FULL"}, "padding"),
        ({"ksize": [1, 9, 3, 1], "padding": "VALID"}, "would be negative"),
    ],
)
def test_errors_are_invalid_argument(
    registry: Registry, kwargs: dict[str, Any], message: str
) -> None:
    attrs: dict[str, Any] = {
        "ksize": [1, 3, 3, 1],
        "strides": [1, 1, 1, 1],
        "padding": "SAME",
        **kwargs,
    }
    with pytest.raises(InvalidArgumentError, match=message):
        opmarket.ops.median_pool(np.zeros((1, 5, 5, 1), np.float32), **attrs)


def test_rank_and_dtype_errors(registry: Registry) -> None:
    attrs: dict[str, Any] = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}
    with pytest.raises(InvalidArgumentError, match="rank 4"):
        opmarket.ops.median_pool(np.zeros((5, 5, 1), np.float32), **attrs)
    with pytest.raises(InvalidArgumentError, match="int32"):
        opmarket.ops.median_pool(np.zeros((1, 5, 5, 1), np.int32), **attrs)


def test_the_cpp_checks_themselves() -> None:
    x = np.zeros((1, 5, 5, 1), np.float32)
    with pytest.raises(InvalidArgumentError, match=r"4-D NHWC input, got shape \[5,5\]"):
        _median_pool.median_pool_float(x[0, :, :, 0], [1, 3, 3, 1], [1, 1, 1, 1], "SAME")
    with pytest.raises(InvalidArgumentError, match="Computed output rows would be negative"):
        _median_pool.median_pool_float(x, [1, 7, 3, 1], [1, 1, 1, 1], "VALID")
    with pytest.raises(InvalidArgumentError, match="padding must be 'VALID' or 'SAME', got 'X'"):
        _median_pool.median_pool_float(x, [1, 3, 3, 1], [1, 1, 1, 1], "X")
    with pytest.raises(InvalidArgumentError, match="use_isa takes"):
        _median_pool.use_isa("avx9")


def test_shape_function() -> None:
    attrs: dict[str, Any] = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1]}
    infer_ok(None, median_pool_shape, "[2,10,11,3]", "[2,5,6,3]", padding="SAME", **attrs)
    infer_ok(None, median_pool_shape, "[2,10,11,3]", "[2,4,5,3]", padding="VALID", **attrs)
    infer_ok(None, median_pool_shape, "[?,?,11,3]", "[?,?,5,3]", padding="VALID", **attrs)
    infer_ok(None, median_pool_shape, "?", "[?,?,?,?]", padding="VALID", **attrs)
    infer_error(None, median_pool_shape, "[2,10]", "rank", padding="VALID", **attrs)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
@pytest.mark.parametrize("window", [((3, 3), (1, 1)), ((2, 2), (1, 1)), ((2, 3), (2, 1))], ids=str)
def test_gradient(registry: Registry, padding: str, window: Any) -> None:
    (k, s) = window
    # Distinct values, far apart compared with the checker's step: no ties.
    x = np.random.default_rng(4).permutation(70).reshape(1, 7, 10, 1).astype(np.float64)
    attrs = {"ksize": [1, *k, 1], "strides": [1, *s, 1], "padding": padding}
    assert check_gradient("Opm>MedianPool", [x], attrs) < 1e-6


def test_concurrent_calls_while_the_pool_resizes(registry: Registry) -> None:
    # Python threads call the kernel at once (the GIL is released inside) while one of them
    # changes the threads setting: a busy pool runs callers inline, a resize waits for runs.
    import threading

    x = np.random.default_rng(5).random((2, 200, 150, 2), dtype=np.float32)
    attrs: dict[str, Any] = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}
    want = opmarket.ops.median_pool(x, **attrs)
    wrong: list[tuple[int, int]] = []
    old = set_intra_op_threads(2)

    def work(i: int) -> None:
        for j in range(15):
            if i == 0:
                set_intra_op_threads(1 + j % 4)
            if not np.array_equal(opmarket.ops.median_pool(x, **attrs), want):
                wrong.append((i, j))

    try:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        set_intra_op_threads(old)
    assert wrong == []


def test_only_the_avx2_variant_uses_avx_instructions() -> None:
    # The wheel must run on every x86-64 CPU: no -march flag, AVX only where chosen at run time.
    import platform
    import re
    import shutil
    import subprocess

    objdump = shutil.which("objdump")
    if objdump is None or platform.machine() != "x86_64":
        pytest.skip("needs objdump on x86-64")
    text = subprocess.run(
        [objdump, "-d", "--no-show-raw-insn", "-C", _median_pool.__file__],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    with_avx: set[str] = set()
    function = ""
    for line in text.splitlines():
        if line.endswith(">:"):
            function = line
        elif re.search(r"\tv[a-z0-9]+\s", line) or "ymm" in line or "zmm" in line:
            with_avx.add(function)
    assert with_avx, "the AVX2 variant is missing"
    assert all("avx2::" in f for f in with_avx), sorted(with_avx)
