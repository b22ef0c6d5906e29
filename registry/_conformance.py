"""Conformance: every kernel of an op against the op's numpy reference on generated inputs,
per device and dtype (what plugin tests and the marketplace's validation run)."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opmarket.registry._binding import dtype_of
from opmarket.registry._registry import Registry
from opmarket.registry._runtime import registry_or_default
from opmarket.sdk import DType, NotFoundError, UnknownDTypeError
from opmarket.sdk._kernel import KernelSpec

__all__ = [
    "ConformanceReport",
    "ConformanceResult",
    "ConformanceStatus",
    "Sample",
    "check_conformance",
    "check_kernel",
    "compare_outputs",
    "generated_samples",
    "type_bindings",
]

# (rtol, atol) by dtype; anything not listed must match exactly.
_TOLERANCE: dict[DType, tuple[float, float]] = {
    DType.HALF: (1e-3, 1e-3),
    DType.BFLOAT16: (1e-2, 1e-2),
    DType.FLOAT: (1e-5, 1e-6),
    DType.DOUBLE: (1e-10, 1e-12),
    DType.COMPLEX64: (1e-5, 1e-6),
    DType.COMPLEX128: (1e-10, 1e-12),
}


class ConformanceStatus(enum.StrEnum):
    """How a check went: passed, failed, or skipped (not applicable; its message says why).
    Conformance results and ``opcheck``'s (``OpCheckStatus``) use this one enum."""

    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


@dataclass(frozen=True, slots=True)
class ConformanceResult:
    """One kernel on one dtype binding, and how it did."""

    op: str
    kernel: str
    device: str
    types: tuple[tuple[str, str], ...]
    status: ConformanceStatus
    message: str = ""

    def __str__(self) -> str:
        types = ", ".join(f"{k}={v}" for k, v in self.types) or "-"
        tail = f": {self.message}" if self.message else ""
        return f"{self.status:7} {self.op} {self.device} {types} ({self.kernel}){tail}"


@dataclass(frozen=True, slots=True)
class ConformanceReport:
    """Every result; ``ok`` when none failed."""

    results: tuple[ConformanceResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when no result failed; skipped results do not count against it."""
        return all(r.status is not ConformanceStatus.FAILED for r in self.results)

    @property
    def failures(self) -> tuple[ConformanceResult, ...]:
        """The results that failed, in the order they were checked."""
        return tuple(r for r in self.results if r.status is ConformanceStatus.FAILED)

    def __str__(self) -> str:
        return "\n".join(str(r) for r in self.results) or "no kernels checked"

    def raise_for_failures(self) -> None:
        """AssertionError listing every failure (for tests)."""
        if not self.ok:
            raise AssertionError("conformance failed:\n" + "\n".join(str(r) for r in self.failures))


def type_bindings(spec: KernelSpec, registry: Registry) -> list[dict[str, DType]]:
    """Every binding of the op's type attrs the kernel supports (its constraints within the
    op's allowed values; an unconstrained attr takes its default, else float)."""
    op = registry.op_def(spec.op)
    if op is None:
        raise NotFoundError(f"kernel {spec.name!r} is for op {spec.op!r}, which is not registered")
    names: list[str] = []
    choices: list[tuple[DType, ...]] = []
    for attr in op.attrs:
        if attr.type != "type":
            continue
        allowed = (
            spec.constraint(attr.name)
            or attr.allowed_values
            or ((attr.default,) if attr.default is not None else (DType.FLOAT,))
        )
        names.append(attr.name)
        choices.append(
            tuple(t for t in allowed if attr.allowed_values is None or t in attr.allowed_values)
        )
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*choices)]


@dataclass(frozen=True, slots=True)
class Sample:
    """One call to check: a type binding, the op's inputs and its other attrs; ``label``
    (``trial 1``) is what a failure on it says, empty for inputs a caller gave."""

    types: dict[str, DType]
    inputs: list[Any]
    attrs: dict[str, Any]
    label: str = ""


def generated_samples(
    registry: Registry, spec: KernelSpec, types: dict[str, DType], *, trials: int, seed: int
) -> list[Sample]:
    """``trials`` samples for the kernel's binding ``types`` from the op's input generator,
    reproducible from ``seed`` (none without a generator); raises what the generator raises."""
    gen = registry.input_generator(spec.op)
    if gen is None:
        return []
    out: list[Sample] = []
    for trial in range(trials):
        inputs, attrs = gen.fn(np.random.default_rng([seed, trial]), dict(types))
        out.append(Sample(types, list(inputs), dict(attrs), f"trial {trial}"))
    return out


