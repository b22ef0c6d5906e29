"""opmarket.litert with the real ai-edge-litert and TensorFlow's converter: a tf.function using
opmarket ops, converted with allow_custom_ops, runs in LiteRT with TensorFlow's result; custom
ops nobody provides fail at creation; kernel errors come back from invoke."""

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
pytest.importorskip("ai_edge_litert", reason="needs the litert extra")

import opmarket.litert as olr  # noqa: E402 (after the skips)
import opmarket.tensorflow as otf  # noqa: E402
from opmarket.sdk import InvalidArgumentError, NotFoundError  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party


def _convert(fn: Any) -> bytes:
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.allow_custom_ops = True
    model: bytes = converter.convert()
    return model


@pytest.fixture(scope="module")
def atan_zero_out() -> tuple[Any, bytes]:
    @tf.function(input_signature=[tf.TensorSpec([5], tf.float32)])
    def model(x: Any) -> Any:
        return otf.ops.zero_out(otf.ops.atan(x) * 2.0, preserve_index=3)

    return model, _convert(model)


def _run(content: bytes, *inputs: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    it = olr.interpreter(model_content=content)
    it.allocate_tensors()
    for detail, value in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(detail["index"], value)
    it.invoke()
    return it.get_tensor(it.get_output_details()[0]["index"])


def test_a_converted_tf_function_runs_in_litert_as_in_tensorflow(
    atan_zero_out: tuple[Any, bytes],
) -> None:
    model, content = atan_zero_out
    assert olr.custom_ops_of(content) == [("Opm>Atan", 1), ("Opm>ZeroOut", 1)]
    x = np.array([0.5, -1.0, 2.0, 3.0, -4.0], np.float32)
    got = _run(content, x)
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-6)
    assert got[3] != 0 and not got[[0, 1, 2, 4]].any()


def test_interpreter_methods_and_model_path(
    atan_zero_out: tuple[Any, bytes], tmp_path: Path
) -> None:
    _, content = atan_zero_out
    path = tmp_path / "m.tflite"
    path.write_bytes(content)
    it = olr.interpreter(model_path=path)
    (inp,) = it.get_input_details()
    (out,) = it.get_output_details()
    assert inp["dtype"] is np.float32 and inp["shape"].tolist() == [5]
    assert out["shape"].tolist() == [5]
    it.allocate_tensors()
    with pytest.raises(InvalidArgumentError, match="expected float32"):
        it.set_tensor(inp["index"], np.zeros(5, np.float64))
    with pytest.raises(InvalidArgumentError, match="exactly one"):
        olr.interpreter()


def test_bitcast_c_abi_kernel_in_litert() -> None:
    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def model(x: Any) -> Any:
        return otf.ops.bitcast(x + 1.0, type=tf.int32)

    x = np.array([0.0, 1.5, -3.0], np.float32)
    np.testing.assert_array_equal(_run(_convert(model), x), model(x).numpy())


def test_one_op_twice_with_different_attrs_runs_each_node_with_its_own() -> None:
    # LiteRT's callbacks do not say which node runs: each attr set gets its own registration.
    @tf.function(input_signature=[tf.TensorSpec([5], tf.int32)])
    def model(x: Any) -> Any:
        return otf.ops.zero_out(x, preserve_index=1) + otf.ops.zero_out(x, preserve_index=3)

    x = np.array([-2, -1, 0, 1, 2], np.int32)
    content = _convert(model)
    assert olr.custom_ops_of(content) == [("Opm>ZeroOut", 1)]
    got = _run(content, x)
    np.testing.assert_array_equal(got, model(x).numpy())
    np.testing.assert_array_equal(got, [0, -1, 0, 1, 0])


def test_two_bitcasts_to_different_types_in_one_model() -> None:
    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def model(x: Any) -> Any:
        as_int = otf.ops.bitcast(x, type=tf.int32)
        as_bytes = otf.ops.bitcast(x, type=tf.uint8)
        return as_int, tf.reduce_sum(tf.cast(as_bytes, tf.int32), axis=-1)

    x = np.array([0.0, 1.5, -3.0], np.float32)
    it = olr.interpreter(model_content=_convert(model))
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    got = sorted(
        (it.get_tensor(d["index"]) for d in it.get_output_details()), key=lambda a: a.shape
    )
    want = sorted((t.numpy() for t in model(x)), key=lambda a: a.shape)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(
    ("dtype", "name"), [(np.float32, "atan"), (np.int64, "time_two"), (np.float64, "time_two")]
)
def test_empty_tensors_of_wide_types(dtype: Any, name: str) -> None:
    @tf.function(input_signature=[tf.TensorSpec([0, 3], tf.as_dtype(dtype))])
    def model(x: Any) -> Any:
        return getattr(otf.ops, name)(x)

    got = _run(_convert(model), np.zeros((0, 3), dtype))
    assert got.shape == (0, 3) and got.dtype == dtype


def test_an_empty_input_with_a_non_empty_output_is_a_clear_error() -> None:
    # LiteRT 2.3 makes no tensor buffer of zero elements (LiteRtCreateTensorBuffer* refuse it)
    @tf.function(input_signature=[tf.TensorSpec([0, 3], tf.float32)])
    def model(x: Any) -> Any:
        return tf.reduce_sum(otf.ops.atan(x), axis=0)

    with pytest.raises(InvalidArgumentError, match=r"tensor 'x' \[0, 3\] has no elements"):
        _run(_convert(model), np.zeros((0, 3), np.float32))


