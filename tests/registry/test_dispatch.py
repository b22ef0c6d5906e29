from __future__ import annotations

import inspect
import threading
import time
from typing import Any

import numpy as np
import pytest

import opmarket
from opmarket.registry import (
    KernelError,
    KernelNotFoundError,
    Registry,
    current_device,
    device,
)
from opmarket.sdk import InferenceContext, InvalidArgumentError, Kernel, OpDef, kernel, op, shape_fn


def test_zero_out_runs(zero_out: OpDef) -> None:
    out = opmarket.ops.zero_out(np.array([5, 4, 3], np.int32))
    assert out.tolist() == [5, 0, 0]
    assert out.dtype == np.int32
    f = opmarket.ops.zero_out(np.array([1.5, 2.5], np.float32), preserve_index=1)
    assert f.tolist() == [0.0, 2.5] and f.dtype == np.float32


def test_signature_and_docstring(zero_out: OpDef) -> None:
    f = opmarket.ops.zero_out
    assert str(inspect.signature(f)) == "(to_zero, *, preserve_index=0)"
    assert f.__name__ == "zero_out"
    doc = f.__doc__ or ""
    assert doc.startswith("Zeroes all but one element of a vector.")
    assert "to_zero: A tensor of type T in {float, double, int32}. the vector." in doc
    assert "preserve_index: int >= 0, default 0. the element that is kept." in doc


def test_attrs_are_keyword_only(zero_out: OpDef) -> None:
    with pytest.raises(TypeError):
        opmarket.ops.zero_out(np.array([1], np.int32), 0)


def test_python_values_take_an_allowed_type(zero_out: OpDef) -> None:
    assert opmarket.ops.zero_out([5, 4]).dtype == np.int32  # the default T
    assert opmarket.ops.zero_out([5.0, 4.0]).dtype == np.float64


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda f: f(np.zeros(2, np.int64)),
            "Opm>ZeroOut: attr 'T' may not be int64; allowed: float, double, int32",
        ),
        (
            lambda f: f(np.zeros(2, np.int32), preserve_index=-1),
            "Opm>ZeroOut: attr 'preserve_index' is -1, below its minimum of 0",
        ),
        (
            lambda f: f(np.zeros((2, 2), np.int32)),
            "Opm>ZeroOut: Shape must be rank 1 but is rank 2",
        ),
        (lambda f: f(np.zeros(2, np.int32), preserve_index=5), "preserve_index out of range"),
        (
            lambda f: f(np.zeros(2, np.int32), preserve_index="1"),
            "attr 'preserve_index': expected int, got '1'",
        ),
    ],
)
def test_checks(zero_out: OpDef, call: Any, message: str) -> None:
    f = opmarket.ops.zero_out
    f(np.zeros(2, np.int32))  # a cached entry must not let a bad call through
    with pytest.raises(InvalidArgumentError) as info:
        call(f)
    assert message in str(info.value)


def test_missing_kernel_lists_what_exists(zero_out: OpDef) -> None:
    with device("GPU"), pytest.raises(KernelNotFoundError) as info:
        opmarket.ops.zero_out(np.zeros(2, np.float32))
    assert str(info.value) == (
        "no kernel for Opm>ZeroOut on GPU with T=float\n"
        "  registered kernels:\n"
        "    CPU  T in {float, double, int32}  priority 0  "
        "(tests.registry.conftest.zero_out_kernel)"
    )


def test_highest_priority_wins_and_device_scope(registry: Registry) -> None:
    double = op("Opm>Double").input("x: T").output("y: T").attr("T: {float, int32}").build()
    calls: list[str] = []

    @kernel("Opm>Double")
    def slow(x: Any) -> Any:
        calls.append("slow")
        return x * 2

    @kernel("Opm>Double", priority=5, constraints={"T": [np.float32]})
    def fast(x: Any) -> Any:
        calls.append("fast")
        return x + x

    @kernel("Opm>Double", device="GPU")
    def gpu(x: Any) -> Any:
        calls.append("gpu")
        return x * 2

    registry.register(double, slow, source="a")
    f = opmarket.ops.double
    f(np.ones(2, np.float32))
    registry.register(fast, gpu, source="b")  # new kernels drop cached choices
    with device("CPU"):
        assert current_device() == "CPU"
        f(np.ones(2, np.float32))
        f(np.ones(2, np.int32))
    f(np.ones(2, np.float32))  # no scope: GPU is preferred when it has a kernel
    assert current_device() is None
    assert calls == ["slow", "fast", "slow", "gpu"]


