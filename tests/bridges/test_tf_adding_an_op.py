"""TensorFlow's own tests of its "Adding a new op" example, adapted to the ZeroOut plugin as
``opmarket.tensorflow`` carries it, and TensorFlow's gradient checkers on every first-party
op that has a gradient.

Origins (tensorflow/tensorflow, ``tensorflow/examples/adding_an_op/``):
``zero_out_1_test.py`` (the op, its namespaced names, an op on an op's output, loading
twice), ``zero_out_2_test.py`` (type polymorphism, the gradient checked with
``compute_gradient_error``), ``zero_out_3_test.py`` (the ``preserve_index`` attr and the
errors for a negative and a too-large index). The checkers: ``tf.test.compute_gradient``
(``tensorflow/python/ops/gradient_checker_v2.py``, eager and in ``tf.function``) and
``tf.compat.v1.test.compute_gradient_error`` (``gradient_checker.py``, a v1 graph and
session).

Where opmarket's ZeroOut differs from the example's, the test says how: its input is a
vector (the example's version 2 took any shape; opmarket's shape function refuses others),
and ``preserve_index`` has ``minimum: 0``, so a negative index is refused when the attr is
checked, before the kernel's own ``Need preserve_index >= 0`` check could run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")

import opmarket.tensorflow as otf  # noqa: E402 (after the skip)
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party

# --- zero_out_1_test.py ------------------------------------------------------------------


def test_zero_out() -> None:
    """zero_out_1_test.ZeroOut1Test.test."""
    result = otf.ops.zero_out([5, 4, 3, 2, 1])
    np.testing.assert_array_equal(result, [5, 0, 0, 0, 0])
    assert result.dtype == tf.int32  # the T attr's default, as the example's int32-only op


@pytest.mark.parametrize("name", ["opm.zero_out", "Opm>ZeroOut"])
def test_zero_out_by_its_namespaced_names(name: str) -> None:
    """zero_out_1_test.ZeroOut1Test.test_namespace and test_namespace_nested: the op under
    its namespace, as a Python attribute path and as its full name."""
    fn = otf.ops[name] if ">" in name else otf.ops.opm.zero_out
    np.testing.assert_array_equal(fn([5, 4, 3, 2, 1]), [5, 0, 0, 0, 0])
    assert fn is otf.ops.zero_out


def test_zero_out_on_its_own_output() -> None:
    """zero_out_1_test.ZeroOut1Test.test_namespace_call_op_on_op."""
    x = otf.ops.opm.zero_out([5, 4, 3, 2, 1])
    np.testing.assert_array_equal(otf.ops.opm.zero_out(x), [5, 0, 0, 0, 0])


def test_registering_twice_gives_the_same_op() -> None:
    """zero_out_1_test.ZeroOut1Test.test_load_twice: loading the library again changes
    nothing; here, registering opmarket's ops with TensorFlow again."""
    before = otf.ops.zero_out
    assert otf.register() is None
    assert otf.ops.zero_out is before
    np.testing.assert_array_equal(otf.ops.zero_out([5, 4, 3]), [5, 0, 0])


# --- zero_out_2_test.py ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [tf.int32, tf.float32, tf.float64])
def test_zero_out_is_type_polymorphic(dtype: Any) -> None:
    """zero_out_2_test.ZeroOut2Test.test, for each type of the op's T attr (version 2 of
    the example made the op polymorphic over float and int32)."""
    x = tf.constant([5, 4, 3, 2, 1], dtype)
    result = otf.ops.zero_out(x)
    assert result.dtype == dtype
    np.testing.assert_array_equal(result, [5, 0, 0, 0, 0])
    traced = tf.function(otf.ops.zero_out)(x)
    assert traced.dtype == dtype
    np.testing.assert_array_equal(traced, [5, 0, 0, 0, 0])


def test_zero_out_refuses_a_type_outside_its_t_attr() -> None:
    """zero_out_2_test's polymorphism, from the other side: a type the op does not list is
    an error naming the attr's allowed types, eagerly and while tracing."""
    x = tf.constant([5, 4, 3], tf.int64)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"(?s)T.*int64.*int32"):
        otf.ops.zero_out(x)
    with pytest.raises(ValueError, match=r"(?s)T.*int64.*int32"):
        tf.function(otf.ops.zero_out)(x)


def test_zero_out_refuses_a_matrix() -> None:
    """zero_out_2_test.ZeroOut2Test.test_2d: the example's version 2 takes any shape;
    opmarket's ZeroOut is the vector op of version 1 and 3, whose shape function requires
    rank 1. A matrix is refused with that reason: eagerly by the kernel's own check,
    while tracing by the shape function."""
    x = [[6, 5, 4], [3, 2, 1]]
    with pytest.raises(tf.errors.InvalidArgumentError, match="expects a 1-D vector"):
        otf.ops.zero_out(x)
    with pytest.raises(ValueError, match="rank 1"):
        tf.function(otf.ops.zero_out)(tf.constant(x))


def test_zero_out_gradient_error_in_a_v1_graph() -> None:
    """zero_out_2_test.ZeroOut2Test.test_grad: ``compute_gradient_error`` in a graph, in a
    session, below 1e-4."""
    with tf.Graph().as_default(), tf.compat.v1.Session():
        x = tf.constant([5, 4, 3, 2, 1], dtype=tf.float32)
        y = otf.ops.zero_out(x)
        err = tf.compat.v1.test.compute_gradient_error(x, (5,), y, (5,))
    assert err < 1e-4


