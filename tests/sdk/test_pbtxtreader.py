"""The fast OpList reader reads every text as protobuf's own parser does, or leaves it to it.

``opdefs_from_pbtxt`` tries the fast reader first; ``_opdefs_from_pbtxt_protobuf`` is the path
it replaced (protobuf's text_format plus the proto-to-model converters), kept for the texts
the fast reader leaves alone. Each test compares the two on the same text.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opmarket.sdk import DocumentError, OpDef
from opmarket.sdk._pbtxtreader import read_oplist
from opmarket.sdk._textformat import _opdefs_from_pbtxt_protobuf, opdefs_from_pbtxt

DATA = Path(__file__).parent / "data"
REGISTRIES = ("tf212_registry.pbtxt.gz", "tf221_registry.pbtxt.gz")


def _registry(name: str) -> str:
    with gzip.open(DATA / name, "rt", encoding="utf-8") as f:
        return f.read()


@pytest.fixture(scope="module")
def registries() -> dict[str, str]:
    return {name: _registry(name) for name in REGISTRIES}


@pytest.fixture(scope="module")
def protobuf_ops(registries: dict[str, str]) -> dict[str, list[OpDef]]:
    return {name: _opdefs_from_pbtxt_protobuf(text, name) for name, text in registries.items()}


def _outcome(read: Callable[[str, str], list[OpDef]], text: str) -> object:
    """What reading ``text`` gives: the ops, or the error's message. (Tests run with warnings
    as errors: protobuf's unescaping warns of escapes such as ``\\i``, on either path.)"""
    try:
        return read(text, "x.pbtxt")
    except (DocumentError, Warning) as exc:
        return f"{type(exc).__name__}: {exc}"


def test_both_whole_registries_read_the_same_on_the_fast_path(
    registries: dict[str, str], protobuf_ops: dict[str, list[OpDef]]
) -> None:
    for name, text in registries.items():
        fast = read_oplist(text)
        assert fast is not None, f"{name} left the fast path"
        assert fast == protobuf_ops[name], name
    assert [len(ops) for ops in protobuf_ops.values()] == [1654, 1734]


def test_history_files_read_the_same_on_the_fast_path(tensorflow_testdata: Path) -> None:
    files = sorted((tensorflow_testdata / "tf_ops_history_v2").glob("*.pbtxt"))
    assert files
    for path in files:
        text = path.read_text(encoding="utf-8")
        fast = read_oplist(text)
        assert fast is not None, path.name
        assert fast == _opdefs_from_pbtxt_protobuf(text, path.name), path.name


