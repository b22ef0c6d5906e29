"""The engine: run the rule table over every op of two op-sets (or a history and an op-set)."""

from __future__ import annotations

import contextlib
from collections.abc import Container, Iterable, Iterator, Sequence

from opmarket.compat._change import OpChange
from opmarket.compat._report import Finding
from opmarket.compat._rules import RULES_BY_ID, TENSORFLOW_RULES, Rule, Scope, Severity
from opmarket.sdk import KernelDef, OpDef, OpSet

__all__ = ["compare_history", "compare_ops", "compare_opsets"]

_PRESENCE = tuple(r for r in TENSORFLOW_RULES if r.scope is Scope.PRESENCE)
_PAIR = tuple(r for r in TENSORFLOW_RULES if r.scope is Scope.PAIR)
_KERNELS = tuple(r for r in TENSORFLOW_RULES if r.scope is Scope.KERNELS)


#: What an older release of a history is checked for (TensorFlow's OpDefCompatible rules).
_EVERY_RELEASE = frozenset(
    r.id
    for r in TENSORFLOW_RULES
    if r.severity is Severity.BREAKING and r.scope in (Scope.PAIR, Scope.PRESENCE)
) - {"attr-default-changed", "attr-default-removed"}


_DEFAULT_RULES = frozenset({"attr-default-changed", "attr-default-removed"})
_DEFAULTS = tuple(r for r in TENSORFLOW_RULES if r.id in _DEFAULT_RULES)


def _run(rules: Sequence[Rule[OpChange]], change: OpChange, out: list[Finding]) -> None:
    for rule in rules:
        assert rule.check is not None
        for message in rule.check(change):
            out.append(Finding(change.name, rule.id, rule.severity, message))


def compare_ops(
    old: OpDef | None,
    new: OpDef | None,
    old_kernels: Sequence[KernelDef] | None = None,
    new_kernels: Sequence[KernelDef] | None = None,
) -> list[Finding]:
    """Every finding for one op in two releases (None where a release lacks it).

    Kernels are compared only when both sides' kernels are known (not None).
    """
    change = OpChange(old, new, old_kernels, new_kernels)
    out: list[Finding] = []
    _check(change, out)
    return out


def _check(change: OpChange, out: list[Finding]) -> None:
    if change.old is None or change.new is None:
        _run(_PRESENCE, change, out)
        return
    if change.old != change.new or _float_defaults(change.old):
        _run(_PAIR, change, out)
    if (
        change.old_kernels is not None
        and change.new_kernels is not None
        and change.old_kernels != change.new_kernels
    ):
        _run(_KERNELS, change, out)


_FLOATY = ("float", "tensor", "func")


def _float_defaults(op: OpDef) -> bool:
    # Python's == says 0.0 == -0.0; TensorFlow compares the bytes, so such ops are checked
    # even when they compare equal.
    return any(a.default is not None and a.base_type in _FLOATY for a in op.attrs)


def _shape_key(op: OpDef) -> object:
    # What an op is apart from its name and docs, to spot renames.
    return op.without_docs().replace(name="", deprecation=None)


def _kernel_index(opset: OpSet, known: bool) -> dict[str, list[KernelDef]] | None:
    if not known:
        return None
    out: dict[str, list[KernelDef]] = {}
    for k in opset.kernels:
        out.setdefault(k.op, []).append(k)
    return out