def test_median_pool_gets_its_output_shape_from_its_own_attrs() -> None:
    # The converter cannot tell MedianPool's output shape (it needs ksize, strides, padding):
    # the bridge sizes the outputs in the kernel's prepare step from the node's attrs.
    @tf.function(input_signature=[tf.TensorSpec([1, 6, 5, 2], tf.float32)])
    def model(x: Any) -> Any:
        same = otf.ops.median_pool(x, ksize=[1, 3, 3, 1], strides=[1, 2, 2, 1], padding="SAME")
        valid = otf.ops.median_pool(x, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1], padding="VALID")
        return same * 2.0, tf.reduce_sum(valid)

    x = np.random.default_rng(0).random((1, 6, 5, 2), dtype=np.float32)
    it = olr.interpreter(model_content=_convert(model))
    shapes = sorted(tuple(d["shape"].tolist()) for d in it.get_output_details())
    assert shapes == [(), (1, 3, 3, 2)]
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    got = sorted((it.get_tensor(d["index"]) for d in it.get_output_details()), key=np.ndim)
    want = sorted((t.numpy() for t in model(x)), key=np.ndim)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5)


@pytest.mark.parametrize("name", ["atan", "time_two"])  # a numpy kernel and a pybind11 one
def test_0d_tensors(name: str) -> None:
    @tf.function(input_signature=[tf.TensorSpec([], tf.float32)])
    def model(x: Any) -> Any:
        return getattr(otf.ops, name)(x) * 2.0

    x = np.array(0.5, np.float32)
    got = _run(_convert(model), x)
    assert got.shape == ()
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-6)


# TensorFlow's converter warns that the inputs' statistics are missing before it fails.
@pytest.mark.filterwarnings("ignore:Statistics for quantized inputs:UserWarning")
def test_quantization_with_a_representative_dataset_fails_as_the_docs_say() -> None:
    # The converter's calibrator runs the model in an interpreter of its own, which has no
    # opmarket ops (docs/frameworks.md, Not supported).
    @tf.function(input_signature=[tf.TensorSpec([1, 4], tf.float32)])
    def model(x: Any) -> Any:
        return otf.ops.atan(x) * 2.0

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [model.get_concrete_function()], model
    )
    converter.allow_custom_ops = True
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([np.ones((1, 4), np.float32)] for _ in range(2))
    with pytest.raises(RuntimeError, match="op resolver for calibration"):
        converter.convert()


def test_an_op_nobody_provides_fails_at_creation_naming_it(
    atan_zero_out: tuple[Any, bytes],
) -> None:
    _, content = atan_zero_out
    renamed = content.replace(b"Opm>ZeroOut", b"Opm>ZeroOff")
    assert renamed != content
    with pytest.raises(NotFoundError, match=r"Opm>ZeroOff \(version 1\)"):
        olr.interpreter(model_content=renamed)


def test_a_version_the_resolver_lacks_fails_at_creation(atan_zero_out: tuple[Any, bytes]) -> None:
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    _, content = atan_zero_out
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(content, 0))
    for code in model.operatorCodes:
        if code.customCode == b"Opm>Atan":
            code.version = 2
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    with pytest.raises(NotFoundError, match=r"Opm>Atan \(version 2\)"):
        olr.interpreter(model_content=bytes(builder.Output()))


def test_a_kernel_error_is_raised_by_invoke() -> None:
    @tf.function(input_signature=[tf.TensorSpec([2], tf.int32)])
    def model(x: Any) -> Any:
        return otf.ops.zero_out(x * 2, preserve_index=3)  # past the end: the kernel says so

    with pytest.raises(InvalidArgumentError, match="preserve_index out of range"):
        _run(_convert(model), np.array([1, 2], np.int32))


@pytest.mark.slow
def test_import_without_litert_names_the_extra(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys
        sys.modules["ai_edge_litert"] = None  # as if it were not installed
        import opmarket.litert
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(os.environ),
        check=False,
        timeout=120,
    )
    assert done.returncode == 1
    assert "pip install 'opmarket[litert]'" in done.stderr


def test_a_kernel_reads_litert_input_buffers_without_a_copy() -> None:
    """Issue 22: a custom op's kernel gets LiteRT's locked input buffer as a read-only numpy
    view (no ``string_at`` then ``frombuffer().copy()``); its output is copied out once."""
    import opmarket
    from opmarket.registry import isolated_registry
    from opmarket.sdk import kernel, op, shape_fn, unchanged

    seen: list[bool] = []
    probe_op = op("BridgeTest>LiteProbe").input("x: float").output("y: float").build()

    @kernel("BridgeTest>LiteProbe")
    def probe(x: Any) -> Any:
        seen.append(x.flags.writeable)
        return x * 2

    with isolated_registry():
        opmarket.register(probe_op, probe, shape_fn("BridgeTest>LiteProbe", unchanged))

        @tf.function(input_signature=[tf.TensorSpec([8], tf.float32)])
        def model(x: Any) -> Any:
            return otf.ops.lite_probe(x) + 1.0

        content = _convert(model)
        seen.clear()  # TensorFlow's own runs while converting
        got = _run(content, np.arange(8, dtype=np.float32))
    np.testing.assert_array_equal(got, np.arange(8) * 2 + 1)
    assert seen == [False]
