"""TensorFlow's rows: ``opmarket.tensorflow.ops.<op>`` against the same op written as a
TensorFlow C++ custom op (``tf_ops.cc``, built against tf.sysconfig's flags and loaded with
``tf.load_op_library``), eagerly and in a ``tf.function``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from own_ops._common import Case, Row, Timing, build_library, measure, reported_path


def rows(timing: Timing) -> Iterator[str]:
    """The TensorFlow eager and tf.function lines."""
    import tensorflow as tf

    import opmarket.tensorflow as otf

    flags = [*tf.sysconfig.get_compile_flags(), *tf.sysconfig.get_link_flags()]
    own = tf.load_op_library(str(build_library("tf_ops", "tf_ops.cc", flags, tf.__version__)))

    def calls(case: Case) -> tuple[Any, Any]:
        label = {"label": case.label} if case.label else {}
        op = getattr(otf.ops, case.op)
        theirs = getattr(own, f"bench_{case.op}")
        return (
            lambda v: op(v, **case.attrs, **label),
            lambda v: theirs(v, **case.attrs),
        )

    def make(mode: str, case: Case) -> Row:
        x = tf.constant(case.x)
        ours, theirs = calls(case)
        if mode == "tf.function":
            ours, theirs = tf.function(ours), tf.function(theirs)
        return Row(
            lambda: ours(x),
            lambda: theirs(x),
            reported_path(otf, case, lambda: _native_in_plan(case)),
            result=lambda t: t.numpy(),
        )

    yield from measure("TensorFlow", ["eager", "tf.function"], make, timing)


def _native_in_plan(case: Case) -> bool:
    """Whether the kernel TensorFlow picks for this call (the label's, highest priority, for
    the input's type) is one the bridge registered natively."""
    from opmarket.sdk import as_dtype
    from opmarket.tensorflow import _native

    dtype = as_dtype(case.x.dtype)
    plans = [
        p
        for p in _native.plans(case.name)
        if p.label == case.label and dtype in (p.spec.constraint("T") or (dtype,))
    ]
    return bool(plans) and max(plans, key=lambda p: p.priority).native
