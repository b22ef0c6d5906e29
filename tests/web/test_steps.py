"""A verdict's step statuses are one typed set (web/validation/_steps.py): what the JSON and
the log say stays the plain words, and a status outside the set is refused where it is made.
Its op and kernel rows are typed too: read once from the sandbox's JSON (``_report``), stored
as the same JSON objects."""

from __future__ import annotations

import json

import pytest

from opmarket.web import Step, Verdict
from opmarket.web.validation._report import STATUSES, parse_harness
from opmarket.web.validation._steps import KernelRow, OpRow, StepStatus


def test_statuses_are_typed_and_read_as_their_words() -> None:
    verdict = Verdict("x-1.0-py3-none-any.whl", [Step("load", "passed"), Step("compat", "allowed")])
    assert [s.status for s in verdict.steps] == [StepStatus.PASSED, StepStatus.ALLOWED]
    assert verdict.status == "validated"
    text = json.dumps(verdict.to_json())
    assert json.loads(text)["steps"][1] == {"name": "compat", "status": "allowed", "log": []}
    assert "[not available] gpu" in Verdict("f", [Step("gpu", "not available")]).log_text()
    assert Verdict("f", [Step("load", StepStatus.FAILED)]).failures[0].name == "load"


def test_a_status_outside_the_set_is_refused() -> None:
    with pytest.raises(ValueError, match="'fine' is not a valid StepStatus"):
        Step("load", "fine")  # type: ignore[arg-type]  # as an untyped caller could


def test_the_plugin_may_not_report_compats_own_status() -> None:
    assert "allowed" not in STATUSES
    assert set(STATUSES) | {"allowed"} == set(StepStatus)


def _harness(report: object, secret: str = "s3cret") -> bytes:
    return json.dumps({"secret": secret, "returncode": 0, "report": report}).encode()


def test_the_sandboxs_rows_are_read_once_into_typed_rows() -> None:
    report = {
        "steps": [{"name": "load", "status": "passed", "log": []}],
        "ops": [{"name": "Test>A", "signature": "Test>A(x: T) -> (y: T)"}],
        "kernels": [{"op": "Test>A", "device": "CPU", "dtypes": "T=float", "status": "passed"}],
    }
    found = parse_harness(_harness(report), "s3cret").report
    assert found is not None
    assert found.ops == [OpRow("Test>A", "Test>A(x: T) -> (y: T)", "")]
    assert found.kernels == [KernelRow("Test>A", "CPU", "T=float", "passed", "")]


@pytest.mark.parametrize(
    "kernels",
    [
        [{"op": "Test>A", "device": "CPU", "owner": "x"}],  # a key no row has
        [{"op": "Test>A", "device": 1}],  # not a string
        {"op": "Test>A"},  # not a list
    ],
)
def test_a_malformed_row_rejects_the_report(kernels: object) -> None:
    report = {"steps": [{"name": "load", "status": "passed", "log": []}], "kernels": kernels}
    result = parse_harness(_harness(report), "s3cret")
    assert result.report is None
    assert result.report_error.startswith("sent a malformed report: "), result.report_error


def test_the_rows_are_stored_as_the_objects_they_were() -> None:
    verdict = Verdict(
        "f",
        [Step("load", "passed")],
        ops=[OpRow("Test>A", "Test>A(x: T) -> (y: T)", "Doubles x.")],
        kernels=[KernelRow("Test>A", "GPU", status="gpu: not run", message="no worker")],
    )
    stored = json.loads(json.dumps(verdict.to_json()))
    assert stored["ops"] == [
        {"name": "Test>A", "signature": "Test>A(x: T) -> (y: T)", "summary": "Doubles x."}
    ]
    assert list(stored["kernels"][0].items()) == [
        ("op", "Test>A"),
        ("device", "GPU"),
        ("dtypes", ""),
        ("status", "gpu: not run"),
        ("message", "no worker"),
    ]
