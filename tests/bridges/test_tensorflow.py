"""opmarket.tensorflow with the real TensorFlow and the first-party plugins: every op eagerly
and in tf.function with opmarket's results and static shapes, errors, kernel choice (native
C-ABI kernels over Python ones, labels), gradients, built-ins and clashes, SavedModels."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")

import opmarket  # noqa: E402 (after the skip)
import opmarket.tensorflow as otf  # noqa: E402
from opmarket.tensorflow import _register  # noqa: E402 (its kernel instances are observable)
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party

RNG = np.random.default_rng(0)
POOL = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 2, 1], "padding": "SAME"}

# (wrapper name, inputs, attrs): every first-party op with a kernel a TensorFlow CPU can run.
CASES: list[tuple[str, list[Any], dict[str, Any]]] = [
    ("zero_out", [np.array([5, 4, 3], np.int32)], {"preserve_index": 1}),
    ("zero_out", [np.array([5.5, 4.5], np.float64)], {}),
    ("time_two", [RNG.standard_normal((2, 3)).astype(np.float32)], {}),
    ("time_two", [np.array([1, -2, 2**30], np.int64)], {}),
    ("atan", [RNG.standard_normal(7).astype(np.float64)], {}),
    ("atan", [RNG.standard_normal((2, 2)).astype(np.float16)], {}),
    ("median_pool", [RNG.random((1, 6, 5, 2), dtype=np.float32)], POOL),
    ("bitcast", [np.array([1.0, -2.5], np.float32)], {"type": np.int32}),
    ("bitcast", [RNG.standard_normal(3)], {"type": np.uint8}),
]


def _ids(case: tuple[str, list[Any], dict[str, Any]]) -> str:
    return f"{case[0]}-{case[1][0].dtype}"


@pytest.mark.parametrize("case", CASES, ids=[_ids(c) for c in CASES])
def test_every_op_eagerly_and_in_tf_function_as_opmarket_ops(
    case: tuple[str, list[Any], dict[str, Any]],
) -> None:
    name, inputs, attrs = case
    want = getattr(opmarket.ops, name)(*inputs, **attrs)
    eager = getattr(otf.ops, name)(*inputs, **attrs)
    assert isinstance(eager, tf.Tensor)
    np.testing.assert_array_equal(eager.numpy(), want)

    fn = tf.function(lambda *xs: getattr(otf.ops, name)(*xs, **attrs))
    traced = fn(*[tf.constant(x) for x in inputs])
    np.testing.assert_array_equal(traced.numpy(), want)


def test_zero_out_c_abi_kernel_by_label_eagerly_and_in_tf_function() -> None:
    x = np.array([7, 8, 9, 10], np.int32)
    want = opmarket.ops.zero_out(x, preserve_index=2)
    np.testing.assert_array_equal(otf.ops.zero_out(x, preserve_index=2, label="c_abi"), want)
    fn = tf.function(lambda v: otf.ops.zero_out(v, preserve_index=2, label="c_abi"))
    np.testing.assert_array_equal(fn(tf.constant(x)), want)
    graph = fn.get_concrete_function(tf.TensorSpec([None], tf.int32)).graph.as_graph_def()
    (node,) = [n for n in graph.node if n.op == "Opm>ZeroOut"]
    assert node.attr["_kernel"].s == b"c_abi"


@pytest.mark.parametrize(
    ("name", "spec", "attrs"),
    [
        ("zero_out", [None], {}),
        ("zero_out", [4], {}),
        ("time_two", [None, 3, None], {}),
        ("atan", None, {}),
        ("median_pool", [None, 9, None, 2], POOL),
        ("median_pool", [2, 9, 7, 3], {**POOL, "padding": "VALID"}),
        ("bitcast", [None, 3], {"type": tf.uint8}),
        ("bitcast", [5, 2], {"type": tf.float64}),
    ],
)
def test_static_shapes_are_opmarket_shape_inference(
    name: str, spec: list[int | None] | None, attrs: dict[str, Any]
) -> None:
    from opmarket._bridge import normalize_attr, output_shapes
    from opmarket.registry import get_registry

    dtype = tf.int32 if name == "zero_out" else tf.float32
    if name == "bitcast" and attrs["type"] == tf.float64:
        dtype = tf.int32
    fn = tf.function(lambda v: getattr(otf.ops, name)(v, **attrs))
    out = fn.get_concrete_function(tf.TensorSpec(spec, dtype)).structured_outputs
    op_def = get_registry().op_def("Opm>" + "".join(p.title() for p in name.split("_")))
    assert op_def is not None
    full = {a.name: a.default for a in op_def.attrs if a.default is not None}
    full.update({k: normalize_attr(op_def, k, v) for k, v in attrs.items()})
    full["T"] = normalize_attr(op_def, "T", dtype)
    (want,) = output_shapes(op_def, [None if spec is None else tuple(spec)], full) or [None]
    got = out.shape.as_list() if out.shape.rank is not None else None
    assert got == (list(want) if want is not None else None)
    if spec is not None and None in spec:
        assert None in (got or [None])  # unknown dims stay unknown


def test_errors_eagerly_are_invalid_argument_with_opmarket_message() -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"attr 'T' may not be int64"):
        otf.ops.zero_out(np.array([1, 2], np.int64))
    with pytest.raises(tf.errors.InvalidArgumentError, match="preserve_index out of range"):
        otf.ops.zero_out(np.array([1, 2], np.int32), preserve_index=5)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"'padding'.*VALIDISH"):
        otf.ops.median_pool(
            np.zeros((1, 3, 3, 1), np.float32),
            ksize=[1, 2, 2, 1],
            strides=[1, 1, 1, 1],
            padding="VALIDISH",
        )


def test_errors_while_tracing_are_value_errors() -> None:
    bad_rank = tf.function(otf.ops.zero_out)
    with pytest.raises(ValueError, match="rank 1"):
        bad_rank.get_concrete_function(tf.TensorSpec([2, 2], tf.int32))
    bad_attr = tf.function(lambda v: otf.ops.zero_out(v, preserve_index=-1))
    with pytest.raises(ValueError, match="preserve_index"):
        bad_attr.get_concrete_function(tf.TensorSpec([2], tf.int32))


@pytest.mark.parametrize("type_", [tf.int32, np.int32, np.dtype("int32"), "int32", "DT_INT32"])
def test_type_attrs_take_tf_numpy_and_names(type_: Any) -> None:
    out = otf.ops.bitcast(np.array([1.0], np.float32), type=type_)
    assert out.dtype == tf.int32
    assert out.numpy()[0] == np.array([1.0], np.float32).view(np.int32)[0]


def _python_kernels_created() -> int:
    return len(_register._instances)


def test_native_kernels_win_and_run_without_python() -> None:
    # ZeroOut's C++ kernels have C-ABI entries (opmarket/kernel.h), and the C plugin's are
    # labelled c_abi: by default TensorFlow runs a C entry, which creates no Python instance.
    x = np.arange(6, dtype=np.int32)
    before = _python_kernels_created()
    np.testing.assert_array_equal(
        otf.ops.zero_out(x, preserve_index=4), opmarket.ops.zero_out(x, preserve_index=4)
    )
    assert _python_kernels_created() == before
    # median_pool's C entry reads list attrs, which this bridge serves (bridge interface
    # version 2): a new attr set makes TensorFlow create a kernel, a native one.
    otf.ops.median_pool(
        np.ones((1, 2, 2, 1), np.float32), ksize=[1, 1, 2, 1], strides=[1, 1, 1, 1], padding="VALID"
    )
    assert _python_kernels_created() == before
    # atan's kernel is Python: a new function's node creates an instance of it (alive as
    # long as the function).
    fn = tf.function(otf.ops.atan)
    fn(np.ones(3, np.float32))
    assert _python_kernels_created() == before + 1


def test_an_op_of_two_plugins_is_one_op_with_both_kernels() -> None:
    from tensorflow.python.framework import kernels

    found = kernels.get_registered_kernels_for_op("Opm>ZeroOut").kernel
    labels = {k.label for k in found}
    assert labels == {"", "c_abi"}
    assert {k.priority for k in found if k.label == "c_abi"} == {1000}
    # The C++ kernels' C-ABI entries by default, the C plugin's by label; 3 dtypes each.
    assert len(found) == 3 + 3
    assert {k.priority for k in found if k.label == ""} == {1000}
    assert otf.register() is None  # registering again changes nothing


def test_gradient_of_atan_matches_its_formula_and_numeric_gradients() -> None:
    x = tf.constant(RNG.standard_normal(6))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = otf.ops.atan(x)
    np.testing.assert_allclose(tape.gradient(y, x).numpy(), 1 / (1 + x.numpy() ** 2), rtol=1e-12)
    theoretical, numerical = tf.test.compute_gradient(otf.ops.atan, [x])
    np.testing.assert_allclose(theoretical[0], numerical[0], atol=1e-6)

    @tf.function
    def graph_grad(v: Any) -> Any:
        with tf.GradientTape() as t:
            t.watch(v)
            w = otf.ops.zero_out(otf.ops.atan(v), preserve_index=1)
        return t.gradient(w, v)

    want = np.zeros(6)
    want[1] = 1 / (1 + x.numpy()[1] ** 2)
    np.testing.assert_allclose(graph_grad(x).numpy(), want, rtol=1e-12)


def test_builtins_map_to_tensorflows_own_ops() -> None:
    record = _register.registered()
    assert not record["Identity"].own and not record["AddN"].own
    out = otf.ops.add_n([np.array([1, 2], np.int32), np.array([3, 4], np.int32)])
    np.testing.assert_array_equal(out, [4, 6])
    fn = tf.function(otf.ops.identity)
    graph = fn.get_concrete_function(tf.TensorSpec([2], tf.float32)).graph.as_graph_def()
    assert "Identity" in {n.op for n in graph.node}


def _run(code: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, **env},
        check=False,
        timeout=300,
    )


@pytest.mark.slow
def test_a_clash_with_a_tensorflow_op_is_an_error_not_a_crash(tmp_path: Path) -> None:
    done = _run(
        """
        import opmarket, opmarket.tensorflow as otf
        from opmarket.sdk import op
        opmarket.register(op("Relu").input("x: float").output("y: int32").build())
        try:
            otf.register()
        except otf.BridgeError as exc:
            print("refused:", exc)
        print(otf.ops.zero_out([1, 2]).numpy())
    """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "op Relu clashes with TensorFlow's own Relu" in done.stdout
    assert "[1 0]" in done.stdout


@pytest.mark.slow
def test_the_shim_is_built_only_where_none_is_shipped_and_says_why_once(tmp_path: Path) -> None:
    """The install's shim serves at once, with nothing compiled; without it
    (OPMARKET_SHIPPED_SHIMS=0 here) the first import builds one and says what and why, on
    stderr, in one line; a later one, with the shim in the cache, says nothing."""
    code = "import opmarket.tensorflow as otf; print(otf.ops.zero_out([1, 2]).numpy())"
    cache = tmp_path / "cache"
    shipped = _run(code, tmp_path, OPMARKET_CACHE_DIR=str(cache))
    assert shipped.returncode == 0, shipped.stderr
    assert "opmarket:" not in shipped.stderr and not (cache / "bridges").exists()
    first = _run(code, tmp_path, OPMARKET_CACHE_DIR=str(cache), OPMARKET_SHIPPED_SHIMS="0")
    assert first.returncode == 0, first.stderr
    said = [line for line in first.stderr.splitlines() if line.startswith("opmarket:")]
    assert said == [
        "opmarket: building the TensorFlow bridge's shim (OPMARKET_SHIPPED_SHIMS=0; once, ~10 s)..."
    ]
    again = _run(code, tmp_path, OPMARKET_CACHE_DIR=str(cache), OPMARKET_SHIPPED_SHIMS="0")
    assert again.returncode == 0, again.stderr
    assert "opmarket:" not in again.stderr


@pytest.mark.slow
def test_import_without_tensorflow_names_the_extra(tmp_path: Path) -> None:
    done = _run(
        """
        import sys
        import opmarket
        assert "tensorflow" not in sys.modules
        sys.modules["tensorflow"] = None  # as if it were not installed
        import opmarket.tensorflow
    """,
        tmp_path,
    )
    assert done.returncode == 1
    assert "pip install 'opmarket[tensorflow]'" in done.stderr


@pytest.mark.slow
def test_saved_model_with_bitcast_loads_and_runs_in_a_fresh_process(tmp_path: Path) -> None:
    x = np.array([1.0, -2.0, 0.5], np.float32)

    class Module(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
        def __call__(self, v: Any) -> Any:
            return otf.ops.bitcast(v, type=tf.int32)

    tf.saved_model.save(Module(), str(tmp_path / "model"))
    done = _run(
        """
        import numpy as np
        import tensorflow as tf
        import opmarket.tensorflow
        loaded = tf.saved_model.load("model")
        fn = loaded.signatures["serving_default"]
        ops = {n.op for f in fn.graph.as_graph_def().library.function for n in f.node_def}
        print("ops", sorted(ops))
        print("out", loaded(tf.constant([1.0, -2.0, 0.5])).numpy().tolist())
    """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    assert "Opm>Bitcast" in done.stdout
    assert f"out {x.view(np.int32).tolist()}" in done.stdout


@pytest.mark.parametrize("name", ["atan", "time_two"])  # a numpy kernel and a pybind11 one
def test_0d_outputs_stay_0d_eagerly_in_tf_function_and_in_gradients(name: str) -> None:
    op = getattr(otf.ops, name)
    x = tf.constant(0.5, tf.float32)
    want = getattr(opmarket.ops, name)(np.float32(0.5))
    eager = op(x)
    assert eager.shape == () and eager.numpy() == want
    traced = tf.function(op)(x)
    assert traced.shape == () and traced.numpy() == want
    np.testing.assert_array_equal(tf.stack([op(x), op(x)]).numpy(), [want, want])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = op(x)
    grad = tape.gradient(y, x)
    assert grad is not None and grad.shape == ()


def test_eager_ops_take_variables_python_scalars_numpy_arrays_and_lists() -> None:
    v = tf.Variable([0.5, 2.0])
    np.testing.assert_allclose(otf.ops.atan(v).numpy(), np.arctan([0.5, 2.0]), rtol=1e-6)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(otf.ops.atan(v))
    np.testing.assert_allclose(tape.gradient(y, v).numpy(), 1 / (1 + np.array([0.25, 4.0])))
    assert otf.ops.time_two(3.0).numpy() == 6.0
    np.testing.assert_array_equal(otf.ops.zero_out([5, 4, 3], preserve_index=1).numpy(), [0, 4, 0])
    np.testing.assert_array_equal(otf.ops.time_two(np.arange(3)).numpy(), [0, 2, 4])


def test_a_keras_layer_applying_an_op_to_its_own_weight() -> None:
    keras = pytest.importorskip("keras")

    class Scaled(keras.layers.Layer):  # type: ignore[misc]  # keras is untyped
        def build(self, input_shape: Any) -> None:
            self.w = self.add_weight(shape=(3,), initializer="ones")

        def call(self, x: Any) -> Any:
            return x * otf.ops.time_two(self.w)

    layer = Scaled()
    x = tf.constant([[1.0, 2.0, 3.0]])
    np.testing.assert_allclose(layer(x).numpy(), [[2.0, 4.0, 6.0]])
    model = keras.Sequential([keras.Input((3,)), layer])
    model.compile(loss="mse", run_eagerly=True)
    model.fit(x, tf.zeros((1, 3)), epochs=1, verbose=0)
    assert not np.allclose(layer.w.numpy(), 1.0)  # the gradient reached the weight


@pytest.mark.slow
def test_saved_train_step_with_opmarket_gradients_runs_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    # The gradient is a TensorFlow op of its own, not a tf.numpy_function whose Python
    # callback ("pyfunc_N") exists only in the process that saved it.
    class Step(tf.Module):
        def __init__(self) -> None:
            self.w = tf.Variable([0.5, -1.0, 2.0])

        @tf.function(input_signature=[])
        def train(self) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(otf.ops.atan(self.w) + otf.ops.time_two(self.w))
            (g,) = tape.gradient(loss, [self.w])
            self.w.assign_sub(0.1 * g)
            return g

    step = Step()
    want = step.train().numpy()
    step.w.assign([0.5, -1.0, 2.0])
    tf.saved_model.save(step, str(tmp_path / "model"))
    done = _run(
        """
        import tensorflow as tf
        import opmarket.tensorflow
        loaded = tf.saved_model.load("model")
        print("grad", loaded.train().numpy().tolist())
        print("w", loaded.w.numpy().tolist())
    """,
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    got = [float(v) for v in done.stdout.split("grad [")[1].split("]")[0].split(",")]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(want, 1 / (1 + np.array([0.25, 1.0, 4.0])) + 2, rtol=1e-6)


def test_what_docs_frameworks_md_says_is_not_supported_fails_as_it_says() -> None:
    @tf.function(jit_compile=True)
    def xla(x: Any) -> Any:
        return otf.ops.atan(x)

    with pytest.raises(tf.errors.InvalidArgumentError, match=r"Opm>Atan.*XLA_CPU_JIT"):
        xla(tf.constant([1.0]))
    v = tf.Variable([0.5, 1.0])
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            y = otf.ops.atan(v)
        g = inner.gradient(y, v)
    assert g is not None and outer.gradient(g, v) is None  # first order only


def test_a_python_kernel_reads_tensorflows_input_memory_without_a_copy() -> None:
    """Issue 22: a Python-path kernel gets TensorFlow's input buffer as a read-only numpy view
    (no ``string_at`` then ``frombuffer().copy()``); its output is copied out once."""
    from opmarket.registry import isolated_registry
    from opmarket.sdk import kernel, op, shape_fn, unchanged

    seen: list[bool] = []
    probe_op = op("BridgeTest>TfProbe").input("x: float").output("y: float").build()

    @kernel("BridgeTest>TfProbe")
    def probe(x: Any) -> Any:
        seen.append(x.flags.writeable)
        return x * 2

    with isolated_registry():
        opmarket.register(probe_op, probe, shape_fn("BridgeTest>TfProbe", unchanged))
        x = tf.range(64, dtype=tf.float32)
        np.testing.assert_array_equal(otf.ops.tf_probe(x).numpy(), np.arange(64) * 2)
        traced = tf.function(lambda v: otf.ops.tf_probe(v) + 1.0)
        np.testing.assert_array_equal(traced(x).numpy(), np.arange(64) * 2 + 1)
    assert seen == [False, False]


@pytest.mark.parametrize(
    "value", [[5, 4, 3], [5.0, 4.0, 3.0], np.array([1.5, 2.5], np.float32)], ids=repr
)
def test_python_values_bind_as_opmarket_ops_binds_them(value: Any) -> None:
    """One binding (issue 22): a Python value takes the type ``opmarket.ops`` gives it (for
    ``[5.0, 4.0, 3.0]`` float64, where TensorFlow's own binding made float32)."""
    want = opmarket.ops.zero_out(value)
    got = otf.ops.zero_out(value).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("value", [[2**40, 1], ["a", "b"]], ids=repr)
def test_a_value_opmarket_refuses_is_refused_with_its_message(value: Any) -> None:
    """``[2**40, 1]`` for an input of int32 by default: TensorFlow's own binding cast it to
    int32 and silently wrapped it; opmarket's refuses, and so does the bridge now."""
    from opmarket.sdk import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as theirs:
        opmarket.ops.zero_out(value)
    with pytest.raises(tf.errors.InvalidArgumentError) as ours:
        otf.ops.zero_out(value)
    assert str(theirs.value) in ours.value.message
