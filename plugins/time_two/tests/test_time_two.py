"""The installed time_two plugin: the CPU kernel against the reference; the wheel carries no
CUDA (the GPU kernel is the cuda13 companion's: tests/test_gpu_companions.py)."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files

import numpy as np
import pytest

import opmarket
from opmarket.registry import (
    KernelNotFoundError,
    Registry,
    check_conformance,
    check_gradient,
    isolated_registry,
)
from opmarket.sdk import set_intra_op_threads


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["time_two"]) as reg:
        yield reg


def has_gpu_kernel(registry: Registry) -> bool:
    return any(k.device == "GPU" for k in registry.kernels("Opm>TimeTwo"))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_the_cpu_kernel_doubles(registry: Registry, dtype: type) -> None:
    x: np.ndarray = np.array([[1, -2, 3], [0, 5, -7]], dtype)
    with opmarket.device("CPU"):
        out = opmarket.ops.time_two(x)
    assert out.dtype == dtype
    assert out.tolist() == [[2, -4, 6], [0, 10, -14]]


def test_integers_wrap_around_as_numpys_do(registry: Registry) -> None:
    x = np.array([2**30, -(2**31), 2**31 - 1], np.int32)
    with opmarket.device("CPU"):
        np.testing.assert_array_equal(opmarket.ops.time_two(x), x * 2)


def test_every_kernel_matches_the_reference(registry: Registry) -> None:
    report = check_conformance("Opm>TimeTwo", trials=10)
    report.raise_for_failures()
    assert {r.device for r in report.results} == {"CPU"}


def test_thread_counts_give_identical_results(registry: Registry) -> None:
    x = np.random.default_rng(0).standard_normal(1_000_003)
    old = set_intra_op_threads(1)
    try:
        with opmarket.device("CPU"):
            results = []
            for n in (1, 2, 5):
                set_intra_op_threads(n)
                results.append(opmarket.ops.time_two(x))
    finally:
        set_intra_op_threads(old)
    for r in results:
        np.testing.assert_array_equal(r, x * 2)


def test_the_gradient_is_two(registry: Registry) -> None:
    assert check_gradient("Opm>TimeTwo", [np.array([0.5, -1.0, 3.0])]) < 1e-6


def test_the_base_plugin_registers_no_gpu_kernel_and_ships_no_cuda(registry: Registry) -> None:
    assert not has_gpu_kernel(registry)
    package = files("opmarket_time_two")
    assert not [p.name for p in package.iterdir() if p.name.endswith(".cu") or "gpu" in p.name]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with opmarket.device("GPU"), pytest.raises(KernelNotFoundError, match="on GPU"):
        opmarket.ops.time_two(x)
    # Without a device scope the preferred device with a kernel runs it: the CPU here.
    np.testing.assert_array_equal(opmarket.ops.time_two(x), x * 2)
