"""``opcheck``: one call that tests an op the way the marketplace and its users rely on it
(in the spirit of ``torch.library.opcheck``): every kernel against the reference, the shape
function against real output shapes, the gradient against central differences, and the
attr defaults of the spec, the kernels and the reference against one another."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from opmarket.registry._conformance import (
    ConformanceResult,
    ConformanceStatus,
    Sample,
    check_conformance,
    check_kernel,
    compare_outputs,
    generated_samples,
    type_bindings,
)
from opmarket.registry._dispatch import Dispatcher
from opmarket.registry._entry import Entry
from opmarket.registry._gradients import check_gradient
from opmarket.registry._namespace import ops_named
from opmarket.registry._registry import Registry
from opmarket.registry._runtime import registry_or_default
from opmarket.sdk import DType, NotFoundError, OpDef
from opmarket.sdk._kernel import KernelSpec

__all__ = ["CHECKS", "OpCheckError", "OpCheckReport", "OpCheckResult", "OpCheckStatus", "opcheck"]

#: The checks ``opcheck`` runs, in order.
CHECKS: tuple[str, ...] = ("conformance", "shape", "gradient", "defaults")

#: How one check went: conformance's own statuses (passed, failed, skipped), one enum.
OpCheckStatus = ConformanceStatus


@dataclass(frozen=True, slots=True)
class OpCheckResult:
    """One check on one subject (a kernel, the reference, the gradient)."""

    check: str
    subject: str
    status: OpCheckStatus
    message: str = ""

    def __str__(self) -> str:
        tail = f": {self.message}" if self.message else ""
        return f"{self.status:7} {self.check:11} {self.subject}{tail}"


class OpCheckError(AssertionError):
    """``opcheck`` found a failure; the message lists every failed check."""


@dataclass(frozen=True, slots=True)
class OpCheckReport:
    """Every result of one ``opcheck`` call; ``ok`` when none failed."""

    op: str
    results: tuple[OpCheckResult, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """True when no check failed (skipped ones do not count against it)."""
        return not self.failures

    @property
    def failures(self) -> tuple[OpCheckResult, ...]:
        """The failed results, in the order they were checked."""
        return tuple(r for r in self.results if r.status is OpCheckStatus.FAILED)

    def __str__(self) -> str:
        head = f"opcheck({self.op}): {len(self.failures)} of {len(self.results)} checks failed"
        return "\n".join([head, *(f"  {r}" for r in self.results)])

    def raise_for_failures(self) -> None:
        """OpCheckError (an AssertionError) listing every failure, then what passed."""
        if self.failures:
            lines = [
                f"opcheck({self.op}): {len(self.failures)} of {len(self.results)} checks failed",
                *(f"  {r}" for r in self.failures),
            ]
            raise OpCheckError("\n".join(lines))


def opcheck(
    op: str | OpDef,
    inputs: Sequence[Any] | None = None,
    attrs: Mapping[str, Any] | None = None,
    *,
    registry: Registry | None = None,
    checks: Sequence[str] = CHECKS,
    trials: int = 3,
    seed: int = 0,
    devices: Sequence[str] | None = None,
    gradient_tolerance: float = 1e-2,
    raise_on_failure: bool = True,
) -> OpCheckReport:
    """Check ``op`` (its full name, its short or snake name, or its OpDef) in ``registry``
    (default: the process's, which the ``opmarket_registry`` fixture swaps in).

    - ``conformance``: every kernel against the op's reference, per device and dtype;
    - ``shape``: the shape function's output shapes against what each kernel returns;
    - ``gradient``: the registered gradient against central differences (float inputs);
    - ``defaults``: each attr default written in the spec against the kernels' and the
      reference's own defaults: each is called with the attr left out and with the spec's
      default passed, and must give the same result; the report names the one that drifted.

    Inputs come from the op's input generator (``trials`` per dtype binding, reproducible
    from ``seed``), or are ``inputs`` and ``attrs`` when given. Returns the report; raises
    OpCheckError listing every failed check unless ``raise_on_failure`` is false.
    """
    unknown = sorted(set(checks) - set(CHECKS))
    if unknown:
        raise ValueError(f"unknown opcheck checks {unknown}; the checks are {list(CHECKS)}")
    reg = registry_or_default(registry)
    op_def = _resolve(op, reg)
    name = op_def.name
    dispatcher = reg.dispatcher(name)
    kernels = [k for k in reg.kernels(name) if devices is None or k.device in devices]
    results: list[OpCheckResult] = []
    if not kernels:
        results.append(_fail("kernels", name, "the op has no kernel" + _on(devices)))
    samples = {
        spec: _samples(reg, spec, inputs, attrs, dispatcher, trials=trials, seed=seed)
        for spec in kernels
    }
    for check in checks:
        if check == "conformance":
            results += _conformance(
                reg,
                name,
                kernels,
                samples,
                inputs=inputs,
                trials=trials,
                seed=seed,
                devices=devices,
            )
        elif check == "shape":
            results += _shapes(reg, dispatcher, samples)
        elif check == "gradient":
            results += _gradient(reg, name, samples, gradient_tolerance)
        else:
            results += _defaults(reg, dispatcher, samples)
    report = OpCheckReport(name, tuple(results))
    if raise_on_failure:
        report.raise_for_failures()
    return report


def _on(devices: Sequence[str] | None) -> str:
    return f" on {', '.join(devices)}" if devices else ""


def _fail(check: str, subject: str, message: str) -> OpCheckResult:
    return OpCheckResult(check, subject, OpCheckStatus.FAILED, message)


def _resolve(op: str | OpDef, reg: Registry) -> OpDef:
    if isinstance(op, OpDef):
        found = reg.op_def(op.name)
        if found is None:
            raise NotFoundError(f"op {op.name!r} is not registered in this registry")
        return found
    named = ops_named(reg, op)
    if len(named) == 1:
        return named[0]
    if named:
        names = ", ".join(o.name for o in named)
        raise NotFoundError(f"op name {op!r} is ambiguous: {names}; pass the full name")
    raise NotFoundError(
        f"no op {op!r} is registered; is the plugin under test installed and loaded "
        "(the opmarket_registry fixture loads it)?"
    )


def _short(name: str) -> str:
    """A kernel's name without its module path (``clip_kernel``, not ``pkg.mod.clip_kernel``)."""
    return name.rpartition(".")[2]


