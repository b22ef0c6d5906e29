"""Kernel labels in TensorFlow's own form: a graph's ``_kernel_label_map`` picks a labelled
kernel of an opmarket op, as it picks one of TensorFlow's.

Origin: tensorflow/tensorflow ``tensorflow/python/framework/ops_test.py``,
``KernelLabelTest.testNoLabel`` and ``testLabelMap`` (TensorFlow's ``KernelLabel`` test op
has a default kernel and two labelled ones, ``overload_1`` and ``overload_2``, each saying
which it is). Here the op is an opmarket op with three Python kernels, registered with
TensorFlow through the bridge, and ZeroOut's C-ABI kernel (label ``c_abi``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")

import opmarket  # noqa: E402 (after the skip)
import opmarket.tensorflow as otf  # noqa: E402
from opmarket.registry import isolated_registry  # noqa: E402
from opmarket.sdk import kernel, op, shape_fn, unchanged  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

from .conftest import Case, expected  # noqa: E402

LABELLED = op("LabelTest>KernelLabel").input("x: int32").output("y: int32").build()
# Which kernel ran, as a number added to the input: TensorFlow's test op says it in words.
DEFAULT, OVERLOAD_1, OVERLOAD_2 = 0, 100, 200


@kernel("LabelTest>KernelLabel")
def _default(x: Any) -> Any:
    return x + DEFAULT


@kernel("LabelTest>KernelLabel", label="overload_1")
def _overload_1(x: Any) -> Any:
    return x + OVERLOAD_1


@kernel("LabelTest>KernelLabel", label="overload_2")
def _overload_2(x: Any) -> Any:
    return x + OVERLOAD_2


@pytest.fixture
def labelled() -> Iterator[Any]:
    with isolated_registry():
        opmarket.register(LABELLED, shape_fn("LabelTest>KernelLabel", unchanged))
        opmarket.register(_default, _overload_1, _overload_2)
        otf.register()
        yield otf.ops["LabelTest>KernelLabel"]


def test_no_label(labelled: Any) -> None:
    """ops_test.KernelLabelTest.testNoLabel, in a v1 graph and eagerly."""
    with tf.Graph().as_default(), tf.compat.v1.Session() as sess:
        assert sess.run(labelled([1])).tolist() == [1 + DEFAULT]
    assert labelled([1]).numpy().tolist() == [1 + DEFAULT]


def test_label_map(labelled: Any) -> None:
    """ops_test.KernelLabelTest.testLabelMap: nested label maps, an empty label meaning the
    default kernel, and the outer map back in force after the inner one."""
    with tf.Graph().as_default() as g, tf.compat.v1.Session() as sess:
        op_type = "LabelTest>KernelLabel"
        default_1 = labelled([1])
        with g._kernel_label_map({op_type: "overload_1"}):
            overload_1_1 = labelled([1])
            with g._kernel_label_map({op_type: "overload_2"}):
                overload_2 = labelled([1])
                with g._kernel_label_map({op_type: ""}):
                    default_2 = labelled([1])
            overload_1_2 = labelled([1])
        default_3 = labelled([1])
        got = sess.run([default_1, default_2, default_3, overload_1_1, overload_1_2, overload_2])
    assert [int(v[0]) - 1 for v in got] == [DEFAULT] * 3 + [OVERLOAD_1] * 2 + [OVERLOAD_2]


def test_label_map_in_a_tf_function_and_the_label_keyword(labelled: Any) -> None:
    """The same choice inside a ``tf.function`` (its graph's label map) and through the
    bridge's ``label=`` keyword, eagerly and traced."""

    @tf.function
    def mapped(x: Any) -> Any:
        g = tf.compat.v1.get_default_graph()
        with g._kernel_label_map({"LabelTest>KernelLabel": "overload_2"}):
            return labelled(x)

    x = tf.constant([1, 2])
    np.testing.assert_array_equal(mapped(x), [1 + OVERLOAD_2, 2 + OVERLOAD_2])
    np.testing.assert_array_equal(labelled(x, label="overload_1"), [101, 102])
    traced = tf.function(lambda v: labelled(v, label="overload_1"))
    np.testing.assert_array_equal(traced(x), [101, 102])


def test_a_label_no_kernel_has_is_an_error_naming_it(labelled: Any) -> None:
    """TensorFlow's own answer for a label no kernel is registered under: no kernel found,
    the requested ``_kernel`` attr quoted and the registered labels listed."""
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"(?s)_kernel=.overload_3.*overload_2"
    ):
        labelled([1], label="overload_3")
    with tf.Graph().as_default() as g, tf.compat.v1.Session() as sess:
        with g._kernel_label_map({"LabelTest>KernelLabel": "overload_3"}):
            y = labelled([1])
        with pytest.raises(tf.errors.InvalidArgumentError, match="overload_3"):
            sess.run(y)


@needs_first_party
def test_zero_out_c_abi_kernel_by_label_map() -> None:
    """The first-party C-ABI kernel (plugins/zero_out_c, label ``c_abi``) chosen by a label
    map in a v1 graph: the node carries the label and the result is opmarket's."""
    x = np.array([7, 8, 9, 10], np.int32)
    with tf.Graph().as_default() as g, tf.compat.v1.Session() as sess:
        with g._kernel_label_map({"Opm>ZeroOut": "c_abi"}):
            y = otf.ops.zero_out(x, preserve_index=2)
        assert y.op.get_attr("_kernel") == b"c_abi"
        got = sess.run(y)
    want = expected(Case("", "Opm>ZeroOut", lambda: [x], {"preserve_index": 2}, label="c_abi"))
    np.testing.assert_array_equal(got, want)