def test_lifecycle_kernel(registry: Registry) -> None:
    events: list[str] = []
    scale = op("Opm>Scale").input("x: float").output("y: float").attr("factor: float").build()

    @kernel("Opm>Scale", options=b"opts")
    class ScaleKernel(Kernel):
        def __init__(self, attrs: Any, options: bytes = b"") -> None:
            super().__init__(attrs, options)
            events.append(f"init {attrs['factor']} {options!r}")

        def prepare(self, x: Any) -> None:
            events.append(f"prepare {x.shape}")

        def compute(self, x: Any) -> Any:
            return x * np.float32(self.attrs["factor"])

        def close(self) -> None:
            events.append("close")

    registry.register(scale, ScaleKernel)
    f = opmarket.ops.scale
    x = np.ones(3, np.float32)
    assert f(x, factor=2).tolist() == [2, 2, 2]
    f(x, factor=2)
    f(np.ones(4, np.float32), factor=2)
    f(x, factor=3)
    registry.register(op("Opm>Other").build())  # any change closes prepared kernels
    assert events == [
        "init 2.0 b'opts'",
        "prepare (3,)",
        "prepare (4,)",
        "init 3.0 b'opts'",
        "prepare (3,)",
        "close",
        "close",
    ]


def test_outputs_are_checked(registry: Registry) -> None:
    bad = op("Opm>Bad").input("x: float").output("y: float").build()

    @kernel("Opm>Bad")
    def wrong(x: Any) -> Any:
        return x.astype(np.float64)

    registry.register(bad, wrong)
    with pytest.raises(KernelError, match="returned float64 for output 'y', declared float"):
        opmarket.ops.bad(np.ones(2, np.float32))


def test_list_inputs_and_several_outputs(registry: Registry) -> None:
    split = (
        op("Opm>SumAndCount")
        .input("xs: N * T")
        .output("total: T")
        .output("count: int32")
        .attr("N: int >= 1")
        .attr("T: {float, int32}")
        .build()
    )

    @kernel("Opm>SumAndCount")
    def impl(xs: list[Any]) -> Any:
        return sum(xs[1:], xs[0]), np.int32(len(xs))

    registry.register(split, impl)
    total, count = opmarket.ops.sum_and_count([np.ones(2, np.int32)] * 3)
    assert total.tolist() == [3, 3] and count == 3 and count.dtype == np.int32
    with pytest.raises(InvalidArgumentError, match="input 'xs' makes T=float, but T is int32"):
        opmarket.ops.sum_and_count([np.ones(2, np.int32), np.ones(2, np.float32)])
    assert opmarket.ops.add_n([np.ones(2, np.float32)] * 2).tolist() == [2, 2]


def test_type_attr_accepts_numpy_names_and_dtypes(registry: Registry) -> None:
    fill = (
        op("Opm>Fill").output("y: dtype").attr("dtype: {float, int32}").attr("n: int = 2").build()
    )

    @kernel("Opm>Fill")
    def impl(*, dtype: Any, n: int) -> Any:
        return np.ones(n, dtype.numpy)

    registry.register(fill, impl)
    from opmarket.sdk import DType

    for t in (np.int32, "int32", "DT_INT32", DType.INT32, np.dtype("int32")):
        assert opmarket.ops.fill(dtype=t).dtype == np.int32
    assert str(inspect.signature(opmarket.ops.fill)) == "(*, dtype, n=2)"