# --- zero_out_3_test.py ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_zero_out_preserve_index_attr(mode: str) -> None:
    """zero_out_3_test.ZeroOut3Test.test and testAttr."""
    call = otf.ops.zero_out if mode == "eager" else tf.function(otf.ops.zero_out)
    np.testing.assert_array_equal(call([5, 4, 3, 2, 1]), [5, 0, 0, 0, 0])
    np.testing.assert_array_equal(call([5, 4, 3, 2, 1], preserve_index=3), [0, 0, 0, 2, 0])


def test_zero_out_negative_index() -> None:
    """zero_out_3_test.ZeroOut3Test.testNegative. The example's kernel says "Need
    preserve_index >= 0, got -1"; opmarket's op declares ``preserve_index: int >= 0``, so the
    attr check refuses it first, quoting the value and the minimum (TensorFlow's own attr
    check words it the same way for its ops)."""
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"preserve_index.*-1.*0"):
        otf.ops.zero_out([5, 4, 3, 2, 1], preserve_index=-1)
    with pytest.raises(ValueError, match=r"preserve_index.*-1.*0"):
        tf.function(lambda x: otf.ops.zero_out(x, preserve_index=-1))(tf.constant([5, 4, 3]))


def test_zero_out_index_out_of_range() -> None:
    """zero_out_3_test.ZeroOut3Test.testLarge: the kernel's own check, an OpError with its
    message, eagerly and from a graph whose input length is only known when it runs."""
    with pytest.raises(tf.errors.InvalidArgumentError, match="preserve_index out of range"):
        otf.ops.zero_out([5, 4, 3, 2, 1], preserve_index=17)
    fn = tf.function(
        lambda x: otf.ops.zero_out(x, preserve_index=17),
        input_signature=[tf.TensorSpec([None], tf.int32)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="preserve_index out of range"):
        fn(tf.constant([5, 4, 3, 2, 1]))


# --- the gradient checkers ---------------------------------------------------------------

RNG = np.random.default_rng(22)
_IMAGE = RNG.permutation(2 * 5 * 4 * 2).reshape(2, 5, 4, 2).astype(np.float64) / 8  # no ties
POOL = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"}

# (name, the op as a function of one tensor, an input): every first-party op with a
# gradient (Bitcast has none by design; DoCustomCall is checked below on its two inputs).
GRADIENT_CASES: list[tuple[str, Callable[[Any], Any], np.ndarray[Any, Any]]] = [
    ("atan", otf.ops.atan, RNG.standard_normal(6)),
    ("time_two", otf.ops.time_two, RNG.standard_normal((2, 3))),
    ("zero_out", lambda x: otf.ops.zero_out(x, preserve_index=2), RNG.standard_normal(5)),
    ("median_pool", lambda x: otf.ops.median_pool(x, **POOL), _IMAGE),
]


@pytest.mark.parametrize(("name", "fn", "x"), GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
@pytest.mark.parametrize("mode", ["eager", "tf.function"])
def test_compute_gradient_v2(
    name: str, fn: Callable[[Any], Any], x: np.ndarray[Any, Any], mode: str
) -> None:
    """``tf.test.compute_gradient`` (gradient_checker_v2): the Jacobian the registered
    gradient gives equals the one finite differences give, eagerly and with the op in a
    ``tf.function`` (the checker calls the function as its tests do: ``f`` then
    ``tf.function(f)``)."""
    f = fn if mode == "eager" else tf.function(fn)
    theoretical, numerical = tf.test.compute_gradient(f, [tf.constant(x)])
    assert theoretical[0].shape == (np.size(fn(x)), x.size)
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)
    assert np.abs(theoretical[0]).sum() > 0  # not two zero Jacobians


def test_compute_gradient_v2_of_two_inputs() -> None:
    """``tf.test.compute_gradient`` of DoCustomCall (the XLA custom-call seed), one Jacobian
    per input."""
    b, c = RNG.standard_normal(4), RNG.standard_normal(7)
    f = tf.function(otf.ops.do_custom_call)
    b32, c32 = b.astype(np.float32), c.astype(np.float32)
    theoretical, numerical = tf.test.compute_gradient(f, [tf.constant(b32), tf.constant(c32)])
    for t, n in zip(theoretical, numerical, strict=True):
        np.testing.assert_allclose(t, n, atol=1e-2)  # float32 finite differences


@pytest.mark.parametrize(("name", "fn", "x"), GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
def test_compute_gradient_error_v1_graph(
    name: str, fn: Callable[[Any], Any], x: np.ndarray[Any, Any]
) -> None:
    """``tf.compat.v1.test.compute_gradient_error`` (gradient_checker): the op built into
    a v1 graph, its gradient through ``tf.gradients``, evaluated in a session. The checker
    draws a random input unless given one: MedianPool's must have no two values closer than
    the checker's delta (as TensorFlow's MaxPool gradient tests give theirs)."""
    with tf.Graph().as_default(), tf.compat.v1.Session():
        t = tf.constant(x)
        y = fn(t)
        err = tf.compat.v1.test.compute_gradient_error(
            t, x.shape, y, y.shape.as_list(), x_init_value=x
        )
    assert err < 1e-6


def test_a_zero_out_gradient_is_the_op_in_the_graph_not_a_py_func() -> None:
    """What zero_out_grad_2.py registers is a graph of TensorFlow ops; opmarket's gradient
    is a TensorFlow op of its own, so a graph with it can be saved and run elsewhere."""
    with tf.Graph().as_default() as g:
        x = tf.constant([1.0, 2.0, 3.0])
        (dx,) = tf.gradients(otf.ops.zero_out(x, preserve_index=1), [x])
        ops = {o.type for o in g.get_operations()}
        with tf.compat.v1.Session() as sess:
            got = sess.run(dx)
    assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    np.testing.assert_array_equal(got, [0.0, 1.0, 0.0])
