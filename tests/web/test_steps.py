"""A verdict's step statuses are one typed set (web/validation/_steps.py): what the JSON and
the log say stays the plain words, and a status outside the set is refused where it is made."""

from __future__ import annotations

import json

import pytest

from opmarket.web import Step, Verdict
from opmarket.web.validation._report import STATUSES
from opmarket.web.validation._steps import StepStatus


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
