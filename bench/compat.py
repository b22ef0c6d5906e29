"""Benchmark the compatibility engine on TensorFlow-sized op-sets.

Two op-sets of 2,400 ops (TensorFlow 2.21 registers 1,734) with a change in every op, cycling
through the kinds of change the rule table knows, compatible and breaking. The baseline,
measured in the same run, is Python's own ``==`` over the same op pairs: the least any
comparison must do.

    python bench/compat.py [--ops N] [--repeat R]

The last line is ``compat: X ms for N op pairs (Y pairs/s)``; the target is under 200 ms.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from dataclasses import replace

from opmarket.compat import Severity, compare_opsets
from opmarket.sdk import ArgDef, AttrDef, DType, OpDef, OpSet, op

_TYPES = ("float", "double", "int32", "int64", "half", "bfloat16", "uint8", "bool")


def _template(i: int) -> OpDef:
    """An op shaped like a typical TensorFlow op, varied by ``i``."""
    t = _TYPES[i % len(_TYPES)]
    b = op(f"Bench{i}")
    b.attr(f"T: {{{t}, int32, int64}} = DT_INT32" if i % 3 else "T: type")
    if i % 2:
        b.attr("N: int >= 1").input("values: N * T")
    else:
        b.input("x: T").input(f"y: {t}")
    if i % 4 == 0:
        b.attr("padding: {'SAME', 'VALID'} = 'SAME'").attr("strides: list(int) = [1, 1]")
    if i % 5 == 0:
        b.attr("keep_dims: bool = false").attr("alpha: float = 0.2")
    if i % 7 == 0:
        b.attr("shape: shape = { unknown_rank: true }").output("handle: resource")
    b.output("z: T")
    if i % 11 == 0:
        b.stateful()
    return b.build()


def _add_attr(o: OpDef) -> OpDef:
    return o.replace(attrs=(*o.attrs, AttrDef("added", "int", default=1)))


def _add_attr_no_default(o: OpDef) -> OpDef:
    return o.replace(attrs=(*o.attrs, AttrDef("added", "string")))


def _narrow_t(o: OpDef) -> OpDef:
    return o.replace(
        attrs=tuple(
            replace(a, allowed_values=(DType.FLOAT,)) if a.name == "T" else a for a in o.attrs
        )
    )


def _change_default(o: OpDef) -> OpDef:
    return o.replace(
        attrs=tuple(
            replace(a, default=DType.FLOAT) if a.name == "T" and a.default is not None else a
            for a in o.attrs
        )
    )


def _rename_input(o: OpDef) -> OpDef:
    return o.replace(inputs=tuple(replace(a, name=a.name + "_in") for a in o.inputs))


def _rename_output(o: OpDef) -> OpDef:
    return o.replace(outputs=tuple(replace(a, name=a.name + "_out") for a in o.outputs))


def _list_input(o: OpDef) -> OpDef:
    return o.replace(
        attrs=(*o.attrs, AttrDef("M", "int", default=0, has_minimum=True)),
        inputs=(*o.inputs, ArgDef("extra", type=DType.FLOAT, number_attr="M")),
    )


def _flip_stateful(o: OpDef) -> OpDef:
    return o.replace(is_stateful=not o.is_stateful)


def _retype_output(o: OpDef) -> OpDef:
    return o.replace(outputs=(*o.outputs[:-1], ArgDef("z", type=DType.DOUBLE)))


CHANGES: tuple[Callable[[OpDef], OpDef], ...] = (
    _add_attr,
    _add_attr_no_default,
    _narrow_t,
    _change_default,
    _rename_input,
    _rename_output,
    _list_input,
    _flip_stateful,
    _retype_output,
)


def opsets(n: int) -> tuple[OpSet, OpSet]:
    """The old op-set and the new one, every op changed."""
    old = [_template(i) for i in range(n)]
    new = [CHANGES[i % len(CHANGES)](o) for i, o in enumerate(old)]
    return OpSet.of(old, name="bench", version="1.0.0"), OpSet.of(new, name="bench")


def _time(fn: Callable[[], object], repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2400)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    old, new = opsets(args.ops)
    pairs = list(zip(old, new, strict=True))
    findings = compare_opsets(old, new)
    breaking = {f.op for f in findings if f.severity is Severity.BREAKING}

    baseline = _time(lambda: [a == b for a, b in pairs], args.repeat)
    engine = _time(lambda: compare_opsets(old, new), args.repeat)
    n = len(pairs)
    print(
        f"op-sets: {n} ops each, every op changed; {len(findings)} findings, "
        f"{len(breaking)} ops breaking"
    )
    print(f"baseline (== on every pair): {baseline * 1e3:.1f} ms")
    print(f"engine / baseline: {engine / baseline:.1f}x")
    print(f"compat: {engine * 1e3:.1f} ms for {n} op pairs ({n / engine:,.0f} pairs/s)")


if __name__ == "__main__":
    main()