def compare_outputs(got: Any, want: Any) -> str | None:
    """What differs between a kernel's outputs and the reference's (tolerances by dtype:
    floating point within them, everything else exactly), or None when they agree."""
    got_items = got if isinstance(got, (tuple, list)) else (got,)
    want_items = want if isinstance(want, (tuple, list)) else (want,)
    if len(got_items) != len(want_items):
        return f"{len(got_items)} outputs, reference has {len(want_items)}"
    for i, (got_i, want_i) in enumerate(zip(got_items, want_items, strict=True)):
        if isinstance(want_i, (tuple, list)):
            problem = compare_outputs(got_i, want_i)
            if problem:
                return f"output {i}: {problem}"
            continue
        g, w = np.asarray(got_i), np.asarray(want_i)
        if g.shape != w.shape:
            return f"output {i} has shape {g.shape}, reference {w.shape}"
        if g.dtype.kind in "fc":
            try:
                rtol, atol = _TOLERANCE.get(dtype_of(g), (1e-5, 1e-6))
            except UnknownDTypeError:
                rtol, atol = 1e-5, 1e-6
            close = np.allclose(
                g.astype(np.complex128 if g.dtype.kind == "c" else np.float64),
                w.astype(np.complex128 if w.dtype.kind == "c" else np.float64),
                rtol=rtol,
                atol=atol,
                equal_nan=True,
            )
        else:
            close = bool(np.array_equal(g, w))
        if not close:
            diff = np.argwhere(np.asarray(g != w).reshape(g.shape) if g.shape else np.array([True]))
            where = tuple(int(v) for v in diff[0]) if len(diff) else ()
            return (
                f"output {i} differs from the reference at {where}: "
                f"{g[where] if g.shape else g} vs {w[where] if w.shape else w}"
            )
    return None


def check_conformance(
    ops: str | Sequence[str] | None = None,
    *,
    registry: Registry | None = None,
    trials: int = 3,
    seed: int = 0,
    devices: Sequence[str] | None = None,
) -> ConformanceReport:
    """Run every kernel of ``ops`` (default: every op with a reference) against the op's
    reference on inputs from its input generator, for each dtype binding the kernel
    supports; ``trials`` inputs per binding, reproducible from ``seed``."""
    reg = registry_or_default(registry)
    if ops is None:
        names = [o.name for o in reg if reg.reference(o.name) is not None]
    else:
        names = [ops] if isinstance(ops, str) else list(ops)
    results: list[ConformanceResult] = []
    for name in names:
        ref, gen = reg.reference(name), reg.input_generator(name)
        kernels = [k for k in reg.kernels(name) if devices is None or k.device in devices]
        for spec in kernels:
            for types in type_bindings(spec, reg):
                if ref is None or gen is None:
                    missing = "reference" if ref is None else "input generator"
                    results.append(
                        _result(spec, types, ConformanceStatus.SKIPPED, f"the op has no {missing}")
                    )
                    continue
                try:
                    samples = generated_samples(reg, spec, types, trials=trials, seed=seed)
                except Exception as exc:
                    results.append(
                        _result(
                            spec, types, ConformanceStatus.FAILED, f"input generator raised {exc!r}"
                        )
                    )
                    continue
                results.append(check_kernel(reg, spec, types, samples, ref.fn))
    return ConformanceReport(tuple(results))


def _result(
    spec: KernelSpec, types: dict[str, DType], status: ConformanceStatus, message: str = ""
) -> ConformanceResult:
    shown = tuple((k, v.spec_name) for k, v in types.items())
    return ConformanceResult(spec.op, spec.name, spec.device, shown, status, message)


def check_kernel(
    registry: Registry,
    spec: KernelSpec,
    types: dict[str, DType],
    samples: Sequence[Sample],
    reference: Callable[..., Any],
) -> ConformanceResult:
    """Call the kernel (through dispatch, with the binding ``types``) and ``reference`` on
    each sample: failed at the first sample where either raises or they differ."""
    dispatcher = registry.dispatcher(spec.op)
    for s in samples:
        where = f" ({s.label})" if s.label else ""
        try:
            want = reference(*s.inputs, **s.attrs)
        except Exception as exc:
            return _result(
                spec, types, ConformanceStatus.FAILED, f"reference raised {exc!r}{where}"
            )
        try:
            got = dispatcher.call(
                s.inputs, {**types, **s.attrs}, device=spec.device, label=spec.label, kernel=spec
            )
        except Exception as exc:
            return _result(spec, types, ConformanceStatus.FAILED, f"kernel raised {exc!r}{where}")
        problem = compare_outputs(got, want)
        if problem is not None:
            return _result(spec, types, ConformanceStatus.FAILED, f"{problem}{where}")
    return _result(spec, types, ConformanceStatus.PASSED)
