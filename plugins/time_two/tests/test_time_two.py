"""The installed time_two plugin: the CPU kernel against the reference, the CUDA source
compiling where nvcc is, and the GPU kernel registered only where a GPU is."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from opmarket_time_two import GPU_LIBRARY, gpu_status

import opmarket
from opmarket.registry import (
    KernelNotFoundError,
    Registry,
    check_conformance,
    check_gradient,
    isolated_registry,
)
from opmarket.sdk import set_intra_op_threads

SRC = Path(__file__).resolve().parents[1] / "src" / "opmarket_time_two"


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if found is None and home and Path(home, "bin", "nvcc").is_file():
            found = str(Path(home, "bin", "nvcc"))
    return found


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
    devices = {r.device for r in report.results}
    assert devices == ({"CPU", "GPU"} if has_gpu_kernel(registry) else {"CPU"})


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


def test_the_cuda_source_compiles_with_nvcc(tmp_path: Path) -> None:
    nvcc = find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    # PTX only: the cheapest complete compile of the source.
    done = subprocess.run(
        [
            nvcc,
            "-std=c++17",
            "-c",
            "-Xcompiler",
            "-fPIC",
            "-gencode",
            "arch=compute_75,code=compute_75",
            str(SRC / "time_two_gpu.cu"),
            "-o",
            str(tmp_path / "time_two_gpu.o"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "time_two_gpu.o").stat().st_size > 0


def test_a_wheel_built_with_nvcc_carries_the_gpu_library() -> None:
    if find_nvcc() is None:
        pytest.skip("nvcc not found: the installed wheel was built without the GPU library")
    assert files("opmarket_time_two").joinpath(GPU_LIBRARY).is_file()


def test_the_gpu_kernel_registers_only_with_a_gpu(registry: Registry) -> None:
    status = gpu_status()
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    if status.startswith("GPU kernel available"):
        assert has_gpu_kernel(registry)
        with opmarket.device("GPU"):
            np.testing.assert_array_equal(opmarket.ops.time_two(x), x * 2)
    else:
        assert status in (
            "the CUDA runtime sees no GPU",
            "no GPU kernel in this wheel (it was built without nvcc)",
        ) or status.startswith("no CUDA runtime: ")
        assert not has_gpu_kernel(registry)
        with opmarket.device("GPU"), pytest.raises(KernelNotFoundError, match="on GPU"):
            opmarket.ops.time_two(x)
    # Without a device scope the preferred device with a kernel runs it.
    np.testing.assert_array_equal(opmarket.ops.time_two(x), x * 2)
