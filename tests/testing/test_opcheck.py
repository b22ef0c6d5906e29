"""opcheck: conformance, shapes, gradients and attr defaults, each failure named."""

from __future__ import annotations

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
    NotFoundError,
    input_generator,
    kernel,
    op,
    reference,
    register_gradient,
    shape_fn,
    unchanged,
)
from opmarket.testing import OpCheckError, OpCheckStatus, opcheck
from tests.first_party import skip_unless_installed

_Array = np.ndarray[Any, Any]

CLIP = (
    op("Test>Clip")
    .input("x: T")
    .output("y: T")
    .attr("T: {float, double} = DT_FLOAT")
    .attr("clip_min: float = 0.0")
    .attr("clip_max: float = 6.0")
    .build()
)


def make_kernel(default_max: float = 6.0, *, wrong: bool = False) -> Any:
    @kernel("Test>Clip", constraints={"T": ["float", "double"]})
    def clip_kernel(x: _Array, *, clip_min: float = 0.0, clip_max: float = default_max) -> _Array:
        out = np.clip(x, clip_min, clip_max).astype(x.dtype)
        return out + 1 if wrong else out

    return clip_kernel


def make_reference(default_max: float = 6.0) -> Any:
    @reference("Test>Clip")
    def clip_reference(x: _Array, clip_min: float = 0.0, clip_max: float = default_max) -> _Array:
        return np.clip(x, clip_min, clip_max).astype(x.dtype)

    return clip_reference


@input_generator("Test>Clip")
def clip_inputs(rng: np.random.Generator, types: dict[str, DType]) -> Any:
    x = rng.standard_normal(int(rng.integers(2, 8))) * 5
    # Away from the kinks at 0 and 6, where central differences are not the gradient.
    for edge in (0.0, 6.0):
        x[np.abs(x - edge) < 0.05] += 0.1
    return [x.astype(types["T"].numpy)], {}


@register_gradient("Test>Clip")
def clip_grad(op: GradientOp, grad: _Array) -> list[_Array]:
    (x,) = op.inputs
    inside = (x > op.get_attr("clip_min")) & (x < op.get_attr("clip_max"))
    return [(grad * inside).astype(x.dtype)]


@register_gradient("Test>Clip")
def wrong_grad(op: GradientOp, grad: _Array) -> list[_Array]:
    return [grad]


@shape_fn("Test>Clip")
def wrong_shape(c: InferenceContext) -> None:
    c.set_output(0, c.vector(1))


clip_shape = shape_fn("Test>Clip", unchanged)


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry() as reg:
        yield reg


def register(reg: Registry, **parts: Any) -> None:
    chosen = {
        "kernel": make_kernel(),
        "reference": make_reference(),
        "shape": clip_shape,
        "gradient": clip_grad,
        **parts,
    }
    reg.register(CLIP, clip_inputs, *(v for v in chosen.values() if v is not None), source="t")


def test_a_sound_op_passes_every_check(registry: Registry) -> None:
    register(registry)
    report = opcheck("Test>Clip")
    assert report.ok
    checks = {r.check for r in report.results if r.status is OpCheckStatus.PASSED}
    assert checks == {"conformance", "shape", "gradient", "defaults"}
    # Both dtype bindings of the kernel, each attr default compared.
    assert sum(r.check == "conformance" for r in report.results) == 2
    defaults = [str(r) for r in report.results if r.check == "defaults"]
    assert len(defaults) == 2
    assert "kernel clip_kernel, reference agree with the spec's 6.0" in defaults[1]
    # The short and snake names find the op too.
    assert opcheck("clip").op == "Test>Clip"


def test_a_kernel_whose_default_drifted_is_named(registry: Registry) -> None:
    register(registry, kernel=make_kernel(default_max=1.0))
    with pytest.raises(OpCheckError) as caught:
        opcheck("Test>Clip")
    message = str(caught.value)
    assert "opcheck(Test>Clip): 1 of" in message
    assert (
        "Test>Clip attr clip_max: the kernel clip_kernel's default drifted from the spec's "
        "6.0 (it declares clip_max=1.0)" in message
    )
    # Dispatch passes the spec's default, so conformance alone cannot see it.
    assert "conformance" not in message


def test_a_reference_whose_default_drifted_is_named(registry: Registry) -> None:
    register(registry, reference=make_reference(default_max=1.0))
    report = opcheck("Test>Clip", raise_on_failure=False)
    drifted = [str(r) for r in report.failures if r.check == "defaults"]
    assert drifted == [
        "failed  defaults    Test>Clip attr clip_max: the reference's default drifted from "
        "the spec's 6.0 (it declares clip_max=1.0): calling it without clip_max differs from "
        "calling it with clip_max=6.0"
    ]


def test_when_kernel_and_reference_agree_the_spec_is_blamed(registry: Registry) -> None:
    register(registry, kernel=make_kernel(1.0), reference=make_reference(1.0))
    report = opcheck("Test>Clip", checks=["defaults"], raise_on_failure=False)
    (failure,) = report.failures
    assert "the spec's default 6.0 drifted: every kernel and the reference" in failure.message
    assert "kernel clip_kernel (it declares clip_max=1.0)" in failure.message


