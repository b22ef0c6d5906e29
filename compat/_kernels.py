"""Which (device, dtypes) an op has kernels for, so a release can be checked for losses."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import product

from opmarket.sdk import DType, KernelDef, OpDef

__all__ = ["ANY_OTHER", "Combo", "coverage", "describe_combo"]

#: Stands for every dtype that no kernel names, for attrs the op does not restrict.
ANY_OTHER = "*"

#: A device and one dtype per constrained type attr (sorted by attr name).
Combo = tuple[str, tuple[tuple[str, str], ...]]


def _domains(
    ops: Sequence[OpDef], kernel_sets: Iterable[Sequence[KernelDef]]
) -> dict[str, tuple[str, ...]]:
    named: dict[str, set[str]] = {}
    for kernels in kernel_sets:
        for k in kernels:
            for attr, dtypes in k.constraints:
                named.setdefault(attr, set()).update(t.spec_name for t in dtypes)
    out: dict[str, tuple[str, ...]] = {}
    for attr, types in sorted(named.items()):
        defs = [op.attr(attr) for op in ops]
        if all(a is not None and a.allowed_values is not None for a in defs):
            allowed = {
                DType(t).spec_name
                for a in defs
                if a is not None and a.allowed_values is not None
                for t in a.allowed_values
                if t in DType._value2member_map_
            }
            out[attr] = tuple(sorted(allowed))
        else:
            out[attr] = (*sorted(types), ANY_OTHER)
    return out


def coverage(
    ops: Sequence[OpDef], kernels: Sequence[KernelDef], both: Iterable[Sequence[KernelDef]]
) -> set[Combo]:
    """Every (device, dtypes) that ``kernels`` serve.

    ``ops`` are the op's definitions and ``both`` the kernel lists being compared, so that
    each side enumerates the same attrs and dtypes; an unconstrained attr covers them all.
    """
    domains = _domains(ops, both)
    attrs = list(domains)
    out: set[Combo] = set()
    for k in kernels:
        choices: list[tuple[str, ...]] = []
        for attr in attrs:
            constraint = k.constraint(attr)
            if constraint is None:
                choices.append(domains[attr])
            else:
                names = {t.spec_name for t in constraint}
                choices.append(tuple(t for t in domains[attr] if t in names))
        for combo in product(*choices):
            out.add((k.device, tuple(zip(attrs, combo, strict=True))))
    return out


def describe_combo(combo: Combo) -> str:
    """``CPU with T=float`` / ``GPU`` (no type attrs)."""
    device, types = combo
    if not types:
        return device
    shown = ", ".join(f"{a}=" + ("(other types)" if t == ANY_OTHER else t) for a, t in types)
    return f"{device} with {shown}"