def test_a_list_attr_set_makes_one_lifecycle_kernel_and_it_is_closed(registry: Registry) -> None:
    events: list[str] = []
    pool = op("Opm>Pool").input("x: float").output("y: float").attr("ksize: list(int) >= 1").build()
    shape_calls: list[int] = []

    @kernel("Opm>Pool")
    class PoolKernel(Kernel):
        def __init__(self, attrs: Any, options: bytes = b"") -> None:
            super().__init__(attrs, options)
            events.append(f"init {attrs['ksize']}")

        def compute(self, x: Any) -> Any:
            return x

        def close(self) -> None:
            events.append("close")

    @shape_fn("Opm>Pool")
    def pool_shape(c: InferenceContext) -> None:
        shape_calls.append(1)
        c.set_output(0, c.input(0))

    registry.register(pool, PoolKernel, pool_shape)
    x = np.ones(3, np.float32)
    for _ in range(100):
        opmarket.ops.pool(x, ksize=[1, 3, 3, 1])
        opmarket.ops.pool(x, ksize=(1, 3, 3, 1))  # the same attr set, spelled as a tuple
    assert events == ["init (1, 3, 3, 1)"]
    assert len(shape_calls) <= 2  # once per spelling, not once per call
    registry.register(op("Opm>Other").build())  # any change closes prepared kernels
    assert events == ["init (1, 3, 3, 1)", "close"]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"factor": True}, "attr 'factor': expected float, got True"),
        ({"n": 1.0}, "attr 'n': expected int, got 1.0"),
        ({"n": True}, "attr 'n': expected int, got True"),
        ({"sizes": (1.0,)}, "attr 'sizes': expected int, got 1.0"),
    ],
)
def test_an_equal_value_of_another_type_is_still_checked(
    registry: Registry, given: dict[str, Any], message: str
) -> None:
    scale = (
        op("Opm>Scale")
        .input("x: float")
        .output("y: float")
        .attr("factor: float = 1.0")
        .attr("n: int = 1")
        .attr("sizes: list(int) = [1]")
        .build()
    )

    @kernel("Opm>Scale")
    def impl(x: Any, *, factor: float, n: int, sizes: Any) -> Any:
        return x * np.float32(factor)

    registry.register(scale, impl)
    x = np.ones(2, np.float32)
    opmarket.ops.scale(x, factor=1.0, n=1, sizes=(1,))  # cached: it must not let these pass
    with pytest.raises(InvalidArgumentError, match=message):
        opmarket.ops.scale(x, **given)


def test_a_kernel_gets_bound_attr_values_whatever_the_spelling(registry: Registry) -> None:
    pool = (
        op("Opm>Pool")
        .input("x: float")
        .output("y: float")
        .attr("ksize: list(int)")
        .attr("factor: float")
        .build()
    )
    seen: list[tuple[Any, Any]] = []

    @kernel("Opm>Pool")
    def impl(x: Any, *, ksize: Any, factor: Any) -> Any:
        seen.append((ksize, factor))
        return x

    registry.register(pool, impl)
    x = np.ones(2, np.float32)
    for ksize, factor in [((1, 3), 2.0), ([1, 3], 2), ((1, 3), 2.0), ([1, 3], 2)]:
        opmarket.ops.pool(x, ksize=ksize, factor=factor)
    assert {(type(k), k, type(f)) for k, f in seen} == {(tuple, (1, 3), float)}


