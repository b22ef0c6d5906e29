"""opmarket.torch with the real PyTorch (CPU): every first-party op as torch.ops.opm.*,
opcheck, autograd, torch.compile (once per session), schemas, zero copy, errors."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import opmarket  # noqa: E402
import opmarket.torch as ot  # noqa: E402
from opmarket.registry import get_registry, isolated_registry  # noqa: E402
from opmarket.sdk import NotFoundError, kernel, op, shape_fn, unchanged  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

from .conftest import CASES, Case, expected  # noqa: E402

pytestmark = needs_first_party

_TORCH_DTYPES = {
    np.dtype(np.int32): torch.int32,
    np.dtype(np.uint8): torch.uint8,
    np.dtype(np.int8): torch.int8,
    np.dtype(np.float32): torch.float32,
}


def _kwargs(case: Case) -> dict[str, Any]:
    return {
        k: _TORCH_DTYPES.get(v, v) if isinstance(v, np.dtype) else v for k, v in case.attrs.items()
    }


def _packet(name: str) -> Any:
    op_def = get_registry().op_def(name)
    assert op_def is not None
    return getattr(torch.ops.opm, op_def.python_name)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_torch_ops_match_opmarket_ops(case: Case) -> None:
    inputs = [torch.from_numpy(x) for x in case.inputs()]
    packet = _packet(case.op)
    fn = getattr(packet, case.label) if case.label else packet  # a label is an overload
    got = fn(*inputs, **_kwargs(case))
    want = expected(case)
    assert got.numpy().dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)


def test_opmarket_torch_ops_are_the_torch_ops() -> None:
    assert ot.ops.zero_out is torch.ops.opm.zero_out
    assert ot.ops["Opm>Atan"] is ot.ops.opm.atan is torch.ops.opm.atan


def test_schemas_follow_the_opdef() -> None:
    assert str(torch.ops.opm.zero_out.default._schema) == (
        "opm::zero_out(Tensor to_zero, *, int preserve_index=0) -> Tensor"
    )
    assert str(torch.ops.opm.zero_out.c_abi._schema) == (
        "opm::zero_out.c_abi(Tensor to_zero, *, int preserve_index=0) -> Tensor"
    )
    assert str(torch.ops.opm.bitcast.default._schema) == (
        "opm::bitcast(Tensor input, *, ScalarType type) -> Tensor"
    )
    assert str(torch.ops.opm.atan.default._schema) == "opm::atan(Tensor x) -> Tensor"
    assert "int[] ksize, int[] strides, str padding" in str(
        torch.ops.opm.median_pool.default._schema
    )


def test_atan_autograd_is_one_over_one_plus_x_squared() -> None:
    x = torch.linspace(-3, 3, 7, dtype=torch.float64, requires_grad=True)
    torch.ops.opm.atan(x).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, 1 / (1 + x.detach() ** 2))
    assert torch.autograd.gradcheck(torch.ops.opm.atan, (x.detach().requires_grad_(),))


def _sample(name: str) -> tuple[list[Any], dict[str, Any]]:
    """The op's own input generator's first sample, as tensors and torch keyword values."""
    from opmarket.sdk import DType

    reg = get_registry()
    gen = reg.input_generator(name)
    op_def = reg.op_def(name)
    assert gen is not None and op_def is not None
    types: dict[str, DType] = {}
    for a in op_def.attrs:
        if a.type == "type":
            allowed = a.allowed_values or (DType.FLOAT,)
            types[a.name] = DType.FLOAT if DType.FLOAT in allowed else allowed[0]
    if name == "Opm>Bitcast":
        types["type"] = DType.UINT8
    arrays, attrs = gen.fn(np.random.default_rng(1), types)
    tensors = [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    tensors = [t.requires_grad_() if t.is_floating_point() else t for t in tensors]
    kwargs = {k: (torch.uint8 if isinstance(v, DType) else v) for k, v in attrs.items()}
    return tensors, kwargs


FIRST_PARTY = [
    "Opm>ZeroOut",
    "Opm>TimeTwo",
    "Opm>Atan",
    "Opm>MedianPool",
    "Opm>Bitcast",
    "Opm>DoCustomCall",
]


@pytest.mark.parametrize("name", FIRST_PARTY)
def test_opcheck_passes_for_every_first_party_op(name: str) -> None:
    tensors, kwargs = _sample(name)
    result = torch.library.opcheck(_packet(name).default, tuple(tensors), kwargs)
    assert set(result.values()) == {"SUCCESS"}, result


def test_opcheck_passes_for_the_c_abi_kernel() -> None:
    x = torch.randn(9, requires_grad=True)
    result = torch.library.opcheck(torch.ops.opm.zero_out.c_abi, (x,), {"preserve_index": 4})
    assert set(result.values()) == {"SUCCESS"}, result


def test_every_installed_op_is_registered_with_torch() -> None:
    names = ot.register_all()
    assert set(FIRST_PARTY) <= set(names)
    assert not {"Const", "Placeholder", "NoOp", "Identity", "AddN"} & set(names)
    with pytest.raises(NotFoundError, match="built-in graph ops"):
        _ = ot.ops.add_n


@pytest.mark.slow
# Inductor imports a module of torch's own that uses its deprecated torch.jit.script_method.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_gives_the_eager_result() -> None:
    def f(x: Any) -> Any:
        z = torch.ops.opm.zero_out.c_abi(x * 2, preserve_index=1)
        return torch.ops.opm.atan(z + x) * 3

    compiled = torch.compile(f, fullgraph=True)  # once per session: slow on 2 cores
    x = torch.tensor([5.0, 4.0, 3.0, -1.0])
    torch.testing.assert_close(compiled(x), f(x))
    x2 = torch.linspace(-1, 1, 4)
    torch.testing.assert_close(compiled(x2), f(x2))


def test_kernel_errors_and_bad_attrs_are_value_errors() -> None:
    # A native kernel's failure comes through torch: a ValueError with the kernel's message
    # (docs/frameworks.md); the Python path's is opmarket's InvalidArgumentError, a ValueError.
    with pytest.raises(ValueError, match="preserve_index out of range"):
        torch.ops.opm.zero_out.c_abi(torch.ones(2), preserve_index=5)
    with pytest.raises(ValueError, match=r"rank 1|1-D"):
        torch.ops.opm.zero_out(torch.ones(2, 2))
    with pytest.raises(ValueError, match="padding"):
        torch.ops.opm.median_pool(
            torch.ones(1, 3, 3, 1), ksize=[1, 2, 2, 1], strides=[1, 1, 1, 1], padding="FULL"
        )


PROBE = op("BridgeTest>TorchProbe").input("x: float").output("y: float").build()


def test_a_contiguous_cpu_tensor_reaches_the_kernel_without_a_copy() -> None:
    seen: list[int] = []
    made: list[int] = []

    @kernel("BridgeTest>TorchProbe")
    def probe(x: Any) -> Any:
        seen.append(x.ctypes.data)
        out = x * 2
        made.append(out.ctypes.data)
        return out

    with isolated_registry():
        opmarket.register(PROBE, probe, shape_fn("BridgeTest>TorchProbe", unchanged))
        t = torch.arange(64, dtype=torch.float32)
        out = ot.ops.torch_probe(t)
        assert seen == [t.data_ptr()]  # the kernel read the tensor's own storage
        assert made == [out.data_ptr()]  # and the result is the kernel's array
        torch.testing.assert_close(out, t * 2)


def test_import_opmarket_stays_light_and_a_missing_torch_names_the_extra() -> None:
    code = (
        "import sys, opmarket; opmarket.ops.zero_out; "
        "assert 'torch' not in sys.modules, 'heavy'; sys.modules['torch'] = None\n"
        "try:\n import opmarket.torch\nexcept ImportError as e:\n print(e)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'opmarket[torch]'" in done.stdout


def test_a_device_without_a_kernel_is_a_clear_error() -> None:
    # No CUDA here: the rule a CUDA tensor meets, asked directly for the GPU.
    from opmarket._bridge import bridge_op
    from opmarket.registry import KernelNotFoundError
    from opmarket.torch._ops import _Call

    call = _Call(bridge_op("Opm>Atan"))
    with pytest.raises(KernelNotFoundError, match=r"Opm>Atan has no GPU kernel(.|\n)*CPU"):
        call.prepared([torch.ones(2)], {}, "GPU", "")


_POOL = {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"}


def _odd_inputs() -> list[tuple[str, str, tuple[Any, ...], dict[str, Any]]]:
    """(op, which, inputs, attrs): 0-d, empty and non-contiguous inputs of every first-party
    op (where the op takes them: ZeroOut and DoCustomCall take vectors, MedianPool NHWC)."""
    r = torch.randn
    cases = []
    for name in ("atan", "time_two"):
        cases += [
            (name, "0d", (torch.tensor(0.5),), {}),
            (name, "empty", (r(0, 3),), {}),
            (name, "noncontiguous", (r(4, 3).t(),), {}),
        ]
    cases += [
        ("zero_out", "noncontiguous", (r(8)[::2],), {"preserve_index": 1}),
        ("zero_out.c_abi", "noncontiguous", (r(8)[::2],), {"preserve_index": 1}),
        # NCHW permuted to NHWC, as a model that keeps NCHW feeds it
        ("median_pool", "noncontiguous", (r(1, 2, 6, 5).permute(0, 2, 3, 1),), _POOL),
        ("median_pool", "empty", (r(0, 6, 5, 2),), _POOL),
        ("bitcast", "0d", (torch.tensor(0.5),), {"type": torch.int32}),
        ("bitcast", "empty", (r(0, 2),), {"type": torch.uint8}),
        ("bitcast", "noncontiguous", (r(3, 2).t(),), {"type": torch.int32}),
        ("do_custom_call", "noncontiguous", (r(8)[::2], r(12)[::3]), {}),
        ("do_custom_call", "empty", (r(3), r(0)), {}),
    ]
    return cases


@pytest.mark.parametrize(
    ("name", "which", "inputs", "attrs"),
    _odd_inputs(),
    ids=[f"{c[0]}-{c[1]}" for c in _odd_inputs()],
)
def test_opcheck_with_every_test_util_on_odd_inputs_forward_and_backward_ops(
    name: str, which: str, inputs: tuple[Any, ...], attrs: dict[str, Any]
) -> None:
    # torch.library.opcheck runs all its default test utils (schema, autograd registration,
    # fake tensor, AOT dispatch) unless told otherwise.
    name, _, overload = name.partition(".")
    forward = getattr(getattr(torch.ops.opm, name), overload or "default")
    xs = tuple(x.requires_grad_() if x.is_floating_point() else x for x in inputs)
    result = torch.library.opcheck(forward, xs, attrs)
    assert set(result.values()) == {"SUCCESS"}, result
    backward = getattr(torch.ops.opm, f"{name}_opm_backward", None)
    if backward is None:  # not differentiable
        return
    plain = tuple(x.detach() for x in inputs)
    outs = forward(*plain, **attrs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    grads = tuple(torch.ones_like(o) for o in outs)
    result = torch.library.opcheck(backward.default, (*plain, *outs, *grads), attrs)
    assert set(result.values()) == {"SUCCESS"}, result
    got = backward(*plain, *outs, *grads, **attrs)
    for g, x in zip(got, plain, strict=True):  # the input's layout, as torch's own gradients
        assert g.shape == x.shape and g.stride() == torch.empty_like(x).stride()


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_backward_on_a_permuted_image_and_a_0d_input() -> None:
    def loss(nhwc: Any, s: Any) -> Any:
        return torch.ops.opm.median_pool(nhwc, **_POOL).sum() * torch.ops.opm.atan(s)

    compiled = torch.compile(loss, fullgraph=True)
    # NCHW memory seen as NHWC, as a model that keeps NCHW feeds MedianPool (a leaf, so that
    # dynamo reads no non-leaf .grad)
    nhwc = torch.randn(1, 2, 6, 5).permute(0, 2, 3, 1).requires_grad_()
    s = torch.tensor(0.5, requires_grad=True)
    want = torch.autograd.grad(loss(nhwc, s), (nhwc, s))
    got = torch.autograd.grad(compiled(nhwc, s), (nhwc, s))
    assert got[1].shape == ()
    torch.testing.assert_close(got, want)


def test_second_order_gradients_fail_as_docs_frameworks_md_says() -> None:
    x = torch.tensor([0.5, 1.0], dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="no autograd formula was registered"):
        torch.autograd.gradgradcheck(torch.ops.opm.atan, (x,))
