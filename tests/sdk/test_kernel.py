from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from opmarket.sdk import DType, Kernel, KernelSpec, kernel
from opmarket.sdk._kernel import declarations


def test_function_kernel_declaration() -> None:
    @kernel(
        "Opm>ZeroOut",
        constraints={"T": [np.int32, "float", "DT_DOUBLE"]},
        host_memory=["to_zero"],
        priority=3,
        label="fast",
    )
    def impl(x: Any, *, preserve_index: int) -> Any:
        return x

    (spec,) = declarations(impl)
    assert spec == KernelSpec(
        op="Opm>ZeroOut",
        impl=impl,
        device="CPU",
        constraints=(("T", (DType.FLOAT, DType.DOUBLE, DType.INT32)),),
        host_memory=("to_zero",),
        priority=3,
        label="fast",
        attr_names=("preserve_index",),
    )
    assert impl(1, preserve_index=0) == 1  # the function itself is unchanged
    assert spec.describe().startswith("CPU  T in {float, double, int32}  priority 3  label 'fast'")


def test_stacked_declarations_and_all_attrs() -> None:
    @kernel("Opm>A", device="gpu")
    @kernel("Opm>A")
    def impl(x: Any, **attrs: Any) -> Any:
        return x

    specs = declarations(impl)
    assert [s.device for s in specs] == ["CPU", "GPU"]
    assert specs[0].attr_names is None  # **attrs: every attr


def test_lifecycle_kernel_class() -> None:
    @kernel("Opm>A", options=b"\x01")
    class K(Kernel):
        def compute(self, x: Any) -> Any:
            return x + self.attrs["k"]

    (spec,) = declarations(K)
    assert spec.is_lifecycle and spec.options == b"\x01"

    class Sub(K):
        pass

    assert declarations(Sub) == []  # a subclass declares nothing by inheritance
    k = K({"k": 1})
    k.prepare(np.zeros(1))
    assert k.compute(1) == 2
    k.close()
    with pytest.raises(NotImplementedError):
        Kernel({}).compute()


def test_bad_targets() -> None:
    with pytest.raises(TypeError, match="decorates a function or Kernel subclass"):
        kernel("Opm>A")(42)