def test_threads_share_a_lifecycle_kernel_safely(registry: Registry) -> None:
    # LiteRT's pattern: prepare sizes the output, compute fills it. One kernel instance serves
    # every thread that calls with the same attrs, so each call's prepare and compute must
    # not interleave with another thread's.
    atan = op("Opm>Atan").input("x: float").output("y: float").build()

    @kernel("Opm>Atan")
    class AtanKernel(Kernel):
        def prepare(self, x: Any) -> None:
            self.output_shape = x.shape

        def compute(self, x: Any) -> Any:
            time.sleep(0)  # lets other threads run, as a kernel releasing the GIL does
            out = np.empty(self.output_shape, np.float32)
            out[...] = np.arctan(x)
            return out

    registry.register(atan, AtanKernel)
    errors: list[BaseException] = []

    def calls(n: int) -> None:
        x = np.linspace(-1, 1, n, dtype=np.float32)
        try:
            for _ in range(200):
                assert opmarket.ops.atan(x).shape == (n,)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=calls, args=(n,)) for n in (3, 4, 5, 6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            [1.7, 2.2],
            "Opm>Take: input 'x' must be int32; [1.7, 2.2] (float64) does not convert "
            "to int32 without changing its values",
        ),
        (
            2**40,
            "Opm>Take: input 'x' must be int32; 1099511627776 (int64) does not convert to "
            "int32 without changing its values",
        ),
        ("abc", "Opm>Take: input 'x' must be int32, got 'abc'"),
        (None, "Opm>Take: input 'x' must be int32, got None"),
        ([[1], [1, 2]], "Opm>Take: input 'x': cannot make an array of [[1], [1, 2]]"),
        (
            {"scale": [1e300]},
            "Opm>Take: input 'scale' must be float; [1e+300] (float64) does "
            "not convert to float without changing its values",
        ),
        (
            {"y": [0.5]},
            "Opm>Take: input 'y' must be one of int32, int64; [0.5] (float64) does "
            "not convert to int32 without changing its values",
        ),
    ],
)
def test_python_values_are_not_cast_into_other_values(
    registry: Registry, value: Any, message: str
) -> None:
    take = (
        op("Opm>Take")
        .input("x: int32")
        .input("scale: float")
        .input("y: T")
        .output("out: int32")
        .attr("T: {int32, int64}")
        .build()
    )

    @kernel("Opm>Take")
    def impl(x: Any, scale: Any, y: Any) -> Any:
        return x

    registry.register(take, impl)
    args = {"x": [1], "scale": [1.0], "y": [1]}
    args.update(value if isinstance(value, dict) else {"x": value})
    with pytest.raises(InvalidArgumentError) as info:
        opmarket.ops.take(args["x"], args["scale"], args["y"])
    assert str(info.value).startswith(message)


def test_python_numbers_that_fit_are_converted(registry: Registry) -> None:
    take = (
        op("Opm>Take")
        .input("x: int32")
        .input("scale: float")
        .input("y: T")
        .output("out: float")
        .attr("T: {int32, int64}")
        .build()
    )

    @kernel("Opm>Take")
    def impl(x: Any, scale: Any, y: Any) -> Any:
        assert (x.dtype, y.dtype) == (np.int32, np.int32)
        return (x * scale * y).astype(np.float32)

    registry.register(take, impl)
    out = opmarket.ops.take([1.0, 2.0], [0.1, 3], [2.0, 1.0])
    assert out.tolist() == pytest.approx([0.2, 6.0])


def test_a_type_attr_given_as_a_number_reaches_the_kernel_as_a_dtype(registry: Registry) -> None:
    cast = (
        op("Opm>Cast")
        .input("x: SrcT")
        .output("y: DstT")
        .attr("SrcT: type")
        .attr("DstT: type")
        .build()
    )

    @kernel("Opm>Cast")
    def impl(x: Any, *, DstT: Any) -> Any:  # noqa: N803  # TensorFlow's attr name
        return x.astype(DstT.numpy)

    registry.register(cast, impl)
    x = np.array([1.5, 2.5], np.float32)
    assert opmarket.ops.cast(x, DstT=3).dtype == np.int32  # DT_INT32, as TensorFlow numbers it
    assert opmarket.ops.cast(x, DstT=2).dtype == np.float64  # DT_DOUBLE
    with pytest.raises(InvalidArgumentError, match="attr 'DstT': expected a dtype"):
        opmarket.ops.cast(x, DstT=True)
    with pytest.raises(InvalidArgumentError, match="attr 'DstT': 999 is not a valid dtype number"):
        opmarket.ops.cast(x, DstT=999)


def test_docstring_shows_shape_defaults_readably(registry: Registry) -> None:
    registry.register(
        op("Opm>Shaped")
        .output("y: float")
        .attr("s: shape = { dim { size: 2 } dim { size: -1 } }")
        .attr("u: shape = { unknown_rank: true }")
        .build()
    )
    doc = opmarket.ops.shaped.__doc__ or ""
    assert "s: shape, default [2,?]." in doc
    assert "u: shape, default <unknown>." in doc
