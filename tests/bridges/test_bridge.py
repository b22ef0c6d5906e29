"""opmarket._bridge, what the four framework bridges share (no framework needed): one reading
of a dtype and of a shape from framework values, framework buffers read without a copy, the
one shim builder, and the OpDef -> PyTorch schema generator in opmarket.sdk.torch_schema."""

from __future__ import annotations

import ctypes
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from opmarket._bridge import (
    LibraryError,
    build_shim,
    normalize_dtype,
    normalize_shape,
    readonly_array,
)
from opmarket.registry import BUILTIN_OPS
from opmarket.sdk import DType, InvalidArgumentError, TensorShape, op
from opmarket.sdk.torch_schema import FRAMEWORK_OWN_OPS, forward_schema, torch_schemas


@pytest.mark.parametrize(
    "value",
    [DType.INT32, np.int32, np.dtype(np.int32), "int32", "DT_INT32", 3, np.int64(3)],
    ids=repr,
)
def test_a_dtype_reads_the_same_from_every_spelling(value: Any) -> None:
    assert normalize_dtype(value) is DType.INT32


@pytest.mark.parametrize(
    ("module", "expression"),
    [
        ("tensorflow", "m.int32"),
        ("jax.numpy", "m.int32"),
        ("jax.numpy", "m.dtype(m.int32)"),
    ],
)
def test_a_framework_dtype_reads_as_opmarket_dtype(module: str, expression: str) -> None:
    m = pytest.importorskip(module)
    assert normalize_dtype(eval(expression, {"m": m})) is DType.INT32


