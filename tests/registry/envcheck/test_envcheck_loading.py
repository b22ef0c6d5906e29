"""env-check's prediction against what loading each library for real does: compiled
cases that each break one way, first-party plugins, and an op library from PyPI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .conftest import CASES, compare, load_for_real, needs, predict


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_prediction_is_what_loading_does(
    case: str,
    case_wheels: dict[str, Path],
    case_outcomes: tuple[dict[str, Any], dict[str, dict[str, str | None]]],
) -> None:
    *_, requires, kinds = CASES[case]
    if needs(requires):
        pytest.skip(needs(requires) or "")
    predicted, real = case_outcomes
    wheel = case_wheels[case].name
    compare(predicted[wheel], real[wheel])
    assert {p["kind"] for p in predicted[wheel]["problems"]} == kinds
    assert predicted[wheel]["works"] is (not kinds)


def test_every_missing_symbol_is_named_mangled_and_demangled(
    case_wheels: dict[str, Path],
    case_outcomes: tuple[dict[str, Any], dict[str, dict[str, str | None]]],
) -> None:
    if "torch_missing" not in case_wheels:
        pytest.skip("torch not installed")
    predicted, real = case_outcomes
    wheel = case_wheels["torch_missing"].name
    (error,) = real[wheel].values()
    assert error is not None and error.count("undefined symbol") == 1  # the loader: the first
    assert len(predicted[wheel]["problems"]) == 1, predicted[wheel]
    (problem,) = predicted[wheel]["problems"]
    assert problem["library"] == "opm_case_torch_missing/_torch_missing.so"
    assert "_ZN3c1013opm_not_thereEv (c10::opm_not_there())" in problem["detail"]
    assert "_ZN2at9opm_neverEi (at::opm_never(int))" in problem["detail"]
    assert problem["detail"].startswith("2 undefined symbols that torch ")


def test_a_symbol_torch_loads_locally_says_to_need_its_library(
    case_wheels: dict[str, Path],
    case_outcomes: tuple[dict[str, Any], dict[str, dict[str, str | None]]],
) -> None:
    if "torch_global_only" not in case_wheels:
        pytest.skip("torch not installed")
    (problem,) = case_outcomes[0][case_wheels["torch_global_only"].name]["problems"]
    assert "exported only by libc10.so" in problem["detail"]
    assert "DT_NEEDED libc10.so" in problem["detail"]


@pytest.mark.slow
def test_first_party_plugin_wheels_load_and_are_predicted_to(
    first_party_wheels: list[Path], tmp_path: Path
) -> None:
    code, document = predict(first_party_wheels)
    real = load_for_real(first_party_wheels, tmp_path / "site")
    assert code == 0
    for report in document["files"]:
        assert report["works"] and report["problems"] == []
        compare(report, real[Path(report["file"]).name])
    native = [m for libs in real.values() for m in libs]
    assert native, "zero_out_c ships a compiled library"


@pytest.mark.slow
def test_op_libraries_from_pypi_are_predicted_library_by_library(
    pypi_wheel: Path, tmp_path: Path
) -> None:
    code, document = predict([pypi_wheel])
    real = load_for_real([pypi_wheel], tmp_path / "site")[pypi_wheel.name]
    (report,) = document["files"]
    compare(report, real)
    assert code == (0 if report["works"] else 1)
    if pypi_wheel.name.startswith("tensorflow_text"):
        assert 0 < sum(e is None for e in real.values()) < len(real)  # some load, most not
        # It declares tensorflow; where tensorflow-cpu is installed that is a note only.
        if "tensorflow" not in document["environment"]["frameworks"]:
            assert any("declares tensorflow" in n["detail"] for n in report["notes"])