def compare_opsets(
    old: OpSet,
    new: OpSet,
    *,
    old_kernels_known: bool | None = None,
    new_kernels_known: bool | None = None,
) -> list[Finding]:
    """Every finding between two releases, ops in the old release's order, then new ops.

    Kernels are compared when both sides know them; by default a side knows its kernels
    when it lists any.
    """
    old_known = bool(old.kernels) if old_kernels_known is None else old_kernels_known
    new_known = bool(new.kernels) if new_kernels_known is None else new_kernels_known
    old_k = _kernel_index(old, old_known and new_known)
    new_k = _kernel_index(new, old_known and new_known)
    out: list[Finding] = []
    removed: list[OpChange] = []
    for op in old:
        other = new.get(op.name)
        change = OpChange(
            op,
            other,
            None if old_k is None else old_k.get(op.name, []),
            None if new_k is None else new_k.get(op.name, []),
        )
        if other is None:
            removed.append(change)
            continue
        _check(change, out)
    added = [op for op in new if op.name not in old]
    if removed and added:
        by_shape: dict[object, str] = {}
        for op in added:
            try:
                by_shape.setdefault(_shape_key(op), op.name)
            except TypeError:  # an unhashable attr value: no rename guess for it
                continue
        for change in removed:
            assert change.old is not None
            with contextlib.suppress(TypeError):  # unhashable: no guess
                change.renamed_to = by_shape.get(_shape_key(change.old))
    for change in removed:
        _check(change, out)
    for op in added:
        _check(OpChange(None, op), out)
    return out


def compare_history(
    releases: Sequence[tuple[str, OpSet]],
    new: OpSet,
    *,
    new_kernels_known: bool | None = None,
) -> list[Finding]:
    """NEW against every recorded release, as TensorFlow checks ops against ops_history.

    The latest release gets the full comparison. Older ones add, once each and marked with
    the release they concern, what TensorFlow's op_compatibility_lib checks against every
    version: OpDefCompatible and removed ops. Defaults are compared with the latest release
    only (so a default changed long ago, like Placeholder's shape, is not reported forever).
    """
    if not releases:
        return []
    *older, (_, latest) = releases
    out = compare_opsets(latest, new, new_kernels_known=new_kernels_known)
    seen = {(f.op, f.rule, f.message) for f in out}

    last: dict[str, tuple[str, OpDef]] = {}
    first: dict[str, OpDef] = {}
    for label, opset in releases:
        for o in opset:
            last[o.name] = (label, o)
            first.setdefault(o.name, o)
    # TensorFlow checks an op against its history only when it differs from its last version.
    unchanged = {o.name for o in new if o.name in last and _same_version(last[o.name][1], o)}

    def add(found: Iterable[Finding], label: str, rules: Container[str]) -> None:
        for f in found:
            key = (f.op, f.rule, f.message)
            if f.rule in rules and key not in seen and f.op not in unchanged:
                seen.add(key)
                out.append(Finding(f.op, f.rule, f.severity, f.message, release=label))

    for label, opset in reversed(older):
        add(compare_opsets(opset, new, new_kernels_known=new_kernels_known), label, _EVERY_RELEASE)
    for op in new:
        if op.name not in last:
            continue
        last_label, last_op = last[op.name]
        if op.name not in latest:  # gone from the latest release: its last version's defaults
            changed: list[Finding] = []
            _run(_DEFAULTS, OpChange(last_op, op), changed)
            add(changed, last_label, _DEFAULT_RULES)
        add(_added_defaults(first[op.name], last_op, op), last_label, _DEFAULT_RULES)
    return out


def _same_version(a: OpDef, b: OpDef) -> bool:
    """The same op definition, docs aside, as TensorFlow's serialized comparison sees it."""
    if a.without_docs() != b.without_docs():
        return False
    return not _float_defaults(a) or not [f for f in compare_ops(a, b) if f.rule in _DEFAULT_RULES]


def _added_defaults(first: OpDef, last: OpDef, new: OpDef) -> Iterator[Finding]:
    """TensorFlow's OpDefAddedDefaultsUnchanged(first, last, new) beyond what comparing with
    the last version finds: an attr added after the first version without a default (itself
    a breaking release) may not gain one later."""
    rule = RULES_BY_ID["attr-default-changed"]
    for a in last.attrs:
        n = new.attr(a.name)
        if (
            first.attr(a.name) is None
            and n is not None
            and a.default is None
            and n.default is not None
        ):
            yield Finding(
                new.name,
                rule.id,
                rule.severity,
                f"attr '{a.name}' was added after the first release without a default; "
                "TensorFlow's history check forbids giving it one now",
            )