def test_a_shape_function_that_disagrees_with_the_kernel(registry: Registry) -> None:
    register(registry, shape=wrong_shape)
    with pytest.raises(
        OpCheckError,
        match=r"output 0: the shape function says \(1\), the kernel "
        r"returned \(\d+,\)",
    ):
        opcheck("Test>Clip", checks=["shape"])


def test_a_wrong_gradient(registry: Registry) -> None:
    register(registry, gradient=wrong_grad)
    with pytest.raises(
        OpCheckError,
        match=r"gradient +Test>Clip \[T=double\]: the gradient of "
        r"Test>Clip is off by",
    ):
        opcheck("Test>Clip", checks=["gradient"])


def test_a_kernel_that_disagrees_with_the_reference(registry: Registry) -> None:
    register(registry, kernel=make_kernel(wrong=True))
    report = opcheck("Test>Clip", raise_on_failure=False)
    assert {r.check for r in report.failures} == {"conformance"}
    assert "differs from the reference" in report.failures[0].message


def test_missing_parts_are_skipped_not_failed(registry: Registry) -> None:
    register(registry, shape=None, gradient=None)
    report = opcheck("Test>Clip")
    skipped = {r.check: r.message for r in report.results if r.status is OpCheckStatus.SKIPPED}
    assert skipped == {
        "shape": "no shape function is registered (graphs get unknown output shapes)",
        "gradient": "no gradient is registered",
    }


def test_given_inputs_are_used_instead_of_the_generator(registry: Registry) -> None:
    register(registry)
    x = np.array([-1.0, 2.0, 7.0], np.float32)
    report = opcheck("Test>Clip", [x], {"clip_max": 5.0})
    conformance = [r for r in report.results if r.check == "conformance"]
    assert [r.subject for r in conformance] == ["clip_kernel [CPU, T=float]"]


def test_an_unknown_op_says_how_to_load_it(registry: Registry) -> None:
    with pytest.raises(NotFoundError, match="no op 'Nope' is registered; is the plugin"):
        opcheck("Nope")
    with pytest.raises(ValueError, match=r"unknown opcheck checks \['speed'\]"):
        opcheck("Identity", checks=["speed"])


def test_the_compiled_zero_out_plugin_passes_with_its_pybind11_defaults() -> None:
    skip_unless_installed("zero_out")
    with isolated_registry(plugins=["zero_out"]):
        report = opcheck("Opm>ZeroOut", trials=2)
    defaults = [r for r in report.results if r.check == "defaults"]
    assert [r.status for r in defaults] == [OpCheckStatus.PASSED]
    assert "kernel zero_out_float" in defaults[0].message


# The case: a pybind11 kernel whose py::arg default drifted from the spec's.
DRIFTED_CPP = r"""
template <typename T>
opmarket::Tensor<T> Clip(opmarket::Tensor<T> x, double clip_min, double clip_max) {
  auto out = opmarket::allocate<T>(x.shape());
  for (int64_t i = 0; i < x.size(); ++i)
    out.mutable_data()[i] = std::min(std::max(x.data()[i], T(clip_min)), T(clip_max));
  return out;
}
OPM_LIBRARY(drifted_clip, lib) {
  lib.kernel("Test>Clip", "clip_float", &Clip<float>, pybind11::arg("x"),
             pybind11::arg("clip_min") = 0.0, pybind11::arg("clip_max") = 1.0)
      .attrs({"clip_min", "clip_max"})
      .type_constraint<float>("T");
}
"""


@pytest.mark.slow
def test_a_compiled_kernel_whose_default_drifted_is_named(
    registry: Registry, tmp_path: Path
) -> None:
    from opmarket.sdk import library_declarations
    from opmarket.sdk.build import load_inline

    module = load_inline("drifted_clip", DRIFTED_CPP, build_directory=tmp_path, register=False)
    register(registry, kernel=None)
    registry.register(*library_declarations(module), source="inline")
    report = opcheck("Test>Clip", checks=["defaults"], raise_on_failure=False)
    assert [f.message for f in report.failures] == [
        "the kernel clip_float's default drifted from the spec's 6.0 (it declares "
        "clip_max=1.0): calling it without clip_max differs from calling it with clip_max=6.0"
    ]


def test_one_status_enum_and_conformance_messages_for_given_inputs(registry: Registry) -> None:
    from opmarket.registry._conformance import ConformanceStatus

    assert OpCheckStatus is ConformanceStatus
    register(registry, kernel=make_kernel(wrong=True))
    x = np.array([-1.0, 2.0, 7.0], np.float32)
    report = opcheck("Test>Clip", [x], checks=["conformance"], raise_on_failure=False)
    (failure,) = report.failures
    # The same wording as check_conformance, without a trial number: the inputs were given.
    assert failure.subject == "clip_kernel [CPU, T=float]"
    assert failure.message.startswith("output 0 differs from the reference at (0,)")
    assert "trial" not in failure.message


def test_names_resolve_as_opmarket_ops_resolves_them(registry: Registry) -> None:
    import opmarket
    from opmarket.registry import AmbiguousOpNameError

    register(registry)
    registry.register(op("Other>Clip").input("x: float").output("y: float").build())
    with pytest.raises(AmbiguousOpNameError):
        _ = opmarket.ops.clip
    with pytest.raises(NotFoundError, match="'clip' is ambiguous: Other>Clip, Test>Clip; pass"):
        opcheck("clip")
    assert opcheck("Test>Clip", checks=["conformance"]).op == "Test>Clip"
