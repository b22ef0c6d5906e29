"""One op, one input, five runs: ``opmarket.ops``, TensorFlow (eagerly and in a
``tf.function``), JAX (under ``jit``), PyTorch and LiteRT (the ``tf.function`` converted
with ``allow_custom_ops``) give bitwise-equal outputs (dtype, shape and bytes, NaN payloads
and signed zeros included) for every first-party op over 0-d, empty, non-contiguous and
NaN/inf inputs.

Where an op's contract refuses an input (ZeroOut takes a vector and an index inside it,
MedianPool a 4-D image, DoCustomCall a non-empty vector ``b``), every framework refuses it
with an error saying why. LiteRT makes no buffer of zero elements (docs/frameworks.md,
"LiteRT"): a model whose outputs are all empty runs without running its kernels, and one
with an empty tensor and a non-empty output raises the documented error.

Origins: the cross-framework consistency checks of TensorFlow's
``tensorflow/lite/testing/`` (a tf.function's TensorFlow result against the converted
model's), and ``torch.testing._internal.opinfo``'s sample inputs (0-d, empty,
non-contiguous, extremal values) as ``opcheck`` and the OpInfo tests run them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tensorflow extra")
jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
pytest.importorskip("ai_edge_litert", reason="needs the litert extra")

import opmarket  # noqa: E402 (after the skips)
import opmarket.jax as oj  # noqa: E402
import opmarket.litert as olr  # noqa: E402
import opmarket.sdk  # noqa: E402
import opmarket.tensorflow as otf  # noqa: E402
import opmarket.torch as ot  # noqa: E402
from opmarket.registry import get_registry  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party

_Array = np.ndarray[Any, Any]
FRAMEWORKS = ["opmarket", "tensorflow", "tf.function", "jax", "torch", "litert"]


@dataclass(frozen=True)
class Input:
    """A case's inputs: each a base array and a view of it (the same slicing applies to a
    numpy array and a torch tensor, so torch gets a strided tensor, not a copy)."""

    id: str
    op: str
    bases: Callable[[], list[_Array]]
    attrs: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    view: Callable[[Any], Any] = lambda a: a
    #: None: every framework agrees on a result; else what each error says (a regex)
    refused: str | None = None

    def arrays(self) -> list[_Array]:
        return [self.view(b) for b in self.bases()]


def _naninf(dtype: Any, shape: tuple[int, ...] = (8,)) -> _Array:
    values = [np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1.5, -2.25]
    return np.resize(np.array(values, dtype), shape)


def _image(dtype: Any = np.float32) -> _Array:
    rng = np.random.default_rng(5)
    return (rng.integers(-20, 20, (2, 6, 9, 3)) / 4).astype(dtype)


def _image_naninf() -> _Array:
    x = _image()
    x[0, 1, 2, 0] = np.nan
    x[1, 2:5, 3:6, 1] = np.inf
    x[0, 4, 4, 2] = -np.inf
    return x


POOL = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"}
EVERY_OTHER = lambda a: a[::2]  # noqa: E731 (a view of every other element)
ZERO_OUT_EMPTY = "preserve_index out of range"
# LiteRT's documented refusal of an empty tensor beside a non-empty output.
LITERT_EMPTY = "LiteRT makes no buffer for an empty tensor"
# The shape function's words (opmarket.ops, tracing) or the kernel's (an eager call).
VECTOR = "rank 1|1-D vector"

CASES = [
    # Atan: any shape; half, float, double.
    Input("atan-0d", "Opm>Atan", lambda: [np.array(0.5, np.float32)]),
    Input("atan-empty", "Opm>Atan", lambda: [np.zeros((0, 3), np.float32)]),
    Input("atan-noncontig", "Opm>Atan", lambda: [np.linspace(-3, 3, 14)], view=EVERY_OTHER),
    Input("atan-naninf", "Opm>Atan", lambda: [_naninf(np.float32)]),
    Input("atan-naninf-half", "Opm>Atan", lambda: [_naninf(np.float16)]),
    # TimeTwo: any shape; integers wrap around.
    Input("time_two-0d", "Opm>TimeTwo", lambda: [np.array(-(2**30), np.int32)]),
    Input("time_two-empty", "Opm>TimeTwo", lambda: [np.zeros((3, 0), np.int64)]),
    Input(
        "time_two-noncontig",
        "Opm>TimeTwo",
        lambda: [np.arange(24, dtype=np.float64).reshape(4, 6)],
        view=lambda a: a[:, 1::2],
    ),
    Input("time_two-naninf", "Opm>TimeTwo", lambda: [_naninf(np.float64, (2, 4))]),
    # ZeroOut: a vector, preserve_index inside it; the C++ kernels and the C one.
    Input("zero_out-0d", "Opm>ZeroOut", lambda: [np.array(3.0, np.float32)], refused=VECTOR),
    Input(
        "zero_out-empty",
        "Opm>ZeroOut",
        lambda: [np.zeros(0, np.float32)],
        refused=ZERO_OUT_EMPTY,
    ),
    Input(
        "zero_out-noncontig",
        "Opm>ZeroOut",
        lambda: [np.arange(10, dtype=np.int32)],
        {"preserve_index": 3},
        view=EVERY_OTHER,
    ),
    Input("zero_out-naninf", "Opm>ZeroOut", lambda: [_naninf(np.float64)], {"preserve_index": 1}),
    Input(
        "zero_out_c_abi-noncontig",
        "Opm>ZeroOut",
        lambda: [np.linspace(-1, 1, 9, dtype=np.float32)],
        {"preserve_index": 2},
        label="c_abi",
        view=EVERY_OTHER,
    ),
    Input(
        "zero_out_c_abi-naninf",
        "Opm>ZeroOut",
        lambda: [_naninf(np.float32)],
        label="c_abi",
    ),
    # MedianPool: a 4-D image; NaN and infinities order as the kernel orders them.
    Input(
        "median_pool-0d",
        "Opm>MedianPool",
        lambda: [np.array(1.0, np.float32)],
        POOL,
        refused="rank 4|4-D",
    ),
    Input(
        "median_pool-empty",
        "Opm>MedianPool",
        lambda: [np.zeros((0, 6, 9, 3), np.float32)],
        POOL,
    ),
    Input(
        "median_pool-noncontig",
        "Opm>MedianPool",
        lambda: [_image(np.float64)],
        POOL,
        view=lambda a: a[:, ::2, 1::2, :],
    ),
    Input("median_pool-naninf", "Opm>MedianPool", lambda: [_image_naninf()], POOL),
    # Bitcast: the C-ABI kernel; bit patterns of NaN and -0.0 kept.
    Input("bitcast-0d", "Opm>Bitcast", lambda: [np.array(-0.0, np.float32)], {"type": np.int32}),
    Input(
        "bitcast-0d-smaller",
        "Opm>Bitcast",
        lambda: [np.array(1.5, np.float32)],
        {"type": np.uint8},
    ),
    Input("bitcast-empty", "Opm>Bitcast", lambda: [np.zeros(0, np.float32)], {"type": np.uint8}),
    Input(
        "bitcast-noncontig",
        "Opm>Bitcast",
        lambda: [np.linspace(-2, 2, 10, dtype=np.float32)],
        {"type": np.int32},
        view=EVERY_OTHER,
    ),
    Input("bitcast-naninf", "Opm>Bitcast", lambda: [_naninf(np.float32)], {"type": np.uint32}),
    # DoCustomCall: vectors b (non-empty) and c.
    Input(
        "do_custom_call-0d",
        "Opm>DoCustomCall",
        lambda: [np.array(1.0, np.float32), np.ones(3, np.float32)],
        refused="rank",
    ),
    Input(
        "do_custom_call-empty-c",
        "Opm>DoCustomCall",
        lambda: [np.ones(2, np.float32), np.zeros(0, np.float32)],
    ),
    Input(
        "do_custom_call-empty-b",
        "Opm>DoCustomCall",
        lambda: [np.zeros(0, np.float32), np.ones(3, np.float32)],
        refused="non-empty vector b",
    ),
    Input(
        "do_custom_call-noncontig",
        "Opm>DoCustomCall",
        lambda: [np.arange(6, dtype=np.float32), np.linspace(0, 1, 14, dtype=np.float32)],
        view=EVERY_OTHER,
    ),
    Input(
        "do_custom_call-naninf",
        "Opm>DoCustomCall",
        lambda: [_naninf(np.float32, (3,)), _naninf(np.float32, (7,))],
    ),
]


def _kwargs(case: Input, dtype_of: Callable[[Any], Any]) -> dict[str, Any]:
    return {k: dtype_of(v) if k == "type" else v for k, v in case.attrs.items()}


def _opmarket(case: Input) -> _Array:
    if case.label:  # opmarket.ops takes no label: a graph node asks for one, as here
        call = get_registry().dispatcher(case.op).call
        return np.asarray(call(case.arrays(), case.attrs, label=case.label))
    return np.asarray(opmarket.ops[case.op](*case.arrays(), **case.attrs))


def _tf_fn(case: Input) -> Callable[..., Any]:
    kwargs = _kwargs(case, tf.as_dtype)
    if case.label:
        kwargs["label"] = case.label
    op = otf.ops[case.op]
    return lambda *xs: op(*xs, **kwargs)


def _tensorflow(case: Input) -> _Array:
    return np.asarray(_tf_fn(case)(*[tf.constant(x) for x in case.arrays()]).numpy())


def _signature(arrays: list[_Array]) -> list[Any]:
    return [tf.TensorSpec(x.shape, tf.as_dtype(x.dtype)) for x in arrays]


def _tf_function(case: Input) -> _Array:
    arrays = case.arrays()
    fn = tf.function(_tf_fn(case), input_signature=_signature(arrays))
    return np.asarray(fn(*arrays).numpy())


def _jax(case: Input) -> _Array:
    kwargs = _kwargs(case, np.dtype)
    if case.label:
        kwargs["_kernel"] = case.label
    op = oj.ops[case.op]
    with jax.enable_x64(True):  # 64-bit inputs stay 64-bit, as in every other framework
        return np.asarray(jax.jit(lambda *xs: op(*xs, **kwargs))(*case.arrays()))


def _torch_dtype(dtype: Any) -> Any:
    return torch.from_numpy(np.zeros(0, dtype)).dtype


def _torch(case: Input) -> _Array:
    tensors = [case.view(torch.from_numpy(b)) for b in case.bases()]
    assert all(
        t.is_contiguous() == x.flags.c_contiguous
        for t, x in zip(tensors, case.arrays(), strict=True)
    )
    packet = ot.ops[case.op]
    fn = getattr(packet, case.label) if case.label else packet  # a label is an overload
    return np.asarray(fn(*tensors, **_kwargs(case, _torch_dtype)).numpy())


def _litert(case: Input) -> _Array:
    arrays = case.arrays()
    fn = tf.function(_tf_fn(case), input_signature=_signature(arrays))
    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.allow_custom_ops = True
    it = olr.interpreter(model_content=converter.convert())
    it.allocate_tensors()
    for detail, x in zip(it.get_input_details(), arrays, strict=True):
        it.set_tensor(detail["index"], x.copy(order="C"))  # 0-d stays 0-d
    it.invoke()
    return np.asarray(it.get_tensor(it.get_output_details()[0]["index"]))


RUN = {
    "opmarket": _opmarket,
    "tensorflow": _tensorflow,
    "tf.function": _tf_function,
    "jax": _jax,
    "torch": _torch,
    "litert": _litert,
}


def _empty_anywhere(case: Input) -> bool:
    return any(x.size == 0 for x in case.arrays())


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_framework_gives_opmarkets_bits_or_its_refusal(case: Input, framework: str) -> None:
    litert_empty = framework == "litert" and _empty_anywhere(case)
    if case.refused is not None:
        if litert_empty and case.refused == ZERO_OUT_EMPTY:
            # Shapes alone say nothing is wrong, and LiteRT runs no kernel for a model whose
            # outputs are all empty (docs/frameworks.md, "LiteRT"): it gives the empty output.
            assert _litert(case).shape == (0,)
            return
        with pytest.raises(Exception) as caught:  # each framework's own error type
            RUN[framework](case)
        refused = f"{case.refused}|{LITERT_EMPTY}" if litert_empty else case.refused
        assert re.search(refused, str(caught.value)), repr(caught.value)
        return
    want = _opmarket(case)
    if litert_empty and want.size:
        with pytest.raises(opmarket.sdk.InvalidArgumentError, match=LITERT_EMPTY):
            _litert(case)
        return
    got = RUN[framework](case)
    assert (got.dtype, got.shape) == (want.dtype, want.shape)
    assert got.tobytes() == want.tobytes()