def _label(spec: KernelSpec, types: Mapping[str, DType]) -> str:
    return _subject(spec.name, spec.device, tuple((k, v.spec_name) for k, v in types.items()))


def _subject(kernel: str, device: str, types: tuple[tuple[str, str], ...]) -> str:
    shown = ", ".join(f"{k}={v}" for k, v in types)
    return f"{_short(kernel)} [{device}{', ' + shown if shown else ''}]"


def _result(r: ConformanceResult) -> OpCheckResult:
    return OpCheckResult("conformance", _subject(r.kernel, r.device, r.types), r.status, r.message)


def _samples(
    reg: Registry,
    spec: KernelSpec,
    inputs: Sequence[Any] | None,
    attrs: Mapping[str, Any] | None,
    dispatcher: Dispatcher,
    *,
    trials: int,
    seed: int,
) -> list[Sample]:
    if inputs is not None:
        _, full = dispatcher.bind(list(inputs), dict(attrs or {}))
        op_def = dispatcher.op_def
        types = {a.name: full[a.name] for a in op_def.attrs if a.type == "type"}
        if any(k in types and types[k] not in allowed for k, allowed in spec.constraints):
            return []
        return [Sample(types, list(inputs), dict(attrs or {}))]
    return [
        sample
        for types in type_bindings(spec, reg)
        for sample in generated_samples(reg, spec, types, trials=trials, seed=seed)
    ]


def _conformance(
    reg: Registry,
    name: str,
    kernels: list[KernelSpec],
    samples: Mapping[KernelSpec, list[Sample]],
    *,
    inputs: Sequence[Any] | None,
    trials: int,
    seed: int,
    devices: Sequence[str] | None,
) -> list[OpCheckResult]:
    if inputs is None:
        report = check_conformance(name, registry=reg, trials=trials, seed=seed, devices=devices)
        return [_result(r) for r in report.results]
    ref = reg.reference(name)
    if ref is None:
        return [
            OpCheckResult(
                "conformance", _label(spec, s.types), OpCheckStatus.SKIPPED, "no reference"
            )
            for spec in kernels
            for s in samples[spec]
        ]
    return [
        _result(check_kernel(reg, spec, s.types, [s], ref.fn))
        for spec in kernels
        for s in samples[spec]
    ]


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, (list, tuple)):
        return [leaf for item in value for leaf in _leaves(item)]
    return [value]


