"""Every first-party op in a converted ``.tflite`` model, run by opmarket.litert, gives what
TensorFlow's own run of the same ``tf.function`` gives, bit for bit; and models that mix
several different custom ops.

Origin: tensorflow/tensorflow ``tensorflow/lite/python/lite_test.py``,
``FromConcreteFunctionTest`` (a ``tf.function`` converted with
``TFLiteConverter.from_concrete_functions``, run in the interpreter, its output compared
with the function's), with ``allow_custom_ops`` as ``lite_test.py``'s custom-op tests
convert (``testCustomOps``-style: the converter keeps the ops as custom ops that the
interpreter's resolver must provide).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")
pytest.importorskip("ai_edge_litert", reason="needs the litert extra")

import opmarket.litert as olr  # noqa: E402 (after the skips)
import opmarket.tensorflow as otf  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

from .conftest import CASES, Case  # noqa: E402

pytestmark = needs_first_party

_Array = np.ndarray[Any, Any]
RNG = np.random.default_rng(3)


def _convert(fn: Any) -> bytes:
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.allow_custom_ops = True
    model: bytes = converter.convert()
    return model


def _run(content: bytes, inputs: list[_Array]) -> list[_Array]:
    """Every output of the model, in the order of the function's outputs."""
    it = olr.interpreter(model_content=content)
    it.allocate_tensors()
    for detail, value in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(detail["index"], value)
    it.invoke()
    details = sorted(it.get_output_details(), key=lambda d: d["name"])
    return [np.asarray(it.get_tensor(d["index"])) for d in details]


def _same_bits(got: _Array, want: _Array) -> None:
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert got.tobytes() == want.tobytes()


def _function(case: Case) -> Callable[..., Any]:
    kwargs = {k: tf.as_dtype(v) if k == "type" else v for k, v in case.attrs.items()}
    if case.label:
        kwargs["label"] = case.label
    op = otf.ops[case.op]
    specs = [tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)) for x in case.inputs()]
    return tf.function(lambda *xs: op(*xs, **kwargs), input_signature=specs)  # type: ignore[no-any-return]


# The shared first-party cases (tests/bridges/conftest.py) and the other dtypes each op has.
MORE = [
    Case("time_two_int64", "Opm>TimeTwo", lambda: [np.array([1, -2, 2**40], np.int64)]),
    Case("time_two_double", "Opm>TimeTwo", lambda: [RNG.standard_normal((2, 3))]),
    Case("atan_double", "Opm>Atan", lambda: [np.linspace(-5, 5, 11)]),
    Case("zero_out_double", "Opm>ZeroOut", lambda: [np.linspace(-1, 1, 4)], {"preserve_index": 3}),
    Case(
        "median_pool_valid_double",
        "Opm>MedianPool",
        lambda: [np.random.default_rng(1).standard_normal((1, 7, 6, 2))],
        {"ksize": [1, 3, 2, 1], "strides": [1, 2, 2, 1], "padding": "VALID"},
    ),
]
ALL = [*CASES, *MORE]


@pytest.mark.parametrize("case", ALL, ids=[c.id for c in ALL])
def test_every_first_party_op_runs_in_litert_as_in_tensorflow(case: Case) -> None:
    fn = _function(case)
    inputs = case.inputs()
    want = fn(*inputs).numpy()
    content = _convert(fn)
    assert [name for name, _ in olr.custom_ops_of(content)] == [case.op]
    (got,) = _run(content, inputs)
    _same_bits(got, want)


def test_a_model_with_several_different_custom_ops() -> None:
    """Six different opmarket ops in one model, feeding each other and TensorFlow's own
    ops, each output bit for bit TensorFlow's."""

    @tf.function(
        input_signature=[tf.TensorSpec([1, 6, 5, 1], tf.float32), tf.TensorSpec([3], tf.float32)]
    )
    def model(image: Any, b: Any) -> Any:
        pooled = otf.ops.median_pool(
            otf.ops.atan(image), ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1], padding="SAME"
        )
        flat = tf.reshape(otf.ops.time_two(pooled), [-1])
        mixed = otf.ops.do_custom_call(b, flat)
        return {
            "a_mixed": otf.ops.zero_out(mixed, preserve_index=4),
            "b_bits": otf.ops.bitcast(mixed, type=tf.int32),
        }

    image = RNG.standard_normal((1, 6, 5, 1)).astype(np.float32)
    b = np.float32([1.0, -0.5, 0.25])
    want = model(image, b)
    content = _convert(model)
    assert sorted(name for name, _ in olr.custom_ops_of(content)) == [
        "Opm>Atan",
        "Opm>Bitcast",
        "Opm>DoCustomCall",
        "Opm>MedianPool",
        "Opm>TimeTwo",
        "Opm>ZeroOut",
    ]
    got = _run(content, [image, b])
    _same_bits(got[0], want["a_mixed"].numpy())
    _same_bits(got[1], want["b_bits"].numpy())
