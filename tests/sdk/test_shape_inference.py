from __future__ import annotations

import pytest

from opmarket.sdk import (
    InferenceContext,
    InvalidArgumentError,
    OpDef,
    Shape,
    broadcast_shape,
    broadcasting,
    format_shape,
    infer_error,
    infer_ok,
    merge_all_inputs,
    op,
    parse_shape,
    scalar_shape,
    shape_fn,
    unchanged,
)

VECTOR_OP = op("Opm>Vec").input("x: float").output("y: float").build()


def vector(c: InferenceContext) -> None:
    c.set_output(0, c.with_rank(c.input(0), 1))


def first_dim_by_three(c: InferenceContext) -> None:
    # The guide's example: (n, ...) -> (n, 3).
    c.set_output(0, c.matrix(c.dim(c.input(0), 0), 3))


def merge_rank2(c: InferenceContext) -> None:
    out: Shape = None
    for i in range(c.num_inputs):
        out = c.merge(out, c.with_rank(c.input(i), 2))
    c.set_output(0, out)


@pytest.mark.parametrize(
    ("text", "shape"),
    [
        ("?", None),
        ("[]", ()),
        ("[2,?]", (2, None)),
        ("[ 1 , 2 ]", (1, 2)),
    ],
)
def test_shape_text(text: str, shape: Shape) -> None:
    assert parse_shape(text) == shape
    assert parse_shape(format_shape(shape)) == shape


@pytest.mark.parametrize(
    ("fn", "inputs", "expected"),
    [
        (unchanged, "[1,?]", "in0"),
        (unchanged, "?", "?"),
        (vector, "?", "[?]"),
        (vector, "[7]", "[7]"),
        (first_dim_by_three, "[5,2,9]", "[d0_0,3]"),
        (first_dim_by_three, "?", "[?,3]"),
        (merge_rank2, "[2,?];[?,3];?", "[2,3]"),
        (merge_all_inputs, "[2,?];[?,3]", "[2,3]"),
        (broadcasting, "[5,1,3];[4,1]", "[5,4,3]"),
        (broadcasting, "[?,3];[1]", "[?,3]"),
        (broadcasting, "[2];?", "?"),
        (scalar_shape, "[9]", "[]"),
    ],
)
def test_infer_ok(fn: object, inputs: str, expected: str) -> None:
    infer_ok(VECTOR_OP, fn, inputs, expected)  # type: ignore[arg-type]  # table of fns


@pytest.mark.parametrize(
    ("fn", "inputs", "message"),
    [
        (vector, "[1,2]", "Shape must be rank 1 but is rank 2"),
        (merge_rank2, "[2,3];[3,3]", "Dimensions must be equal, but are 2 and 3"),
        (merge_rank2, "[2,3];[2]", "Shape must be rank 2 but is rank 1"),
        (broadcasting, "[2,3];[4]", "Incompatible shapes: [2,3] vs. [4]"),
        (first_dim_by_three, "[]", "dimension index 0 out of range for shape []"),
    ],
)
def test_infer_error(fn: object, inputs: str, message: str) -> None:
    infer_error(VECTOR_OP, fn, inputs, message)  # type: ignore[arg-type]  # table of fns


def test_the_helpers_fail_when_they_should() -> None:
    with pytest.raises(AssertionError, match=r"inferred '\[1\]' from '\[1\]', expected"):
        infer_ok(VECTOR_OP, vector, "[1]", "[2]")
    with pytest.raises(AssertionError, match="expected an error"):
        infer_error(VECTOR_OP, vector, "[1]", "rank")
    with pytest.raises(AssertionError, match="does not contain"):
        infer_error(VECTOR_OP, vector, "[1,1]", "something else")


def test_dim_arithmetic_and_attrs() -> None:
    c = InferenceContext(None, [(4, None)], {"k": 2}, num_outputs=1)
    assert c.add(c.dim(c.input(0), 0), 1) == 5
    assert c.add(c.dim(c.input(0), 1), 1) is None
    assert c.multiply(c.dim(c.input(0), 1), 0) == 0
    assert c.multiply(3, c.get_attr("k")) == 6
    assert c.divide(4, 2, evenly=True) == 2
    assert c.with_rank_at_least((1, 2), 2) == (1, 2)
    assert c.with_value(None, 3) == 3
    assert c.unknown() is None and c.scalar() == () and c.vector(2) == (2,)
    with pytest.raises(InvalidArgumentError, match="Negative dimension size"):
        c.subtract(1, 2)
    with pytest.raises(InvalidArgumentError, match="no attr named 'missing'"):
        c.get_attr("missing")
    with pytest.raises(InvalidArgumentError, match="at most rank 1"):
        c.with_rank_at_most((1, 2), 1)
    assert broadcast_shape((3,), (2, 1)) == (2, 3)


def test_declaring_a_shape_function() -> None:
    @shape_fn("Opm>Vec")
    def fn(c: InferenceContext) -> None:
        unchanged(c)

    from opmarket.sdk._kernel import declarations

    (spec,) = declarations(fn)
    assert spec.op == "Opm>Vec" and spec.fn is fn
    assert shape_fn("Opm>Vec", unchanged).fn is unchanged
    assert declarations(unchanged) == []  # a shared function is not marked


def test_vector_op_is_an_opdef() -> None:
    assert isinstance(VECTOR_OP, OpDef)


def test_parity_with_tensorflow_edges() -> None:
    c = InferenceContext(None, [(4, None, 3)], {}, num_outputs=2)
    # Subshape: negative bounds count from the end; bounds past the rank are errors.
    assert c.subshape(c.input(0), 1) == (None, 3)
    assert c.subshape(c.input(0), -2, -1) == (None,)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        c.subshape(c.input(0), 0, 4)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        c.subshape(c.input(0), -4)
    assert c.subshape(None, 0, 9) is None
    # Divide by an unknown dim is unknown, not an error.
    assert c.divide(8, None) is None and c.divide(8, 2, evenly=True) == 4
    # Output indexes are checked like input indexes.
    with pytest.raises(InvalidArgumentError, match="output index 2 out of range"):
        c.output(2)
    # ScalarShape sets output 0 only, as TensorFlow's does.
    scalar_shape(c)
    assert c.finish() == [(), None]
