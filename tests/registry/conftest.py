"""Ops the run-time tests share: ZeroOut as the TensorFlow guide builds it up, and a
registry of their own for every test (plugin discovery off)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opmarket.registry import Registry, isolated_registry
from opmarket.sdk import (
    DType,
    GradientOp,
    InferenceContext,
    InvalidArgumentError,
    OpDef,
    input_generator,
    kernel,
    op,
    reference,
    register_gradient,
    shape_fn,
)

ZERO_OUT = (
    op("Opm>ZeroOut")
    .input("to_zero: T")
    .output("zeroed: T")
    .attr("T: {float, double, int32} = DT_INT32")
    .attr("preserve_index: int >= 0 = 0")
    .doc(
        "Zeroes all but one element of a vector.\n\n"
        "to_zero: the vector.\npreserve_index: the element that is kept."
    )
    .build()
)


@kernel("Opm>ZeroOut", constraints={"T": [np.float32, np.float64, np.int32]})
def zero_out_kernel(x: np.ndarray[Any, Any], *, preserve_index: int) -> np.ndarray[Any, Any]:
    # The seed's checks: a vector, and an index in range.
    if x.ndim != 1:
        raise InvalidArgumentError("ZeroOut expects a 1-D vector.")
    if preserve_index >= x.shape[0]:
        raise InvalidArgumentError("preserve_index out of range")
    out = np.zeros_like(x)
    out[preserve_index] = x[preserve_index]
    return out


@shape_fn("Opm>ZeroOut")
def zero_out_shape(c: InferenceContext) -> None:
    c.set_output(0, c.with_rank(c.input(0), 1))


@register_gradient("Opm>ZeroOut")
def zero_out_grad(op: GradientOp, grad: np.ndarray[Any, Any]) -> list[Any]:
    # Only the preserved entry reaches the output: a one-hot gradient.
    (to_zero,) = op.inputs
    index = op.get_attr("preserve_index")
    out = np.zeros_like(to_zero)
    out[index] = grad[index]
    return [out]


@reference("Opm>ZeroOut")
def zero_out_reference(x: np.ndarray[Any, Any], preserve_index: int = 0) -> Any:
    return np.where(np.arange(x.shape[0]) == preserve_index, x, np.zeros_like(x))


@input_generator("Opm>ZeroOut")
def zero_out_inputs(rng: np.random.Generator, types: dict[str, DType]) -> Any:
    n = int(rng.integers(1, 10))
    npdt = types["T"].numpy
    assert npdt is not None
    x = (rng.standard_normal(n) * 10).astype(npdt)
    return [x], {"preserve_index": int(rng.integers(0, n))}


ZERO_OUT_ALL = (
    ZERO_OUT,
    zero_out_kernel,
    zero_out_shape,
    zero_out_grad,
    zero_out_reference,
    zero_out_inputs,
)


@pytest.fixture(autouse=True)
def registry() -> Iterator[Registry]:
    """A registry with only the built-ins for each test; the global one comes back after."""
    with isolated_registry() as reg:
        yield reg


@pytest.fixture
def zero_out(registry: Registry) -> OpDef:
    registry.register(*ZERO_OUT_ALL, source="tests")
    return ZERO_OUT


@pytest.fixture(scope="session")
def zero_out_def() -> OpDef:
    return ZERO_OUT


@pytest.fixture(scope="session")
def add_def() -> OpDef:
    return (
        op("Opm>Concat")
        .input("values: N * T")
        .output("output: T")
        .attr("N: int >= 1")
        .attr("T: type")
        .build()
    )


# --- plugin distributions built with real pip, once per test session ----------------------

TEST_PLUGINS = {
    # distribution, version, entry point name, module source
    "opmarket_broken_plugin": (
        "opmarket-broken-plugin",
        "0.3.0",
        "broken",
        "raise ImportError('the broken plugin cannot start: libbroken.so is missing')\n",
    ),
    "opmarket_other_atan": (
        "opmarket-other-atan",
        "2.0.0",
        "other_atan",
        "from opmarket.sdk import hookimpl, op\n\n"
        "ATAN = op('Opm>Atan').input('x: float').output('y: float').build()\n\n\n"
        "@hookimpl\ndef register(register):\n    register(ATAN)\n",
    ),
    "opmarket_fresh_plugin": (
        "opmarket-fresh-plugin",
        "1.0.0",
        "fresh",
        "from opmarket.sdk import hookimpl, op\n\n"
        "FRESH = op('Test>Fresh').input('x: float').output('y: float').build()\n\n\n"
        "@hookimpl\ndef register(register):\n    register(FRESH)\n",
    ),
}


@pytest.fixture(scope="session")
def test_wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Wheels of the TEST_PLUGINS by distribution name, built by pip in one call."""
    root = tmp_path_factory.mktemp("test-plugins")
    sources = []
    for module, (dist, version, entry, code) in TEST_PLUGINS.items():
        src = root / dist
        (src / module).mkdir(parents=True)
        (src / module / "__init__.py").write_text(code)
        (src / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=69"]\n'
            'build-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{dist}"\nversion = "{version}"\ndependencies = ["opmarket"]\n\n'
            f'[project.entry-points.opmarket]\n{entry} = "{module}"\n'
        )
        sources.append(str(src))
    out = root / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-w",
            str(out),
            *sources,
        ],
        check=True,
        capture_output=True,
    )
    wheels = {w.name.split("-")[0].replace("_", "-"): w for w in out.glob("*.whl")}
    assert set(wheels) == {d for d, *_ in TEST_PLUGINS.values()}, wheels
    return wheels


@pytest.fixture(scope="session")
def beside_site(test_wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the broken plugin and the one whose Opm>Atan differs, installed
    there by pip; put it on PYTHONPATH to have them beside the first-party plugins."""
    site = tmp_path_factory.mktemp("beside-site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(site),
            str(test_wheels["opmarket-broken-plugin"]),
            str(test_wheels["opmarket-other-atan"]),
        ],
        check=True,
        capture_output=True,
    )
    return site
