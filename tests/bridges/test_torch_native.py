"""opmarket.torch's native path with the real PyTorch (CPU): C-ABI kernels registered as
boxed CPU kernels through torch's stable C ABI (the shim built on first use), checked
against opmarket.ops, torch's opcheck, autograd and torch.compile; kernels that cannot go
native keep the Python kernel and say why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import opmarket  # noqa: E402
import opmarket.torch as ot  # noqa: E402
from opmarket.registry import get_registry, isolated_registry  # noqa: E402
from opmarket.sdk import kernel, op, shape_fn, unchanged  # noqa: E402
from tests.first_party import needs_first_party  # noqa: E402

pytestmark = needs_first_party

# (op, overload, input, attrs): the first-party kernels with C-ABI entries
NATIVE = [
    ("Opm>ZeroOut", "", torch.tensor([5.0, 4.0, 3.0, 2.0]), {"preserve_index": 2}),
    ("Opm>ZeroOut", "c_abi", torch.arange(1, 9, dtype=torch.int32), {"preserve_index": 3}),
    ("Opm>TimeTwo", "", torch.arange(-3.0, 9.0).reshape(3, 4), {}),
    ("Opm>Bitcast", "", torch.tensor([1.5, -2.0]), {"type": torch.int32}),
    (  # list and string attrs
        "Opm>MedianPool",
        "",
        torch.arange(2 * 7 * 9 * 3, dtype=torch.float32).reshape(2, 7, 9, 3).sin(),
        {"ksize": [1, 3, 3, 1], "strides": [1, 2, 1, 1], "padding": "SAME"},
    ),
]
IDS = [f"{n}{'.' + label if label else ''}" for n, label, _, _ in NATIVE]


def _overload(name: str, label: str) -> Any:
    packet = ot.torch_op(name)
    return getattr(packet, label or "default")


def _reference(name: str, label: str, x: Any, attrs: dict[str, Any]) -> Any:
    """What opmarket.ops gives (the labelled kernel through the registry's dispatcher)."""
    kwargs = {
        k: np.dtype(str(v).removeprefix("torch.")) if isinstance(v, torch.dtype) else v
        for k, v in attrs.items()
    }
    return get_registry().dispatcher(name).call([x.numpy()], kwargs, label=label)


@pytest.mark.parametrize(("name", "label", "x", "attrs"), NATIVE, ids=IDS)
def test_c_abi_kernels_run_natively_and_match_opmarket_ops(
    name: str, label: str, x: Any, attrs: dict[str, Any]
) -> None:
    assert ot.native_reason(name, _kernel=label) == ""
    assert ot.native_path(name, _kernel=label) == "native"
    got = _overload(name, label)(x, **attrs)
    np.testing.assert_array_equal(got.numpy(), _reference(name, label, x, attrs))


@pytest.mark.parametrize(("name", "label", "x", "attrs"), NATIVE, ids=IDS)
def test_opcheck_passes_on_the_native_kernels(
    name: str, label: str, x: Any, attrs: dict[str, Any]
) -> None:
    x = x.clone().requires_grad_() if x.is_floating_point() and name != "Opm>Bitcast" else x
    result = torch.library.opcheck(_overload(name, label), (x,), attrs)
    assert set(result.values()) == {"SUCCESS"}, result


def test_each_attr_value_gets_its_own_kernel_state() -> None:
    x = torch.arange(1, 7, dtype=torch.int32)
    for i in (0, 5, 2, 5):
        want = torch.zeros_like(x)
        want[i] = x[i]
        torch.testing.assert_close(torch.ops.opm.zero_out.c_abi(x, preserve_index=i), want)
    image = torch.randn(1, 6, 6, 1)
    for strides, padding in [([1, 1, 1, 1], "VALID"), ([1, 2, 2, 1], "SAME")]:
        attrs = {"ksize": [1, 3, 3, 1], "strides": strides, "padding": padding}
        got = torch.ops.opm.median_pool(image, **attrs)
        np.testing.assert_array_equal(got.numpy(), _reference("Opm>MedianPool", "", image, attrs))


def test_a_non_contiguous_input_and_an_empty_one_reach_the_native_kernel() -> None:
    x = torch.arange(12.0).reshape(3, 4).t()
    torch.testing.assert_close(torch.ops.opm.time_two(x), x * 2)
    assert torch.ops.opm.time_two(torch.empty(0, 3)).shape == (0, 3)


def test_gradients_through_a_native_forward() -> None:
    x = torch.tensor([5.0, 4.0, 3.0, 2.0], requires_grad=True)
    torch.ops.opm.zero_out(x, preserve_index=1).sum().backward()
    assert x.grad is not None
    torch.testing.assert_close(x.grad, torch.tensor([0.0, 1.0, 0.0, 0.0]))
    y = torch.randn(5, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(torch.ops.opm.time_two, (y,))


def test_a_kernel_error_from_the_native_path_is_a_value_error_naming_the_kernel() -> None:
    with pytest.raises(ValueError, match="preserve_index"):
        torch.ops.opm.zero_out.c_abi(torch.ones(2, dtype=torch.int32), preserve_index=5)
    torch.ops.opm.zero_out.c_abi(torch.ones(2, dtype=torch.int32))  # and the op still runs


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_torch_compile_fullgraph_calls_the_native_kernels() -> None:
    def f(x: Any) -> Any:
        return torch.ops.opm.zero_out(torch.ops.opm.time_two(x) + 1, preserve_index=2)

    compiled = torch.compile(f, fullgraph=True)
    x = torch.tensor([5.0, 4.0, 3.0, -1.0])
    torch.testing.assert_close(compiled(x), torch.tensor([0.0, 0.0, 7.0, 0.0]))


def test_torch_export_keeps_the_native_ops_and_runs_them() -> None:
    class M(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.ops.opm.time_two(torch.ops.opm.zero_out.c_abi(x, preserve_index=1))

    x = torch.tensor([3, 4, 5], dtype=torch.int32)
    exported = torch.export.export(M(), (x,))
    targets = {str(n.target) for n in exported.graph.nodes if n.op == "call_function"}
    assert {"opm.zero_out.c_abi", "opm.time_two.default"} <= targets
    torch.testing.assert_close(exported.module()(x), torch.tensor([0, 8, 0], dtype=torch.int32))


def test_without_a_compiler_the_ops_run_through_python_and_say_why(tmp_path: Path) -> None:
    code = (
        "import torch, opmarket.torch as ot\n"
        "print(ot.native_path('Opm>ZeroOut', _kernel='c_abi'))\n"
        "print(ot.native_reason('Opm>ZeroOut', _kernel='c_abi'))\n"
        "print(torch.ops.opm.zero_out.c_abi(torch.ones(3), preserve_index=1).tolist())\n"
    )
    env = {
        **os.environ,
        "CXX": str(tmp_path / "no-such-c++"),
        "OPMARKET_CACHE_DIR": str(tmp_path / "cache"),
        # The install's shim would serve: this is the case of an install that has none.
        "OPMARKET_SHIPPED_SHIMS": "0",
    }
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    path, reason, result = done.stdout.splitlines()
    assert path == "python"
    assert "could not be built" in reason and "compiler" in reason
    assert result == "[0.0, 1.0, 0.0]"
    assert "building the PyTorch bridge's native shim" in done.stderr


PROBE = op("BridgeTest>TorchNativeProbe").input("x: float").output("y: float").build()


def test_a_kernel_that_cannot_go_native_runs_through_python_and_says_why() -> None:
    @kernel("BridgeTest>TorchNativeProbe")
    def probe(x: Any) -> Any:
        return x + 1

    with isolated_registry():
        opmarket.register(PROBE, probe, shape_fn("BridgeTest>TorchNativeProbe", unchanged))
        assert ot.native_path("BridgeTest>TorchNativeProbe") == "python"
        assert "not a C-ABI kernel" in ot.native_reason("BridgeTest>TorchNativeProbe")
        torch.testing.assert_close(ot.ops.torch_native_probe(torch.ones(3)), torch.full((3,), 2.0))
    assert ot.native_path("Opm>Atan") == "python"  # a Python lifecycle kernel
    assert "not a C-ABI kernel" in ot.native_reason("Opm>Atan")
    torch.testing.assert_close(torch.ops.opm.atan(torch.zeros(2)), torch.zeros(2))