def _shapes(
    reg: Registry, dispatcher: Dispatcher, samples: Mapping[KernelSpec, list[Sample]]
) -> list[OpCheckResult]:
    name = dispatcher.op_def.name
    if reg.shape_fn(name) is None:
        return [
            OpCheckResult(
                "shape",
                name,
                OpCheckStatus.SKIPPED,
                "no shape function is registered (graphs get unknown output shapes)",
            )
        ]
    results: list[OpCheckResult] = []
    for spec, items in samples.items():
        by_binding: dict[str, OpCheckResult] = {}
        for s in items:
            subject = _label(spec, s.types)
            if subject in by_binding and by_binding[subject].status is OpCheckStatus.FAILED:
                continue
            problem = _shape_problem(dispatcher, spec, s.types, s.inputs, s.attrs)
            status = OpCheckStatus.FAILED if problem else OpCheckStatus.PASSED
            by_binding[subject] = OpCheckResult("shape", subject, status, problem or "")
        results.extend(by_binding.values())
    return results


def _shape_problem(
    dispatcher: Dispatcher,
    spec: KernelSpec,
    types: dict[str, DType],
    ins: list[Any],
    at: dict[str, Any],
) -> str | None:
    bound, full = dispatcher.bind(ins, {**types, **at})
    entry = Entry(dispatcher, spec, full)
    try:
        if entry.instance is not None:  # a lifecycle kernel: prepare, then compute
            entry.instance.prepare(*bound)
        got = [np.shape(v) for v in _leaves(entry.fn(*bound, **entry.kw))]
    except Exception as exc:
        return f"the kernel raised {exc!r}"
    finally:
        entry.close()
    in_shapes = [tuple(np.shape(v)) for v in _leaves(bound)]
    try:
        want = dispatcher.infer(list(in_shapes), full)
    except Exception as exc:
        return f"the shape function raised {exc!r} for input shapes {in_shapes}"
    assert want is not None
    if len(want) != len(got):
        return f"the shape function gives {len(want)} outputs, the kernel returned {len(got)}"
    for i, (w, g) in enumerate(zip(want, got, strict=True)):
        if w is not None and (
            len(w) != len(g) or any(d is not None and d != h for d, h in zip(w, g, strict=False))
        ):
            shown = "(" + ", ".join("?" if d is None else str(d) for d in w) + ")"
            return (
                f"output {i}: the shape function says {shown}, the kernel returned "
                f"{tuple(g)} (input shapes {in_shapes}, attrs {at})"
            )
    return None


def _gradient(
    reg: Registry, name: str, samples: Mapping[KernelSpec, list[Sample]], tolerance: float
) -> list[OpCheckResult]:
    spec = reg.gradient(name)
    if spec is None or spec.fn is None:
        why = "no gradient is registered" if spec is None else "the op is not differentiable"
        return [OpCheckResult("gradient", name, OpCheckStatus.SKIPPED, why)]
    # The widest floating-point binding any kernel has: numeric differences need precision.
    best: dict[tuple[tuple[str, str], ...], tuple[int, list[Sample]]] = {}
    for items in samples.values():
        for s in items:
            width = max(
                (
                    np.asarray(v).dtype.itemsize
                    for v in _leaves(s.inputs)
                    if np.asarray(v).dtype.kind == "f"
                ),
                default=0,
            )
            if width:
                key = tuple((k, v.spec_name) for k, v in s.types.items())
                best.setdefault(key, (width, []))[1].append(s)
    if not best:
        return [OpCheckResult("gradient", name, OpCheckStatus.SKIPPED, "no float inputs")]
    key, (_, chosen) = max(best.items(), key=lambda kv: kv[1][0])
    subject = f"{name} [{', '.join(f'{k}={v}' for k, v in key)}]".replace(" []", "")
    worst = 0.0
    for s in chosen[:2]:
        ins, at = s.inputs, s.attrs
        try:
            worst = max(worst, check_gradient(name, ins, at, tolerance=tolerance, registry=reg))
        except AssertionError as exc:
            return [_fail("gradient", subject, f"{exc} (inputs {ins!r}, attrs {at})")]
        except Exception as exc:
            return [_fail("gradient", subject, f"raised {exc!r}")]
    return [OpCheckResult("gradient", subject, OpCheckStatus.PASSED, f"max error {worst:.2g}")]


