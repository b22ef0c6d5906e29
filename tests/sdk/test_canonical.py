"""The canonical op-set JSON: deterministic, versioned, described by its JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from opmarket.sdk import (
    DocumentError,
    DType,
    InvalidOpDefError,
    KernelDef,
    OpSet,
    op,
    opset_from_json,
    opset_to_json,
    parse_document,
    read_document,
)

SCHEMA = json.loads(
    (Path(__file__).parents[2] / "sdk" / "schema" / "opset.schema.json").read_text()
)
EXAMPLES = Path(__file__).parents[2] / "docs" / "examples"


def zero_out() -> OpSet:
    ops = [
        op("Opm>ZeroOut")
        .input("to_zero: T")
        .output("zeroed: T")
        .attr("T: {float, int32} = DT_INT32")
        .attr("preserve_index: int >= 0 = 0")
        .doc("Zeroes.\n\nto_zero: in")
        .build(),
        op("Opm>Consts")
        .output("y: float")
        .attr("t: tensor = { dtype: DT_FLOAT float_val: nan }")
        .attr("s: shape = { dim { size: 2 name: 'batch' } }")
        .attr("e: float = -inf")
        .attr("f: func = { name: 'g' attr { key: 'T' value { type: DT_HALF } } }")
        .stateful()
        .build(),
    ]
    kernels = [
        KernelDef("Opm>ZeroOut", "GPU", (("T", (DType.FLOAT,)),)),
        KernelDef("Opm>ZeroOut", "CPU", (("T", (DType.FLOAT, DType.INT32)),), priority=1),
    ]
    return OpSet.of(ops, kernels, name="opmarket-zero-out", version="1.0.0")


def test_output_is_deterministic_sorted_and_schema_valid() -> None:
    opset = zero_out()
    text = opset_to_json(opset)
    reversed_set = OpSet.of(
        reversed(opset.ops), reversed(opset.kernels), name=opset.name, version=opset.version
    )
    assert opset_to_json(reversed_set) == text
    obj = json.loads(text)
    jsonschema.validate(obj, SCHEMA)
    assert [o["name"] for o in obj["ops"]] == ["Opm>Consts", "Opm>ZeroOut"]
    assert [k["device"] for k in obj["kernels"]] == ["CPU", "GPU"]
    assert obj["ops"][1]["attrs"][0] == {
        "name": "T",
        "type": "type",
        "allowed_values": ["float", "int32"],
        "default": "int32",
    }


def test_round_trip_keeps_everything() -> None:
    opset = zero_out()
    back = opset_from_json(opset_to_json(opset))
    assert back == OpSet.of(
        sorted(opset.ops, key=lambda o: o.name),
        back.kernels,
        name=opset.name,
        version=opset.version,
    )
    assert set(back.kernels) == set(opset.kernels)
    assert opset_to_json(back) == opset_to_json(opset)


def test_history_file_in_canonical_json_is_schema_valid(tensorflow_testdata: Path) -> None:
    doc = read_document(tensorflow_testdata / "tf_ops_history_v2" / "MapDataset.pbtxt")
    from opmarket.sdk import render_document

    obj = json.loads(render_document(doc.ops, "json"))
    jsonschema.validate(obj, SCHEMA)
    assert parse_document(json.dumps(obj)).ops == doc.ops


def test_newer_format_version_is_refused_with_advice() -> None:
    text = json.dumps({"format": "opmarket.opset", "format_version": 99, "ops": []})
    with pytest.raises(DocumentError, match="upgrade opmarket"):
        opset_from_json(text)


def test_structural_problems_are_collected_per_op() -> None:
    text = json.dumps(
        {
            "format": "opmarket.opset",
            "format_version": 1,
            "ops": [
                {"name": "A", "attrs": [{"name": "x", "type": "int", "default": "one"}]},
                {"name": "B", "colour": "red"},
                {"name": "C", "inputs": [{"name": "x", "type": "float"}]},
                {"name": "d"},
            ],
        }
    )
    with pytest.raises(InvalidOpDefError) as info:
        opset_from_json(text, "ops.json")
    messages = [str(p) for p in info.value.problems]
    assert len(messages) == 3
    assert "ops.json: op A: attr 'x'.default: expected an integer, got 'one'" in messages
    assert any("op B" in m and "'colour'" in m for m in messages)
    assert any("op d" in m and "invalid op name" in m for m in messages)


def test_duplicate_ops_are_refused_in_an_opset() -> None:
    text = json.dumps(
        {"format": "opmarket.opset", "format_version": 1, "ops": [{"name": "A"}, {"name": "A"}]}
    )
    with pytest.raises(InvalidOpDefError, match="defined more than once"):
        opset_from_json(text)


def test_example_documents_read() -> None:
    assert len(read_document(EXAMPLES / "seed-ops.json").ops) == 6
    broken = read_document(EXAMPLES / "broken-ops.json")
    assert len(broken.problems) >= 3


def test_unknown_full_type_id_is_a_problem_not_a_crash_later() -> None:
    text = json.dumps(
        {
            "format": "opmarket.opset",
            "format_version": 1,
            "ops": [
                {
                    "name": "A",
                    "outputs": [{"name": "h", "type": "variant", "full_type": {"type_id": "zz"}}],
                }
            ],
        }
    )
    with pytest.raises(InvalidOpDefError, match="unknown full type id 'zz'"):
        opset_from_json(text)


def test_spec_documents_may_not_declare_an_op_twice() -> None:
    doc = parse_document(json.dumps({"ops": [{"name": "A"}, {"name": "A"}]}), "x.json")
    assert [str(p) for p in doc.problems] == ["x.json: op A: declared more than once"]
