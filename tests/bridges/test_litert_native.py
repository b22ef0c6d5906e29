"""C-ABI kernels run natively in LiteRT (issue 24): the custom-op kernel's Init, prepare
(GetOutputLayouts) and Run are the shim's C callbacks, Run calls the kernel on LiteRT's own
buffers with no Python; results agree with opmarket.ops and TensorFlow bit for bit; each
attr set keeps its own registration; a kernel's failure is raised by invoke() naming the op;
a kernel with no C-ABI entry keeps the Python path and says why."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")
pytest.importorskip("ai_edge_litert", reason="needs the litert extra")

import opmarket  # noqa: E402 (after the skips)
import opmarket.litert as olr  # noqa: E402
import opmarket.tensorflow as otf  # noqa: E402
from opmarket.sdk import InvalidArgumentError  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party

POOL = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"}


def _convert(fn: Any) -> bytes:
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.allow_custom_ops = True
    model: bytes = converter.convert()
    return model


def _interpreter(content: bytes, *inputs: np.ndarray[Any, Any]) -> olr.Interpreter:
    it = olr.interpreter(model_content=content)
    it.allocate_tensors()
    for detail, value in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(detail["index"], value)
    return it


def _python_calls(fn: Callable[[], Any]) -> list[str]:
    """The Python functions that run while ``fn`` runs (ctypes callbacks included), by
    module and name, besides ``fn`` and the profiler's own."""
    seen: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            seen.append(f"{frame.f_globals.get('__name__')}.{frame.f_code.co_name}")

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


_CASES = {
    "zero_out": (
        np.array([7, -3, 9, 4, 1, 8], np.int32),
        {"preserve_index": 3},
    ),
    "time_two": (np.linspace(-3, 4, 12, dtype=np.float32).reshape(3, 4), {}),
    "median_pool": (
        np.random.default_rng(0).integers(-20, 20, (2, 7, 9, 3)).astype(np.float32) / 4,
        POOL,
    ),
}


@pytest.mark.parametrize("name", list(_CASES))
def test_first_party_compiled_kernels_run_natively_in_litert(name: str) -> None:
    x, attrs = _CASES[name]
    op = getattr(otf.ops, name)

    @tf.function(input_signature=[tf.TensorSpec(x.shape, tf.as_dtype(x.dtype))])
    def model(v: Any) -> Any:
        return op(v, **attrs)

    it = _interpreter(_convert(model), x)
    assert set(it.native_paths().values()) == {"native"}, it.native_paths()
    assert olr.native_path(f"Opm>{_camel(name)}", T=x.dtype, **attrs) == "native"
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_array_equal(got, getattr(opmarket.ops, name)(x, **attrs))
    np.testing.assert_array_equal(got, model(x).numpy())
    # Run is the shim's: no Python runs inside invoke() but invoke's own lines.
    calls = _python_calls(it.invoke)
    assert [c for c in calls if not c.startswith("opmarket.litert._interpreter.")] == [], calls


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


def test_one_op_twice_with_different_attrs_runs_natively_with_each_its_own() -> None:
    @tf.function(input_signature=[tf.TensorSpec([5], tf.int32)])
    def model(x: Any) -> Any:
        return otf.ops.zero_out(x, preserve_index=1) * 10 + otf.ops.zero_out(x, preserve_index=3)

    x = np.array([-2, -1, 0, 1, 2], np.int32)
    it = _interpreter(_convert(model), x)
    assert it.native_paths() == {"Opm>ZeroOut": "native", "Opm>ZeroOut#1": "native"}
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_array_equal(got, [0, -10, 0, 1, 0])
    np.testing.assert_array_equal(got, model(x).numpy())


