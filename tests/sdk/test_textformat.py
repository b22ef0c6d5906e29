"""TensorFlow's text format: ops.pbtxt and ops_history files in and out."""

from __future__ import annotations

from pathlib import Path

import pytest

from opmarket.sdk import (
    DocumentError,
    DType,
    FullType,
    TensorShape,
    op,
    opdefs_from_pbtxt,
    opdefs_to_pbtxt,
    parse_document,
    read_document,
)


def history_files(data: Path) -> list[Path]:
    return sorted((data / "tf_ops_history_v2").glob("*.pbtxt"))


def test_history_files_parse_validate_and_round_trip(tensorflow_testdata: Path) -> None:
    files = history_files(tensorflow_testdata)
    assert len(files) == 45
    versions = 0
    for path in files:
        doc = read_document(path)
        assert doc.problems == [], path.name
        assert {o.name for o in doc.ops} == {path.stem}
        versions += len(doc.ops)
        # TensorFlow's own file comes back byte for byte.
        assert opdefs_to_pbtxt(doc.ops) == path.read_text(), path.name
    assert versions == 45 + 119  # 119 transitions between consecutive versions


def test_full_types_and_shape_defaults_are_read(tensorflow_testdata: Path) -> None:
    placeholder = read_document(tensorflow_testdata / "tf_ops_history_v2" / "Placeholder.pbtxt")
    assert [o.attr("shape").default for o in placeholder.ops] == [  # type: ignore[union-attr]
        TensorShape(()),
        TensorShape(None),
    ]
    mapds = read_document(tensorflow_testdata / "tf_ops_history_v2" / "MapDataset.pbtxt").ops[-1]
    full = mapds.outputs[0].full_type
    assert isinstance(full, FullType) and full.type_id == "TFT_DATASET"


def test_single_opdef_without_oplist_wrapper() -> None:
    ops = opdefs_from_pbtxt('name: "ZeroOut" input_arg { name: "x" type: DT_INT32 }')
    assert ops[0].inputs[0].type is DType.INT32


def test_model_to_text_and_back() -> None:
    built = (
        op("Opm>ZeroOut")
        .input("to_zero: T")
        .output("zeroed: T")
        .attr("T: {float, int32} = DT_INT32")
        .attr("preserve_index: int >= 0 = 0")
        .attr("f: float = 1")
        .attr("sh: list(shape) = [{dim {size: -1}}]")
        .build()
    )
    text = opdefs_to_pbtxt([built])
    assert "      f: 1\n" in text  # as TensorFlow prints floats
    assert opdefs_from_pbtxt(text) == [built]


@pytest.mark.parametrize(
    "text",
    ["op { nme: 'x' }", "op {", "{ json: 1 }", "op { name: 'x' input_arg { type: DT_NOPE } }"],
)
def test_unreadable_text_is_a_document_error(text: str) -> None:
    with pytest.raises(DocumentError, match="not TensorFlow text format"):
        opdefs_from_pbtxt(text, "bad.pbtxt")


def test_a_default_with_no_value_is_invalid_as_in_tensorflow() -> None:
    doc = parse_document(
        'op { name: "A" attr { name: "a" type: "int" default_value { } } '
        'attr { name: "l" type: "list(int)" default_value { } } }'
    )
    assert [str(p) for p in doc.problems] == [
        "<text>: op A: attr 'a': default: attr 'a': the value is missing (expected int)"
    ]


def test_a_value_of_the_wrong_kind_is_invalid_not_guessed() -> None:
    doc = parse_document(
        'op { name: "A" attr { name: "b" type: "int" default_value { s: "abc" } } '
        'attr { name: "m" type: "list(int)" default_value { i: 4 } } '
        'attr { name: "e" type: "list(float)" default_value { list { } } } }'
    )
    assert [str(p) for p in doc.problems] == [
        "<text>: op A: attr 'b': default: attr 'b': holds a string value where int is expected",
        "<text>: op A: attr 'm': default: attr 'm': holds a int value where list(int) is expected",
    ]
    assert doc.ops[0].attr("e").default == ()  # type: ignore[union-attr]
