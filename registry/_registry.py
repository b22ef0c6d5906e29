"""The registry: ops, kernels, shape functions, gradients, references and custom-call
targets, validated in one place as they are registered."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from opmarket.registry._dispatch import Dispatcher
from opmarket.registry._errors import RegistrationError
from opmarket.sdk import KernelDef, NotFoundError, OpDef, OpSet, validate_opdef
from opmarket.sdk._custom_call import CustomCallTarget
from opmarket.sdk._gradients import GradientSpec
from opmarket.sdk._kernel import KernelSpec, declarations
from opmarket.sdk._reference import InputGeneratorSpec, ReferenceSpec
from opmarket.sdk._shape_inference import ShapeFnSpec

__all__ = ["Registry"]

Declaration = (
    OpDef
    | KernelSpec
    | ShapeFnSpec
    | GradientSpec
    | ReferenceSpec
    | InputGeneratorSpec
    | CustomCallTarget
)
_KINDS = (
    OpDef,
    KernelSpec,
    ShapeFnSpec,
    GradientSpec,
    ReferenceSpec,
    InputGeneratorSpec,
    CustomCallTarget,
)


@dataclass(slots=True)
class _Op:
    op_def: OpDef
    source: str
    kernels: list[tuple[KernelSpec, str]] = field(default_factory=list)
    shape_fn: tuple[ShapeFnSpec, str] | None = None
    gradient: tuple[GradientSpec, str] | None = None
    reference: tuple[ReferenceSpec, str] | None = None
    generator: tuple[InputGeneratorSpec, str] | None = None


def flatten(items: Iterable[Any]) -> list[Declaration]:
    """Declarations from what ``register`` was given: declarations, decorated functions or
    classes (their declarations), and iterables of those."""
    out: list[Declaration] = []
    for item in items:
        if isinstance(item, _KINDS):
            out.append(item)
        elif found := declarations(item):
            out.extend(found)
        elif isinstance(item, Iterable) and not isinstance(item, (str, bytes)):
            out.extend(flatten(item))
        else:
            raise RegistrationError(
                f"cannot register {item!r}: expected an OpDef or something declared with "
                "@kernel, @shape_fn, @register_gradient, @reference, @input_generator or "
                "@custom_call_target"
            )
    return out


def _same_op(a: OpDef, b: OpDef) -> bool:
    return a.without_docs() == b.without_docs()


class Registry:
    """Everything registered in one process (or one test)."""

    def __init__(self) -> None:
        # Kernels reach custom-call targets through opmarket.sdk.custom_call, which imports
        # nothing of the run time: a registry existing is what makes kernels runnable, so
        # importing the run time's custom_call here hands it to the sdk (once).
        from opmarket.registry import _custom_call  # noqa: F401  (installs the runner)

        self._ops: dict[str, _Op] = {}
        self._targets: dict[tuple[str, str], tuple[CustomCallTarget, str]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._dispatchers: dict[str, Dispatcher] = {}
        self.version = 0

    # --- registration --------------------------------------------------------------------

    def register(self, *items: Any, source: str = "<python>") -> None:
        """Validate and add every declaration in ``items``; all or nothing.

        RegistrationError lists every problem, naming both sources of a conflict.
        """
        decls = flatten(items)
        problems: list[str] = []
        new_ops: dict[str, OpDef] = {}
        for d in decls:
            if isinstance(d, OpDef):
                problems.extend(self._check_op(d, source, new_ops))
        known = {**{n: e.op_def for n, e in self._ops.items()}, **new_ops}
        pending_kernels: list[tuple[KernelSpec, str]] = []
        singles: dict[tuple[str, str], tuple[Any, str]] = {}
        for d in decls:
            if isinstance(d, OpDef):
                continue
            if isinstance(d, CustomCallTarget):
                problems.extend(self._check_target(d, source))
                continue
            op_def = known.get(d.op)
            if op_def is None:
                problems.append(f"{_kind(d)} for unknown op {d.op!r} from {source}")
                continue
            if isinstance(d, KernelSpec):
                problems.extend(self._check_kernel(d, op_def, source, pending_kernels))
                pending_kernels.append((d, source))
            else:
                problems.extend(self._check_single(d, source, singles))
                singles[(_kind(d), d.op)] = (d, source)
        if problems:
            raise RegistrationError("\n".join(problems))
        self._commit(decls, source)

    def _check_op(self, op: OpDef, source: str, new_ops: dict[str, OpDef]) -> list[str]:
        problems = [f"op {op.name!r} from {source}: {m}" for m in validate_opdef(op)]
        have = self._ops.get(op.name)
        other = have.op_def if have else new_ops.get(op.name)
        where = have.source if have else source
        if other is not None and not _same_op(other, op):
            problems.append(
                f"op {op.name!r} from {source} differs from the one registered by {where}"
            )
        new_ops.setdefault(op.name, op)
        return problems

    def _check_kernel(
        self, k: KernelSpec, op: OpDef, source: str, pending: list[tuple[KernelSpec, str]]
    ) -> list[str]:
        where = f"kernel {k.name} for {op.name} on {k.device} from {source}"
        problems: list[str] = []
        if not k.device:
            problems.append(f"{where}: no device")
        for attr_name, types in k.constraints:
            attr = op.attr(attr_name)
            if attr is None or attr.base_type != "type":
                problems.append(
                    f"{where}: constraint on {attr_name!r}, which is not a type attr of {op.name}"
                )
            elif attr.allowed_values is not None:
                outside = [t.spec_name for t in types if t not in attr.allowed_values]
                if outside:
                    allowed = ", ".join(t.spec_name for t in attr.allowed_values)
                    problems.append(
                        f"{where}: {attr_name} constraint {', '.join(outside)} is outside the "
                        f"op's allowed types ({allowed})"
                    )
        args = {a.name for a in (*op.inputs, *op.outputs)}
        problems.extend(
            f"{where}: host_memory names {n!r}, not an input or output of {op.name}"
            for n in k.host_memory
            if n not in args
        )
        have = self._ops.get(op.name)
        for other, other_source in [*(have.kernels if have else ()), *pending]:
            if other == k:
                continue
            if (other.op, other.device, other.label, other.priority) == (
                k.op,
                k.device,
                k.label,
                k.priority,
            ) and _overlap(other, k):
                problems.append(
                    f"{where} overlaps kernel {other.name} from {other_source} at the same "
                    f"priority {k.priority}; give one a higher priority"
                )
        return problems

    def _check_single(self, d: Any, source: str, pending: dict[tuple[str, str], Any]) -> list[str]:
        kind = _kind(d)
        have = self._ops.get(d.op)
        current = getattr(have, _SLOT[kind]) if have else None
        current = pending.get((kind, d.op), current)
        if current is not None and current[0] != d:
            return [
                f"{kind} for {d.op!r} from {source} conflicts with the one registered by "
                f"{current[1]}"
            ]
        return []

    def _check_target(self, t: CustomCallTarget, source: str) -> list[str]:
        have = self._targets.get((t.name, t.platform))
        if have is not None and have[0] != t:
            return [
                f"custom-call target {t.name!r} on {t.platform} from {source} conflicts with "
                f"the one registered by {have[1]}"
            ]
        return []

    def _commit(self, decls: list[Declaration], source: str) -> None:
        for d in decls:
            if isinstance(d, OpDef) and d.name not in self._ops:
                self._ops[d.name] = _Op(d, source)
        for d in decls:
            if isinstance(d, OpDef):
                continue
            if isinstance(d, CustomCallTarget):
                self._targets.setdefault((d.name, d.platform), (d, source))
            elif isinstance(d, KernelSpec):
                entry = self._ops[d.op]
                if all(k != d for k, _ in entry.kernels):
                    entry.kernels.append((d, source))
            else:
                setattr(self._ops[d.op], _SLOT[_kind(d)], (d, source))
        self._changed()

    def unregister_source(self, source: str) -> None:
        """Remove everything ``source`` registered (a plugin that failed half-way)."""
        for name in [n for n, e in self._ops.items() if e.source == source]:
            del self._ops[name]
        for entry in self._ops.values():
            entry.kernels = [(k, s) for k, s in entry.kernels if s != source]
            for slot in _SLOT.values():
                value = getattr(entry, slot)
                if value is not None and value[1] == source:
                    setattr(entry, slot, None)
        self._targets = {k: v for k, v in self._targets.items() if v[1] != source}
        self._changed()

    def _changed(self) -> None:
        self.version += 1
        for d in self._dispatchers.values():
            d.invalidate()
        self._dispatchers = {n: d for n, d in self._dispatchers.items() if n in self._ops}
        for listener in list(self._listeners):
            listener()

    def on_change(self, listener: Callable[[], None]) -> None:
        """Call ``listener`` after every change (wrappers and caches drop what they hold)."""
        self._listeners.append(listener)

    # --- queries ---------------------------------------------------------------------------

    @property
    def op_defs(self) -> Mapping[str, OpDef]:
        """Registered OpDefs by name (a read-only view; what ``validate_graph`` takes)."""
        return MappingProxyType({n: e.op_def for n, e in self._ops.items()})

    def __contains__(self, name: object) -> bool:
        return name in self._ops

    def __iter__(self) -> Iterator[OpDef]:
        return iter([e.op_def for e in self._ops.values()])

    def __len__(self) -> int:
        return len(self._ops)

    def op_def(self, name: str) -> OpDef | None:
        """The OpDef registered as ``name``, or None."""
        e = self._ops.get(name)
        return e.op_def if e else None

    def source(self, name: str) -> str | None:
        """Who registered op ``name``."""
        e = self._ops.get(name)
        return e.source if e else None

    def kernels(self, op: str) -> tuple[KernelSpec, ...]:
        """The kernels registered for ``op``, in registration order; empty for an unknown op."""
        e = self._ops.get(op)
        return tuple(k for k, _ in e.kernels) if e else ()

    def kernel_defs(self, op: str | None = None) -> tuple[KernelDef, ...]:
        """Registered kernels as KernelDefs (for snapshots), of one op or all."""
        names = [op] if op is not None else sorted(self._ops)
        return tuple(k.definition for n in names for k in self.kernels(n))

    def snapshot(self, *, name: str = "", version: str = "", source: str | None = None) -> OpSet:
        """The registered ops (of one ``source`` if given) and their kernels as an OpSet."""
        ops = sorted(
            (e.op_def for e in self._ops.values() if source is None or e.source == source),
            key=lambda o: o.name,
        )
        kernels = tuple(k for o in ops for k in self.kernel_defs(o.name))
        return OpSet.of(ops, kernels, name=name, version=version)

    def shape_fn(self, op: str) -> ShapeFnSpec | None:
        """The shape function declared for ``op``, or None."""
        e = self._ops.get(op)
        return e.shape_fn[0] if e and e.shape_fn else None

    def gradient(self, op: str) -> GradientSpec | None:
        """The gradient declaration (``fn`` None: not differentiable), or None if none."""
        e = self._ops.get(op)
        return e.gradient[0] if e and e.gradient else None

    def reference(self, op: str) -> ReferenceSpec | None:
        """The numpy reference declared for ``op``, or None."""
        e = self._ops.get(op)
        return e.reference[0] if e and e.reference else None

    def input_generator(self, op: str) -> InputGeneratorSpec | None:
        """The input generator declared for ``op`` (what conformance feeds its kernels), or None."""
        e = self._ops.get(op)
        return e.generator[0] if e and e.generator else None

    def custom_call_target(self, name: str, platform: str = "Host") -> CustomCallTarget | None:
        """The custom-call target ``name`` registered for ``platform``, or None."""
        found = self._targets.get((name, platform))
        return found[0] if found else None

    def custom_call_targets(self) -> tuple[CustomCallTarget, ...]:
        """Every registered custom-call target, of every platform, in registration order."""
        return tuple(t for t, _ in self._targets.values())

    def dispatcher(self, op: str) -> Dispatcher:
        """The dispatcher (wrapper, kernel cache) of ``op``; NotFoundError if it is unknown."""
        d = self._dispatchers.get(op)
        if d is None:
            entry = self._ops.get(op)
            if entry is None:
                raise NotFoundError(f"op {op!r} is not registered")
            d = self._dispatchers[op] = Dispatcher(self, entry.op_def)
        return d


_SLOT = {
    "shape function": "shape_fn",
    "gradient": "gradient",
    "reference": "reference",
    "input generator": "generator",
}


def _kind(d: Any) -> str:
    if isinstance(d, KernelSpec):
        return "kernel"
    if isinstance(d, ShapeFnSpec):
        return "shape function"
    if isinstance(d, GradientSpec):
        return "gradient"
    if isinstance(d, ReferenceSpec):
        return "reference"
    return "input generator"


def _overlap(a: KernelSpec, b: KernelSpec) -> bool:
    """Whether some type-attr binding matches both kernels."""
    names = {n for n, _ in a.constraints} | {n for n, _ in b.constraints}
    for n in names:
        ta, tb = a.constraint(n), b.constraint(n)
        if ta is not None and tb is not None and not set(ta) & set(tb):
            return False
    return True