OP = 'op {{ name: "A" {body} }}'
# Spellings the fast reader builds on sight, and spellings it hands to protobuf's parser; both
# kinds must come out exactly as protobuf reads them.
PLAIN = [
    'input_arg { name: "x" type: DT_FLOAT } output_arg { name: "y" type_attr: "T" is_ref: true }',
    'attr { name: "T" type: "type" default_value { type: DT_INT32 } '
    "allowed_values { list { type: DT_INT32 type: DT_HALF } } }",
    'attr { name: "a" type: "list(int)" default_value { list { i: -3 i: 0 } } has_minimum: true '
    "minimum: 1 }",
    'attr { name: "f" type: "float" default_value { f: 0.1 } }',
    'attr { name: "f" type: "list(float)" default_value { list { f: 1e-05 f: 3 f: -2.5 } } }',
    'attr { name: "s" type: "string" default_value { s: "caf\\303\\251 \\"q\\"" } }',
    "attr { name: 's' type: 'string' default_value { s: 'single' } }",
    'attr { name: "sh" type: "shape" default_value { shape { unknown_rank: true } } }',
    'attr { name: "sh" type: "list(shape)" default_value { list { shape { dim { size: -1 } '
    'dim { size: 2 name: "n" } } shape { } } } }',
    'attr { name: "e" type: "list(string)" default_value { list { } } }',
    'attr { name: "n" type: "int" default_value { } }',
    'attr { name: "m" type: "list(int)" default_value { i: 4 } }',
    'attr { name: "b" type: "int" default_value { s: "abc" } }',
    'attr { name: "odd" type: "list(bogus)" default_value { i: 1 } }',
    'attr { name: "mixed" type: "list(int)" default_value { list { i: 1 s: "a" } } }',
    'output_arg { name: "h" type: DT_VARIANT experimental_full_type { type_id: TFT_ARRAY '
    'args { type_id: TFT_TENSOR args { type_id: TFT_VAR s: "T" } } args { i: 3 } } }',
    'deprecation { version: 12 explanation: "Use B" } is_stateful: true is_commutative: false',
    'control_output: "c1" control_output: "c2" summary: "S" description: "D\\nE"',
    '# a comment\n  summary: "B"  # after a field\n',
    'input_arg { name: "x" type: DT_HALF_REF }',
    'summary: ""',
]
PROTOBUF = [
    'attr { name: "t" type: "tensor" default_value { tensor { dtype: DT_INT32 '
    "tensor_shape { } int_val: 1 } } }",
    'attr { name: "f" type: "func" default_value { func { name: "g" attr { key: "k" '
    "value { i: 1 } } } } }",
    'attr { name: "p" type: "int" default_value { placeholder: "q" } }',
    'attr { name: "f" type: "float" default_value { f: -inf } }',
    'attr { name: "f" type: "float" default_value { f: 1e39 } }',
    'attr { name: "f" type: "float" default_value { f: 2.5f } }',
    'attr { name: "i" type: "int" default_value { i: 0x10 } }',
    'attr { name: "i" type: "int" default_value { i: 010 } }',
    'attr { name: "b" type: "bool" default_value { b: t } }',
    'attr { name: "T" type: "type" default_value { type: 1 } }',
    'attr { name: "T" type: "type" default_value { type: 12345 } }',
    'input_arg { name: "x" type: 1 }',
    'input_arg: { name: "x", type: DT_FLOAT; }',
    'input_arg < name: "x" type: DT_FLOAT >',
    'control_output: ["a", "b"]',
    'attr { name: "l" type: "list(int)" default_value { list { i: [1, 2] } } }',
    'name: "Con" "cat"',
    'name: "" name: "Twice"',
    'attr { name: "m" type: "int" minimum: 0 minimum: 2 }',
    'input_arg { name: "x" type: DT_INVALID type: DT_FLOAT }',
    'input_arg { name: "x" handle_data { dtype: DT_FLOAT } }',
    'output_arg { name: "h" experimental_full_type { type_id: 1000 } }',
    'output_arg { name: "h" experimental_full_type { s: "a" i: 1 } }',
    "is_stateful: 1 is_aggregate: True",
    'attr { name: "x" type: "int" default_value { i: 1 } default_value { i: 2 } }',
    'attr { name: "x" type: "int" default_value { i: 1 s: "a" } }',
    "deprecation { version: 0x10 }",
]
MALFORMED = [
    'name: "A" nme: "x"',
    'name: "A',
    "input_arg { name: 'x' ",
    'input_arg { name: "x" type: DT_NOPE }',
    'attr { name: "i" type: "int" default_value { i: 99999999999999999999 } }',
    "deprecation { version: 3000000000 }",
    'name: "\\xZZ"',
    "name A",
    "}",
]


@pytest.mark.parametrize("body", PLAIN)
def test_plain_spellings_are_read_on_sight_as_protobuf_reads_them(body: str) -> None:
    text = OP.format(body=body)
    assert read_oplist(text) is not None
    assert opdefs_from_pbtxt(text) == _opdefs_from_pbtxt_protobuf(text, "<text>")


@pytest.mark.parametrize("body", PROTOBUF)
def test_other_spellings_come_out_as_protobuf_reads_them(body: str) -> None:
    text = OP.format(body=body)
    assert _outcome(opdefs_from_pbtxt, text) == _outcome(_opdefs_from_pbtxt_protobuf, text)


@pytest.mark.parametrize("body", MALFORMED)
def test_malformed_text_gets_protobufs_error(body: str) -> None:
    text = OP.format(body=body)
    expected = _outcome(_opdefs_from_pbtxt_protobuf, text)
    assert isinstance(expected, str) and "not TensorFlow text format" in expected
    assert _outcome(opdefs_from_pbtxt, text) == expected


def test_a_bare_opdef_and_empty_text_read_as_before() -> None:
    for text in ('name: "Bare" input_arg { name: "x" type: DT_INT32 }', "", "  # nothing\n"):
        assert _outcome(opdefs_from_pbtxt, text) == _outcome(_opdefs_from_pbtxt_protobuf, text)


_CUTS = st.sampled_from([*"{}<>[]:;,\"'#\\ \n", "op {", "name: ", "1", "-", "x", "DT_"])


@given(
    start=st.integers(0, 1733),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 3), _CUTS), max_size=4),
)
def test_mutated_registry_ops_read_as_protobuf_reads_them(
    start: int, edits: list[tuple[float, int, str]]
) -> None:
    text = _REGISTRY_221_OPS[start] + _REGISTRY_221_OPS[(start + 1) % 1734]
    for where, cut, insert in edits:
        at = int(where * len(text))
        text = text[:at] + insert + text[at + cut :]
    assert _outcome(opdefs_from_pbtxt, text) == _outcome(_opdefs_from_pbtxt_protobuf, text)


_REGISTRY_221_OPS = ["op {" + block for block in _registry(REGISTRIES[1]).split("op {")[1:]]