def _declared_default(fn: Callable[..., Any], attr: str) -> str | None:
    """The default ``fn`` declares for ``attr``, as written (signature or pybind11 doc)."""
    try:
        param = inspect.signature(fn).parameters.get(attr)
    except (TypeError, ValueError):
        param = None
        doc = getattr(fn, "__doc__", None) or ""
        found = re.search(rf"\b{re.escape(attr)}: [^,=)]+ = ([^,)]+)", doc)
        return found.group(1).strip() if found else None
    if param is None or param.default is inspect.Parameter.empty:
        return None
    return repr(param.default)


def _defaults(
    reg: Registry, dispatcher: Dispatcher, samples: Mapping[KernelSpec, list[Sample]]
) -> list[OpCheckResult]:
    op_def = dispatcher.op_def
    defaulted = [a for a in op_def.attrs if a.type != "type" and a.default is not None]
    if not defaulted:
        return [OpCheckResult("defaults", op_def.name, OpCheckStatus.SKIPPED, "no attr defaults")]
    ref = reg.reference(op_def.name)
    results: list[OpCheckResult] = []
    for attr in defaulted:
        default = attr.default
        # subject -> (drifted?, its own default as written)
        drift: dict[str, tuple[bool, str | None]] = {}
        for spec, items in samples.items():
            if spec.is_lifecycle:
                continue  # constructed with every attr, filled from the spec by dispatch
            for s in items[:1]:
                bound, full = dispatcher.bind(s.inputs, {**s.types, **s.attrs, attr.name: default})
                entry = Entry(dispatcher, spec, full)
                try:
                    if attr.name not in entry.kw:
                        continue
                    rest = {k: v for k, v in entry.kw.items() if k != attr.name}
                    outcome = _compare_calls(entry.fn, bound, rest, attr.name, default)
                finally:
                    entry.close()
                if outcome is not None:
                    drift[f"kernel {_short(spec.name)}"] = (
                        outcome,
                        _declared_default(spec.impl, attr.name),
                    )
        if ref is not None:
            sample = next((s for items in samples.values() for s in items), None)
            if sample is not None:
                rest = {k: v for k, v in sample.attrs.items() if k != attr.name}
                outcome = _compare_calls(ref.fn, sample.inputs, rest, attr.name, default)
                if outcome is not None:
                    drift["reference"] = (outcome, _declared_default(ref.fn, attr.name))
        results += _drift_results(op_def.name, attr.name, default, drift)
    return results


def _compare_calls(
    fn: Callable[..., Any], args: Sequence[Any], rest: dict[str, Any], attr: str, default: Any
) -> bool | None:
    """Whether ``fn`` without ``attr`` differs from ``fn`` with the spec's default; None
    when it has no default for it (dispatch always passes the attr, so that is fine)."""
    try:
        omitted = fn(*args, **rest)
    except TypeError:
        return None
    explicit = fn(*args, **rest, **{attr: default})
    return compare_outputs(omitted, explicit) is not None


def _drift_results(
    op: str, attr: str, default: Any, drift: dict[str, tuple[bool, str | None]]
) -> list[OpCheckResult]:
    subject = f"{op} attr {attr}"
    if not drift:
        return [
            OpCheckResult(
                "defaults",
                subject,
                OpCheckStatus.SKIPPED,
                "neither the kernels nor the reference declare a default for it",
            )
        ]
    drifted = [s for s, (d, _) in drift.items() if d]
    if not drifted:
        agree = ", ".join(drift)
        return [
            OpCheckResult(
                "defaults",
                subject,
                OpCheckStatus.PASSED,
                f"{agree} {'agrees' if len(drift) == 1 else 'agree'} with the spec's {default!r}",
            )
        ]

    def own(s: str) -> str:
        value = drift[s][1]
        return f" (it declares {attr}={value})" if value is not None else ""

    if len(drifted) == len(drift) and len(drift) > 1:
        return [
            _fail(
                "defaults",
                subject,
                f"the spec's default {default!r} drifted: every kernel and the reference "
                f"compute something else when {attr} is left out"
                + "".join(f"; {s}{own(s)}" for s in drifted)
                + "; update the spec's default or theirs so all three say the same",
            )
        ]
    return [
        _fail(
            "defaults",
            subject,
            f"the {s}'s default drifted from the spec's {default!r}{own(s)}: calling it "
            f"without {attr} differs from calling it with {attr}={default!r}",
        )
        for s in drifted
    ]
