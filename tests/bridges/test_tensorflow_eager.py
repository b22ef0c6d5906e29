"""opmarket.tensorflow's eager calls bound once per call signature (the inputs' classes and
dtypes, the keywords as given): later calls of a signature skip the binding, and no call
of another signature, nor one whose values differ, gets a result it should not."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")

import opmarket  # noqa: E402 (after the skip)
import opmarket.tensorflow as otf  # noqa: E402
from opmarket.tensorflow import _ops  # noqa: E402 (its binding is counted)
from opmarket.tensorflow._labels import labelled_name  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party


@pytest.fixture
def bindings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ops the bridge binds from now on, one entry per binding (the real one runs)."""
    seen: list[str] = []
    real = _ops._bind

    def counted(op: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(op.name)
        return real(op, *args, **kwargs)

    monkeypatch.setattr(_ops, "_bind", counted)
    return seen


def test_a_signature_is_bound_once(bindings: list[str]) -> None:
    x = tf.constant(np.arange(1, 9, dtype=np.int32))
    for i in range(3):
        want = opmarket.ops.zero_out(x.numpy(), preserve_index=i)
        np.testing.assert_array_equal(otf.ops.zero_out(x, preserve_index=i), want)
    # preserve_index 0, 1, 2 are three signatures (an earlier test may have bound some);
    # repeating one binds nothing new.
    first = bindings.count("Opm>ZeroOut")
    assert first <= 3
    for i in range(3):
        otf.ops.zero_out(x, preserve_index=i)
    assert bindings.count("Opm>ZeroOut") == first
    pool = {"ksize": [1, 3, 3, 1], "strides": [1, 1, 1, 1], "padding": "SAME"}
    img = tf.constant(np.random.default_rng(3).random((1, 7, 5, 1), dtype=np.float32))
    for _ in range(3):  # list attrs are part of the key too
        otf.ops.median_pool(img, **pool)
    assert bindings.count("Opm>MedianPool") <= 1


def test_numpy_inputs_and_labels_take_the_kept_call_too(bindings: list[str]) -> None:
    v = np.linspace(-2, 2, 5, dtype=np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(otf.ops.time_two(v), opmarket.ops.time_two(v))
    x = tf.constant(np.arange(6, dtype=np.int32))
    for _ in range(3):
        np.testing.assert_array_equal(
            otf.ops.zero_out(x, preserve_index=4, label="c_abi"),
            opmarket.ops.zero_out(x.numpy(), preserve_index=4),
        )
    # At most once each (an earlier test may have bound the signature).
    assert bindings.count("Opm>TimeTwo") <= 1
    assert bindings.count("Opm>ZeroOut") <= 1


@pytest.mark.parametrize(
    ("first", "then"),
    [
        # another dtype: another kernel and result type
        ((np.arange(4, dtype=np.int32), {}), (np.arange(4, dtype=np.float32), {})),
        # an attr of another class (True is not 1)
        ((np.arange(4, dtype=np.int32), {"preserve_index": 1}),
         (np.arange(4, dtype=np.int32), {"preserve_index": True})),
        # a tensor, then a numpy array of another dtype
        ((tf.constant([1, 2, 3]), {}), (np.array([1.5, 2.5, 3.5]), {})),
    ],
)  # fmt: skip
def test_another_signature_is_bound_anew(first: Any, then: Any) -> None:
    for x, attrs in (first, then):
        for _ in range(2):
            try:
                got: Any = otf.ops.zero_out(x, **attrs)
            except (ValueError, tf.errors.InvalidArgumentError) as exc:
                got = type(exc)
            want: Any
            try:
                want = opmarket.ops.zero_out(np.asarray(x), **attrs)
            except ValueError:
                want = None
            if want is None:
                assert got in (tf.errors.InvalidArgumentError, ValueError)
            else:
                assert got.dtype.as_numpy_dtype == want.dtype
                np.testing.assert_array_equal(got, want)


def test_a_kept_call_still_checks_values_and_records_gradients() -> None:
    x = tf.constant(np.arange(1, 9, dtype=np.int32))
    otf.ops.zero_out(x, preserve_index=5)
    short = tf.constant(np.arange(1, 4, dtype=np.int32))  # same signature, too short
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range"):
        otf.ops.zero_out(short, preserve_index=5)
    v = tf.constant([0.5, 2.0], tf.float32)
    for _ in range(2):
        with tf.GradientTape() as tape:
            tape.watch(v)
            y = tf.reduce_sum(otf.ops.atan(v))
        np.testing.assert_allclose(tape.gradient(y, v), 1 / (1 + v.numpy() ** 2), rtol=1e-6)


def test_a_tensor_of_another_dtype_takes_the_kept_call_and_opmarket_checks_it(
    bindings: list[str],
) -> None:
    """An eager tensor is keyed by its class: the kept call (TensorFlow's fast path) infers
    the type attr from each tensor; a dtype opmarket refuses still gets opmarket's message."""
    attrs = {"preserve_index": 7}  # a signature no other test uses
    ints = tf.constant(np.arange(9, dtype=np.int32))
    doubles = tf.constant(np.linspace(0, 1, 9))
    for x in (ints, doubles, ints, doubles):
        got = otf.ops.zero_out(x, **attrs)
        assert got.dtype == x.dtype
        np.testing.assert_array_equal(got, opmarket.ops.zero_out(x.numpy(), **attrs))
    assert bindings == ["Opm>ZeroOut"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="attr 'T' may not be int64"):
        otf.ops.zero_out(tf.constant(np.arange(9, dtype=np.int64)), **attrs)


def test_the_kept_calls_are_bounded(bindings: list[str]) -> None:
    # preserve_index from 100: signatures no other test uses (an eager tensor is keyed by
    # its class, not its dtype).
    first = 100
    x = tf.constant(np.arange(first + _ops.MAX_KEPT + 2, dtype=np.float64))
    otf.ops.zero_out(x, preserve_index=first)
    otf.ops.zero_out(x, preserve_index=first)
    assert bindings == ["Opm>ZeroOut"]
    for i in range(1, _ops.MAX_KEPT + 2):  # as many new signatures: the kept ones go
        otf.ops.zero_out(x, preserve_index=first + i)
    assert len(bindings) == _ops.MAX_KEPT + 2
    otf.ops.zero_out(x, preserve_index=first)
    assert len(bindings) == _ops.MAX_KEPT + 3


@pytest.fixture
def eager_ops() -> Any:
    """The ops TensorFlow runs eagerly from now on, by type (TensorFlow's op callbacks)."""
    from tensorflow.python.framework import op_callbacks

    seen: list[str] = []

    def callback(op_type: str, *args: Any, graph: Any = None, **kwargs: Any) -> None:
        if graph is None:
            seen.append(op_type)

    op_callbacks.add_op_callback(callback)
    yield seen
    op_callbacks.remove_op_callback(callback)


def test_a_labelled_eager_call_runs_its_labels_kernel_as_one_eager_op(eager_ops: Any) -> None:
    """Issue 24: eager execution takes no ``_kernel`` attr, so a labelled call ran a one-node
    tf.function (~200 us); now it runs the label's own op, whose kernels are the label's."""
    x = tf.constant(np.arange(1, 7, dtype=np.int32))
    for _ in range(2):  # bound, then kept
        np.testing.assert_array_equal(
            otf.ops.zero_out(x, preserve_index=2, label="c_abi"),
            opmarket.ops.zero_out(x.numpy(), preserve_index=2),
        )
    assert eager_ops == [labelled_name("Opm>ZeroOut", "c_abi")] * 2
    # The C plugin's kernel (ZeroOutOp<T>) by label, the C++ one (zero_out_<T>) without.
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"kernel ZeroOutOp<int32>\)"):
        otf.ops.zero_out(x[:2], preserve_index=2, label="c_abi")
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"kernel zero_out_int32\)"):
        otf.ops.zero_out(x[:2], preserve_index=2)


