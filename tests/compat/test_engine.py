"""The engine: op-set comparison, kernels known or not, ordering."""

from __future__ import annotations

from opmarket.compat import compare_ops, compare_opsets
from opmarket.sdk import DType, KernelDef, OpSet, op

A = op("A").input("x: T").output("y: T").attr("T: {float, int32}").build()
B = op("B").output("y: float").build()
C = op("C").output("y: int32").build()


def _kernel(name: str, device: str, *types: DType) -> KernelDef:
    return KernelDef(name, device, (("T", types),) if types else ())


def test_order_is_old_ops_then_removed_then_added() -> None:
    a2 = op("A").input("x: T").output("y: T").attr("T: {float, int32}").attr("k: int = 1").build()
    findings = compare_opsets(OpSet.of([A, B]), OpSet.of([a2, C]))
    assert [(f.op, f.rule) for f in findings] == [
        ("A", "attr-added"),
        ("B", "op-removed"),
        ("C", "op-added"),
    ]


def test_unchanged_op_sets_have_no_findings() -> None:
    opset = OpSet.of([A, B], [_kernel("A", "CPU", DType.FLOAT)])
    assert compare_opsets(opset, opset) == []


def test_kernels_compared_only_when_both_sides_list_them() -> None:
    old = OpSet.of([A], [_kernel("A", "CPU", DType.FLOAT), _kernel("A", "GPU", DType.FLOAT)])
    pbtxt_like = OpSet.of([A])  # a TensorFlow text file: kernels unknown
    assert compare_opsets(old, pbtxt_like) == []
    gone = compare_opsets(old, pbtxt_like, new_kernels_known=True)
    assert [(f.rule, f.message) for f in gone] == [
        ("kernel-removed", "no kernel any more for CPU with T=float; GPU with T=float")
    ]


def test_unconstrained_kernel_covers_every_allowed_type() -> None:
    old = [_kernel("A", "CPU")]
    new = [_kernel("A", "CPU", DType.FLOAT)]
    (finding,) = compare_ops(A, A, old, new)
    assert finding.rule == "kernel-removed"
    assert finding.message == "no kernel any more for CPU with T=int32"
    assert compare_ops(A, A, new, old)[0].rule == "kernel-added"


def test_kernels_for_an_unrestricted_attr_use_other_types() -> None:
    t_any = op("A").input("x: T").output("y: T").attr("T: type").build()
    (finding,) = compare_ops(t_any, t_any, [_kernel("A", "CPU")], [_kernel("A", "CPU", DType.HALF)])
    assert finding.message == "no kernel any more for CPU with T=(other types)"


def test_moving_a_type_between_kernels_loses_nothing() -> None:
    old = [_kernel("A", "CPU", DType.FLOAT, DType.INT32)]
    new = [_kernel("A", "CPU", DType.FLOAT), _kernel("A", "CPU", DType.INT32)]
    assert compare_ops(A, A, old, new) == []


def test_kernel_without_type_attrs() -> None:
    both, cpu = [_kernel("B", "CPU"), _kernel("B", "GPU")], [_kernel("B", "CPU")]
    (finding,) = compare_ops(B, B, both, cpu)
    assert finding.message == "no kernel any more for GPU"


def test_removed_op_with_kernels_is_one_finding() -> None:
    old = OpSet.of([A], [_kernel("A", "CPU", DType.FLOAT)])
    new = OpSet.of([B], [_kernel("B", "CPU")])
    assert [f.rule for f in compare_opsets(old, new)] == ["op-removed", "op-added"]