def test_two_bitcasts_size_their_outputs_with_the_c_shape_function() -> None:
    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def model(x: Any) -> Any:
        return otf.ops.bitcast(x, type=tf.int32), otf.ops.bitcast(x, type=tf.uint8)

    x = np.array([0.0, 1.5, -3.0], np.float32)
    it = _interpreter(_convert(model), x)
    assert set(it.native_paths().values()) == {"native"}
    assert len(it.native_paths()) == 2
    # prepare ran the library's C shape function: no Python shape function was asked
    shapes = sorted(tuple(d["shape"].tolist()) for d in it.get_output_details())
    assert shapes == [(3,), (3, 4)]
    it.invoke()
    got = sorted((it.get_tensor(d["index"]) for d in it.get_output_details()), key=np.ndim)
    want = sorted((t.numpy() for t in model(x)), key=np.ndim)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_bitcast_prepare_runs_no_python() -> None:
    @tf.function(input_signature=[tf.TensorSpec([3], tf.float32)])
    def model(x: Any) -> Any:
        return otf.ops.bitcast(x, type=tf.uint8)

    content = _convert(model)
    calls = _python_calls(lambda: olr.interpreter(model_content=content))
    assert not [c for c in calls if c.endswith(".output_layouts")], calls


def test_a_native_kernel_error_is_raised_by_invoke_naming_the_op() -> None:
    @tf.function(input_signature=[tf.TensorSpec([2], tf.int32)])
    def model(x: Any) -> Any:
        return otf.ops.zero_out(x * 2, preserve_index=3)  # past the end: the kernel says so

    it = _interpreter(_convert(model), np.array([1, 2], np.int32))
    assert it.native_paths() == {"Opm>ZeroOut": "native"}
    for _ in range(2):  # the record is cleared and filled again on each invoke
        with pytest.raises(InvalidArgumentError, match=r"^Opm>ZeroOut.*preserve_index"):
            it.invoke()


def test_the_record_of_a_failure_does_not_outlive_its_invoke() -> None:
    @tf.function(input_signature=[tf.TensorSpec([4], tf.int32)])
    def model(x: Any) -> Any:
        return otf.ops.zero_out(x, preserve_index=2)

    it = _interpreter(_convert(model), np.array([1, 2, 3, 4], np.int32))
    it.invoke()
    it.invoke()
    np.testing.assert_array_equal(it.get_tensor(it.get_output_details()[0]["index"]), [0, 0, 3, 0])


def test_a_numpy_kernel_keeps_the_python_path_and_says_why() -> None:
    @tf.function(input_signature=[tf.TensorSpec([5], tf.float32)])
    def model(x: Any) -> Any:
        return otf.ops.atan(x) * 2.0

    x = np.array([0.5, -1.0, 2.0, 3.0, -4.0], np.float32)
    it = _interpreter(_convert(model), x)
    (path,) = it.native_paths().values()
    assert path.startswith("python: its CPU kernel") and "not a C-ABI kernel" in path
    assert olr.native_path("Opm>Atan", T=np.float32) == "python"
    assert "not a C-ABI kernel" in olr.native_reason("Opm>Atan", T=np.float32)
    it.invoke()
    got = it.get_tensor(it.get_output_details()[0]["index"])
    np.testing.assert_allclose(got, model(x).numpy(), rtol=1e-6)
    assert "opmarket.litert._custom.run" in _python_calls(it.invoke)


def test_without_a_compiler_compiled_kernels_run_through_python_and_say_why(
    tmp_path: Path,
) -> None:
    @tf.function(input_signature=[tf.TensorSpec([4], tf.int32)])
    def model(x: Any) -> Any:
        return otf.ops.zero_out(x, preserve_index=1)

    path = tmp_path / "m.tflite"
    path.write_bytes(_convert(model))
    code = (
        "import numpy as np, opmarket.litert as olr\n"
        f"it = olr.interpreter(model_path={str(path)!r})\n"
        "print(it.native_paths()['Opm>ZeroOut'])\n"
        "it.allocate_tensors()\n"
        "it.set_tensor(it.get_input_details()[0]['index'], np.arange(1, 5, dtype=np.int32))\n"
        "it.invoke()\n"
        "print(it.get_tensor(it.get_output_details()[0]['index']).tolist())\n"
    )
    env = {
        **os.environ,
        "CC": str(tmp_path / "no-such-cc"),
        "OPMARKET_CACHE_DIR": str(tmp_path / "cache"),
        # The install's shim would serve: this is the case of an install that has none.
        "OPMARKET_SHIPPED_SHIMS": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    reason, result = done.stdout.splitlines()
    assert reason.startswith("python: its shim could not be built") and "compiler" in reason
    assert result == "[0, 2, 0, 0]"
    assert "building the LiteRT bridge's native shim" in done.stderr
