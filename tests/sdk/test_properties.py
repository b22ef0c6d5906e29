"""Property tests: valid ops survive every format unchanged; garbage only raises our errors."""

from __future__ import annotations

import contextlib
import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from opmarket.sdk import (
    DType,
    OpDef,
    OpmarketError,
    finalize_op,
    parse_document,
    render_document,
)
from opmarket.sdk._spec import _quote
from opmarket.sdk._specjson import op_to_spec

# Types a {...} set can list: TensorFlow reads only [a-z0-9] there.
SET_TYPES = [
    d.spec_name for d in DType if not d.is_ref and d is not DType.INVALID and "_" not in d.spec_name
]
ARG_TYPES = [d.spec_name for d in DType if not d.is_ref and d is not DType.INVALID]
names = st.text("abcdefghij", min_size=1, max_size=6).map(lambda s: "a_" + s)


@st.composite
def attr_specs(draw: st.DrawFn, name: str) -> str:
    kind = draw(
        st.sampled_from(
            [
                "int",
                "float",
                "bool",
                "string",
                "type",
                "shape",
                "list(int)",
                "list(type)",
                "list(string)",
                "tensor",
                "func",
            ]
        )
    )
    if kind == "int":
        minimum = draw(st.none() | st.integers(-3, 3))
        spec = f"{name}: int" + ("" if minimum is None else f" >= {minimum}")
        if draw(st.booleans()):
            spec += f" = {draw(st.integers(minimum if minimum is not None else -50, 50))}"
        return spec
    if kind == "float":
        value = draw(st.floats(width=32, allow_nan=False) | st.sampled_from([1e-05, 0.1, -2.5]))
        return f"{name}: float = {value!r}" if draw(st.booleans()) else f"{name}: float"
    if kind == "bool":
        return f"{name}: bool = {draw(st.sampled_from(['true', 'false']))}"
    if kind == "string":
        allowed = draw(
            st.none()
            | st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=3, unique=True)
        )
        if allowed is None:
            return f"{name}: string = {_quote(draw(st.text(max_size=8)))}"
        spec = f"{name}: {{{', '.join(_quote(a) for a in allowed)}}}"
        return spec + (
            f" = {_quote(draw(st.sampled_from(allowed)))}" if draw(st.booleans()) else ""
        )
    if kind == "type":
        allowed = draw(st.lists(st.sampled_from(SET_TYPES), min_size=1, max_size=4, unique=True))
        spec = f"{name}: {{{', '.join(allowed)}}}"
        if draw(st.booleans()):
            spec += f" = DT_{draw(st.sampled_from(allowed)).upper()}"
        return spec
    if kind == "shape":
        dims = draw(st.none() | st.lists(st.integers(-1, 9), max_size=4))
        body = (
            "{ unknown_rank: true }"
            if dims is None
            else ("{ " + " ".join(f"dim {{ size: {d} }}" for d in dims) + " }")
        )
        return f"{name}: shape = {body}"
    if kind == "tensor":
        return f"{name}: tensor = {{ dtype: DT_INT32 int_val: {draw(st.integers(-9, 9))} }}"
    if kind == "func":
        return f"{name}: func = {{ name: {_quote(draw(st.text('fgh', min_size=1)))} }}"
    minimum = draw(st.integers(0, 2))
    base = kind[5:-1]
    values = {
        "int": st.integers(-5, 5).map(str),
        "type": st.sampled_from(SET_TYPES).map(lambda t: f"DT_{t.upper()}"),
        "string": st.text(max_size=3).map(_quote),
    }[base]
    default = draw(st.lists(values, min_size=minimum, max_size=3))
    return f"{name}: {kind} >= {minimum} = [{', '.join(default)}]"


@st.composite
def ops(draw: st.DrawFn) -> dict[str, Any]:
    attr_names = draw(st.lists(names, max_size=5, unique=True))
    attrs = [draw(attr_specs(n)) for n in attr_names]
    inputs, outputs = [], []
    for i in range(draw(st.integers(0, 3))):
        form = draw(st.sampled_from(["fixed", "typeattr", "numbered", "typelist", "ref"]))
        if form == "fixed":
            spec = draw(st.sampled_from(ARG_TYPES))
        elif form in ("typeattr", "ref"):
            attrs.append(f"T{i}: type")
            spec = f"Ref(T{i})" if form == "ref" else f"T{i}"
        elif form == "numbered":
            attrs.append(f"N{i}: int >= {draw(st.integers(0, 2))}")
            spec = f"N{i} * {draw(st.sampled_from(ARG_TYPES))}"
        else:
            attrs.append(f"L{i}: list(type)")
            spec = f"L{i}"
        (outputs if draw(st.booleans()) else inputs).append(f"x{i}: {spec}")
    return {
        "name": draw(st.sampled_from(["ZeroOut", "Opm>ZeroOut", "A>B9", "MedianPool"])),
        "inputs": inputs,
        "outputs": outputs,
        "attrs": attrs,
        "doc": draw(st.sampled_from(["", "Does a thing.", "Sum.\n\nMore text."])),
        "is_stateful": draw(st.booleans()),
        "is_commutative": draw(st.booleans()),
    }


def build(spec: dict[str, Any]) -> OpDef:
    built, problems = finalize_op(**spec)
    assert built is not None, problems
    return built


@given(ops())
def test_valid_ops_survive_every_format_unchanged(spec: dict[str, Any]) -> None:
    opdef = build(spec)
    # spec -> model -> canonical JSON -> model -> TF text -> model -> spec form -> model
    via_json = parse_document(render_document([opdef], "json")).ops[0]
    assert via_json == opdef
    via_text = parse_document(render_document([via_json], "tf-pbtxt")).ops[0]
    assert via_text == opdef
    via_spec = parse_document(render_document([via_text], "spec")).ops[0]
    assert via_spec == opdef
    spec_form, notes = op_to_spec(opdef)
    assert notes == []
    assert json.loads(render_document([opdef], "spec"))["ops"][0] == spec_form


@given(st.text(max_size=60))
def test_garbage_specs_give_problems_not_exceptions(garbage: str) -> None:
    for field in ("inputs", "outputs", "attrs"):
        built, problems = finalize_op("Op", **{field: [garbage]})
        assert (built is None) == bool(problems)


@given(st.text(max_size=200) | st.binary(max_size=100).map(lambda b: b.decode("latin-1")))
def test_garbage_documents_raise_only_opmarket_errors(text: str) -> None:
    with contextlib.suppress(OpmarketError):
        parse_document(text, "garbage")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda kids: (
        st.lists(kids, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "name",
                    "ops",
                    "inputs",
                    "attrs",
                    "type",
                    "default",
                    "format",
                    "format_version",
                    "outputs",
                    "doc",
                    "kernels",
                    "device",
                    "op",
                ]
            ),
            kids,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@given(json_values)
def test_garbage_json_raises_only_opmarket_errors(value: Any) -> None:
    for doc in (
        value,
        {"ops": [value]},
        {"format": "opmarket.opset", "format_version": 1, "ops": [value]},
    ):
        with contextlib.suppress(OpmarketError):
            parse_document(json.dumps(doc), "garbage.json")