def test_any_label_gets_an_op_of_its_own_and_records_gradients(eager_ops: Any) -> None:
    from opmarket.registry import isolated_registry
    from opmarket.sdk import kernel, op, register_gradient, shape_fn, unchanged

    name = "BridgeTest>TfLabelled"
    probe = op(name).input("x: float").output("y: float").build()

    @kernel(name)
    def twice(x: Any) -> Any:
        return x * 2

    @kernel(name, label="fast-v2")
    def thrice(x: Any) -> Any:
        return x * 3

    @register_gradient(name)
    def grad(op: Any, dy: Any) -> Any:
        return [dy * 3]

    with isolated_registry():
        opmarket.register(probe, twice, thrice, grad, shape_fn(name, unchanged))
        otf.register()
        x = tf.constant([1.0, 2.0])
        for _ in range(2):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = otf.ops.tf_labelled(x, label="fast-v2")
            np.testing.assert_array_equal(y, [3.0, 6.0])
            np.testing.assert_array_equal(tape.gradient(y, x), [3.0, 3.0])
        np.testing.assert_array_equal(otf.ops.tf_labelled(x), [2.0, 4.0])
    hex_name = labelled_name(name, "fast-v2")
    assert hex_name == name + ">OpmLabelHex_" + b"fast-v2".hex()
    assert eager_ops.count(hex_name) == 2
