"""opmarket builds what TensorFlow 2.21 builds, checked against TensorFlow's own answers.

The data (tests/sdk/data, see its README) was made by running TensorFlow 2.21's OpDefBuilder
and ValidateOpDef on each case, and by exporting its whole op registry.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from opmarket.sdk import Deprecation, OpDef, finalize_op, opdefs_from_pbtxt, opdefs_to_pbtxt
from opmarket.sdk._specjson import op_to_spec

DATA = Path(__file__).parent / "data"
FLAGS = {
    "stateful": "is_stateful",
    "commutative": "is_commutative",
    "aggregate": "is_aggregate",
    "allows_uninit": "allows_uninitialized_input",
    "distributed": "is_distributed_communication",
}


def _load_cases() -> list[dict[str, Any]]:
    with gzip.open(DATA / "tf221_opdefbuilder_cases.json.gz", "rt", encoding="utf-8") as f:
        cases: list[dict[str, Any]] = json.load(f)
    return cases


CASES = _load_cases()


@pytest.fixture(scope="module")
def registry_text() -> str:
    with gzip.open(DATA / "tf221_registry.pbtxt.gz", "rt", encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def registry(registry_text: str) -> list[OpDef]:
    return opdefs_from_pbtxt(registry_text, "tf221_registry.pbtxt")


def _build(case: dict[str, Any]) -> tuple[OpDef | None, list[str]]:
    dep = case.get("deprecated")
    return finalize_op(
        case["name"],
        inputs=case.get("inputs", ()),
        outputs=case.get("outputs", ()),
        attrs=case.get("attrs", ()),
        control_outputs=case.get("control_outputs", ()),
        doc=case.get("doc", ""),
        deprecation=Deprecation(dep[0], dep[1]) if dep else None,
        **{field: bool(case.get(key)) for key, field in FLAGS.items()},
    )


def test_case_set_has_both_verdicts() -> None:
    accepted = sum(c["tf_accepts"] for c in CASES)
    assert accepted > 500 and len(CASES) - accepted > 500


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_same_verdict_and_same_opdef_as_tensorflow(case: dict[str, Any]) -> None:
    built, problems = _build(case)
    if not case["tf_accepts"]:
        assert built is None, "TensorFlow rejects this spec"
        assert problems
        return
    assert built is not None, problems
    expected = opdefs_from_pbtxt("op {\n" + case["tf_opdef"] + "}\n")[0]
    assert opdefs_to_pbtxt([built]) == opdefs_to_pbtxt([expected])


def test_registry_round_trips_text_format_byte_for_byte(registry_text: str) -> None:
    ops = opdefs_from_pbtxt(registry_text)
    assert len(ops) == 1734
    assert opdefs_to_pbtxt(ops) == registry_text


def test_every_registered_op_can_be_written_in_spec_form(registry: list[OpDef]) -> None:
    """Spec strings rebuild every op TensorFlow registers (full types come from C++ type
    constructors, not spec strings, and are reported as left out)."""
    left_out = 0
    for op in registry:
        spec, notes = op_to_spec(op)
        left_out += bool(notes)
        rebuilt, problems = finalize_op(
            spec["name"],
            inputs=spec["inputs"],
            outputs=spec["outputs"],
            attrs=spec["attrs"],
            control_outputs=spec.get("control_outputs", ()),
            is_stateful=spec.get("stateful", False),
            is_commutative=spec.get("commutative", False),
            is_aggregate=spec.get("aggregate", False),
            allows_uninitialized_input=spec.get("allows_uninitialized_input", False),
            is_distributed_communication=spec.get("distributed_communication", False),
            deprecation=op.deprecation,
        )
        assert not problems, (op.name, problems)
        assert rebuilt == _without_full_types(op), op.name
    assert left_out == 150


def _without_full_types(op: OpDef) -> OpDef:
    return replace(
        op,
        inputs=tuple(replace(a, full_type=None) for a in op.inputs),
        outputs=tuple(replace(a, full_type=None) for a in op.outputs),
    )