@pytest.mark.parametrize("value", ["int33", object(), 999], ids=repr)
def test_an_unknown_dtype_is_a_clear_error(value: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        normalize_dtype(value)


@pytest.mark.parametrize(
    ("value", "dims"),
    [
        ([2, 3], (2, 3)),
        ((2, None), (2, -1)),
        ([np.int64(4), -1], (4, -1)),
        ([], ()),
        (None, None),
        (TensorShape((1, -1)), (1, -1)),
    ],
    ids=repr,
)
def test_a_shape_reads_the_same_from_every_spelling(value: Any, dims: Any) -> None:
    assert normalize_shape(value) == TensorShape(dims)


def test_a_tensorflow_shape_reads_as_its_dims() -> None:
    tf = pytest.importorskip("tensorflow")
    assert normalize_shape(tf.TensorShape([3, None])) == TensorShape((3, -1))
    assert normalize_shape(tf.TensorShape(None)) == TensorShape(None)


def test_a_buffer_is_read_in_place_and_read_only() -> None:
    raw = (ctypes.c_float * 6)(*range(6))
    array = readonly_array(ctypes.addressof(raw), (2, 3), np.float32)
    assert array.ctypes.data == ctypes.addressof(raw)  # no copy
    assert array.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert not array.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        array[0, 0] = 1
    raw[0] = 9.0
    assert array[0, 0] == 9.0  # the framework's memory itself


@pytest.mark.parametrize("shape", [(), (0,), (3, 0)])
def test_0d_and_empty_buffers_keep_their_shape(shape: tuple[int, ...]) -> None:
    raw = ctypes.c_int32(7)
    array = readonly_array(ctypes.addressof(raw), shape, np.int32)
    assert array.shape == shape and array.dtype == np.int32 and not array.flags.writeable
    if shape == ():
        assert array.item() == 7


def test_a_shim_builds_once_from_source_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPMARKET_CACHE_DIR", str(tmp_path))
    source = 'extern "C" int opm_answer(void) { return 42; }\n'
    first = build_shim("answer", source, [], flags=[], link=[], language="c++", announce="hi")
    assert ctypes.CDLL(str(first)).opm_answer() == 42
    assert first.parent == tmp_path / "bridges"
    again = build_shim("answer", source, [], flags=[], link=[], language="c++", announce="hi")
    assert again == first
    assert capfd.readouterr().err.count("opmarket: hi") == 1  # announced for the build only
    changed = build_shim("answer", source + "\n", [], flags=[], link=[], language="c++")
    assert changed != first


def test_a_shim_that_does_not_compile_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPMARKET_CACHE_DIR", str(tmp_path))
    with pytest.raises(LibraryError, match=r"(?s)cannot build broken .*opm_nothing. undeclared"):
        build_shim("broken", "int f(void) { return opm_nothing; }\n", [])
    assert list((tmp_path / "bridges").iterdir()) == []  # nothing half-built left behind


def test_the_ops_frameworks_have_are_opmarkets_built_ins() -> None:
    assert set(BUILTIN_OPS) == FRAMEWORK_OWN_OPS
    for name in BUILTIN_OPS:
        assert torch_schemas(BUILTIN_OPS[name]) == []


def test_schemas_come_from_the_sdk_and_need_no_torch() -> None:
    zero_out = (
        op("Opm>ZeroOut")
        .input("to_zero: T")
        .output("zeroed: T")
        .attr("T: {float, int32} = DT_INT32")
        .attr("preserve_index: int >= 0 = 0")
        .build()
    )
    assert forward_schema(zero_out) == "(Tensor to_zero, *, int preserve_index=0) -> Tensor"
    assert torch_schemas(zero_out, ["c_abi", ""]) == [
        "opm::zero_out(Tensor to_zero, *, int preserve_index=0) -> Tensor",
        "opm::zero_out.c_abi(Tensor to_zero, *, int preserve_index=0) -> Tensor",
    ]


def test_bridge_parameters_are_named_as_opmarket_ops_names_them() -> None:
    """One naming rule (sdk's py_name) for opmarket.ops' wrappers and the bridges: a Python
    keyword, or a name a renamed one took, made usable the same way in both."""
    import inspect

    from opmarket.registry import isolated_registry
    from opmarket.sdk import kernel
    from opmarket.sdk.torch_schema import parameters

    odd = (
        op("BridgeTest>Names")
        .input("lambda: float")
        .input("in: float")
        .output("y: float")
        .attr("class: int = 1")
        .attr("lambda_: int = 2")
        .build()
    )
    inputs, params = parameters(odd)
    assert inputs == ["lambda_", "in_"] and [p.name for p in params] == ["class_", "lambda__"]
    with isolated_registry():
        import opmarket

        opmarket.register(odd, kernel("BridgeTest>Names")(lambda a, b, **attrs: a + attrs["class"]))
        wrapper = opmarket.ops["BridgeTest>Names"]
        assert list(inspect.signature(wrapper).parameters)[:4] == [*inputs, "class_", "lambda__"]
        x = np.float32([1.0])
        for _ in range(2):  # the first call prepares, the second takes the wrapper's fast path
            np.testing.assert_array_equal(wrapper(x, x, class_=5), [6.0])

        pytest.importorskip("tensorflow", reason="needs the tensorflow extra")
        import opmarket.tensorflow as otf

        tf_wrapper = otf.ops["BridgeTest>Names"]
        assert list(inspect.signature(tf_wrapper).parameters)[:4] == [*inputs, "class_", "lambda__"]
        for _ in range(2):  # the first call binds, the second takes the kept call
            np.testing.assert_array_equal(tf_wrapper(x, x, class_=5), [6.0])
        np.testing.assert_array_equal(tf_wrapper(lambda_=x, in_=x), [2.0])


def test_a_bridge_namespace_keeps_what_it_made_until_the_registry_changes() -> None:
    """``opmarket.jax.ops.x`` and the others keep what they made as ``opmarket.ops`` keeps
    its wrappers (a repeated lookup makes nothing), and a change to the registry reaches
    them as it reaches ``opmarket.ops``: a short name now shared is ambiguous, an op gone
    is gone."""
    import opmarket
    from opmarket._bridge import BridgeNamespace
    from opmarket.registry import AmbiguousOpNameError, isolated_registry

    made: list[str] = []

    def make(full: str) -> tuple[str, str]:
        made.append(full)
        return ("made", full)

    ns = BridgeNamespace(make, "test.ops")
    with isolated_registry():
        opmarket.register(op("BridgeTest>Kept").output("y: float").build())
        assert ns.kept == ("made", "BridgeTest>Kept")
        assert ns.kept is ns.kept and ns.bridge_test.kept is ns.bridge_test.kept
        assert made == ["BridgeTest>Kept", "BridgeTest>Kept"]  # once by each name
        opmarket.register(op("Other>Kept").output("y: int32").build())
        for namespace in (opmarket.ops, ns):
            with pytest.raises(AmbiguousOpNameError):
                _ = namespace.kept
        assert ns.bridge_test.kept == ("made", "BridgeTest>Kept")
        assert ns.other.kept == ("made", "Other>Kept")
    with pytest.raises(AttributeError, match=r"test\.ops has no op 'kept'"):
        _ = ns.kept
