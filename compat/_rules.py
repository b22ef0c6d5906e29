"""The rule table: every check compat-check makes, as data (id, severity, summary, hint, check).

``breaking`` rules on op definitions are exactly TensorFlow's (OpDefCompatible and
OpDefAttrDefaultsUnchanged in tensorflow/core/framework/op_def_util.cc): together they fire
for a change if and only if TensorFlow rejects it. ``warning`` rules report what TensorFlow
allows but users feel; ``info`` rules report additions. docs/compat-rules.md and the rule
tests are generated from this table, examples included.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from opmarket.compat._change import OpChange, SigToken
from opmarket.compat._kernels import coverage, describe_combo
from opmarket.compat._values import show_value, values_equal
from opmarket.sdk import AttrDef

__all__ = ["RULES", "RULES_BY_ID", "Example", "Rule", "Scope", "Severity"]


class Severity(enum.StrEnum):
    """How much a finding matters: ``breaking`` fails the check."""

    BREAKING = "breaking"
    WARNING = "warning"
    INFO = "info"


class Scope(enum.StrEnum):
    """What a rule looks at: an op present in one release, an op in both, its kernels, saved
    graphs, or the op-set files themselves."""

    PRESENCE = "presence"
    PAIR = "pair"
    KERNELS = "kernels"
    GRAPH = "graph"
    DOCUMENT = "document"


@dataclass(frozen=True, slots=True)
class Example:
    """Two releases of op ``Example`` in the table's example language (see _examples.py),
    and whether the rule fires for the change."""

    old: str
    new: str
    fires: bool


Check = Callable[[OpChange], Iterable[str]]


@dataclass(frozen=True, slots=True)
class Rule:
    """One row of the table."""

    id: str
    severity: Severity
    scope: Scope
    summary: str
    hint: str
    check: Check | None  # None for graphs and documents, checked outside the op table
    examples: tuple[Example, ...] = ()


# ---------------------------------------------------------------- helpers


def _allowed(attr: AttrDef) -> tuple[list[int], list[str]]:
    # TensorFlow compares only the type and string lists of allowed_values.
    values = attr.allowed_values or ()
    if attr.base_type == "type":
        return [int(v) for v in values], []
    if attr.base_type == "string":
        return [], [v for v in values if isinstance(v, str)]
    return [], []


def _narrowed(old: AttrDef, new: AttrDef) -> bool:
    """TensorFlow's MoreRestrictive, given that ``old`` was restricted too."""
    old_types, old_s = _allowed(old)
    new_types, new_s = _allowed(new)
    return not set(old_types) <= set(new_types) or not set(old_s) <= set(new_s)


def _show_allowed(attr: AttrDef) -> str:
    if attr.allowed_values is None:
        return "no restriction"
    return "{" + show_value(attr.type if attr.is_list else f"list({attr.type})",
                            attr.allowed_values)[1:-1] + "}"


def _default(attr: AttrDef) -> str:
    return "no default" if attr.default is None else show_value(attr.type, attr.default)


def _sig_text(tokens: list[SigToken]) -> str:
    return ", ".join(t.text for t in tokens)


def _explain(old: list[SigToken], new: list[SigToken], kind: str) -> str:
    """Where two signatures first differ, in words, then TensorFlow's own view of them."""
    i = 0
    while i < min(len(old), len(new)) and old[i].text == new[i].text:
        i += 1
    if i == len(old):
        what = f"{len(new) - i} {kind} tensor(s) added, from '{new[i].arg}' ({new[i].type})"
    elif i == len(new):
        what = f"{len(old) - i} {kind} tensor(s) gone, from '{old[i].arg}' ({old[i].type})"
    elif old[i].type == new[i].type:
        what = f"{kind} '{old[i].arg}' renamed to '{new[i].arg}'"
    else:
        name = f"'{old[i].arg}'" + (f" (now '{new[i].arg}')" if old[i].arg != new[i].arg else "")
        what = f"{kind} {name} was {old[i].type}, is now {new[i].type}"
    return f"{what}; TensorFlow sees '{_sig_text(old)}' vs. '{_sig_text(new)}'"


# ---------------------------------------------------------------- presence


def _op_removed(c: OpChange) -> Iterator[str]:
    if c.old is not None and c.new is None:
        guess = f" (renamed to {c.renamed_to}?)" if c.renamed_to else ""
        yield f"op {c.old.name} is gone from the new release{guess}"


def _op_added(c: OpChange) -> Iterator[str]:
    if c.old is None and c.new is not None:
        yield f"new op {c.new.name}"


# ---------------------------------------------------------------- attrs (TensorFlow)


def _attr_removed(c: OpChange) -> Iterator[str]:
    for a in c.pair[0].attrs:
        if a.name not in c.new_attrs:
            yield f"attr '{a.name}' removed (was {a.spec})"


def _attr_type_changed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.type != new.type:
            yield f"attr '{old.name}' changed type from {old.type} to {new.type}"


def _attr_restriction_added(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.allowed_values is None and new.allowed_values is not None:
            yield f"attr '{old.name}' was unrestricted, now allows only {_show_allowed(new)}"


def _attr_narrowed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.allowed_values is not None and new.allowed_values is not None and _narrowed(
            old, new
        ):
            yield (
                f"attr '{old.name}' allows fewer values: from {_show_allowed(old)} to "
                f"{_show_allowed(new)}"
            )


def _attr_minimum_added(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if new.has_minimum and not old.has_minimum:
            yield f"attr '{old.name}' gained a minimum of {new.minimum}"


def _attr_minimum_raised(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if new.has_minimum and old.has_minimum and new.minimum > old.minimum:
            yield f"attr '{old.name}' minimum raised from {old.minimum} to {new.minimum}"


def _attr_added_without_default(c: OpChange) -> Iterator[str]:
    for a in c.pair[1].attrs:
        if a.name not in c.old_attrs and a.default is None:
            yield f"attr '{a.name}' added without a default ({a.spec})"


def _attr_default_removed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.default is not None and new.default is None:
            yield f"attr '{old.name}' lost its default {_default(old)}"


def _attr_default_changed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if (
            old.default is not None
            and new.default is not None
            and (old.type != new.type or not values_equal(old.type, old.default, new.default))
        ):
            yield f"attr '{old.name}' default changed from {_default(old)} to {_default(new)}"


# ---------------------------------------------------------------- signatures (TensorFlow)


def _input_signature(c: OpChange) -> Iterator[str]:
    if not c.inputs_match:
        yield _explain(c.old_inputs, c.new_inputs, "input")


def _input_became_ref(c: OpChange) -> Iterator[str]:
    if c.inputs_match:
        for i, (o, n) in enumerate(zip(c.old_inputs, c.new_inputs, strict=True)):
            if n.is_ref and not o.is_ref:
                yield f"input {i} ('{n.arg}') changed from a value to a reference (Ref)"


def _output_renamed(c: OpChange) -> Iterator[str]:
    if not c.outputs_match and c.outputs_match_unnamed:
        for o, n in zip(c.old_outputs, c.new_outputs, strict=True):
            if o.arg != n.arg:
                yield (
                    f"output '{o.arg}' renamed to '{n.arg}'; TensorFlow sees "
                    f"'{_sig_text(c.old_outputs)}' vs. '{_sig_text(c.new_outputs)}'"
                )
                return


def _output_signature(c: OpChange) -> Iterator[str]:
    if not c.outputs_match and not c.outputs_match_unnamed:
        yield _explain(c.old_outputs, c.new_outputs, "output")


def _output_lost_ref(c: OpChange) -> Iterator[str]:
    if c.outputs_match:
        for i, (o, n) in enumerate(zip(c.old_outputs, c.new_outputs, strict=True)):
            if o.is_ref and not n.is_ref:
                yield f"output {i} ('{o.arg}') changed from a reference (Ref) to a value"


# ---------------------------------------------------------------- what users feel


def _python_signature(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    fn = new.python_name + "()" if old.inputs != new.inputs else ""
    for o, n in zip(old.inputs, new.inputs, strict=False):
        if o.name != n.name:
            yield f"{fn}: input '{o.name}' is now called '{n.name}'; keyword callers break"
    for n in new.inputs[len(old.inputs):]:
        yield f"{fn}: new input '{n.name}' is a required argument that existing calls lack"
    if old.inputs == new.inputs and c.old_attrs.keys() <= c.new_attrs.keys():
        return  # the same inputs infer the same attrs
    old_inferred, new_inferred = c.inferred()
    fn = new.python_name + "()"
    for name, new_attr in c.new_attrs.items():
        if name not in c.old_attrs:
            continue
        was_kw, is_kw = name not in old_inferred, name not in new_inferred
        if was_kw and not is_kw:
            yield f"{fn}: '{name}' is now inferred from the inputs; calls that pass {name}= fail"
        elif is_kw and not was_kw and new_attr.default is None:
            yield f"{fn}: '{name}' is no longer inferred and has no default; callers must pass it"


def _stateful_changed(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    if old.is_stateful != new.is_stateful:
        now = "stateful" if new.is_stateful else "stateless"
        yield f"op is now {now}: constant folding, caching and retracing treat it differently"


def _op_deprecated(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    dep = new.deprecation
    if dep is not None and (old.deprecation is None or dep.version < old.deprecation.version):
        why = f": {dep.explanation}" if dep.explanation else ""
        yield f"op is deprecated from GraphDef version {dep.version}{why}"


_FLAGS = ("is_commutative", "is_aggregate", "allows_uninitialized_input",
          "is_distributed_communication")  # fmt: skip


def _flags_changed(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    for flag in _FLAGS:
        if getattr(old, flag) != getattr(new, flag):
            yield f"{flag} changed from {getattr(old, flag)} to {getattr(new, flag)}"


# ---------------------------------------------------------------- additions


def _attr_added(c: OpChange) -> Iterator[str]:
    for a in c.pair[1].attrs:
        if a.name not in c.old_attrs and a.default is not None:
            yield f"new attr '{a.name}' ({a.spec})"


def _attr_default_added(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.default is None and new.default is not None:
            yield f"attr '{old.name}' now defaults to {_default(new)}"


def _attr_widened(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.allowed_values is None or old.type != new.type:
            continue
        if new.allowed_values is None:
            yield f"attr '{old.name}' is no longer restricted (was {_show_allowed(old)})"
        elif _narrowed(new, old) and not _narrowed(old, new):
            yield f"attr '{old.name}' allows more values: {_show_allowed(new)}"


def _attr_minimum_lowered(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.has_minimum and (not new.has_minimum or new.minimum < old.minimum):
            to = str(new.minimum) if new.has_minimum else "none"
            yield f"attr '{old.name}' minimum lowered from {old.minimum} to {to}"


def _ref_relaxed(c: OpChange) -> Iterator[str]:
    if c.inputs_match:
        for i, (o, n) in enumerate(zip(c.old_inputs, c.new_inputs, strict=True)):
            if o.is_ref and not n.is_ref:
                yield f"input {i} ('{n.arg}') no longer needs a reference"
    if c.outputs_match:
        for i, (o, n) in enumerate(zip(c.old_outputs, c.new_outputs, strict=True)):
            if n.is_ref and not o.is_ref:
                yield f"output {i} ('{n.arg}') is now a reference"


# ---------------------------------------------------------------- kernels


def _kernel_sides(c: OpChange) -> tuple[set[tuple[str, tuple[tuple[str, str], ...]]], ...]:
    assert c.old_kernels is not None and c.new_kernels is not None
    ops = c.pair
    both = (c.old_kernels, c.new_kernels)
    return coverage(ops, c.old_kernels, both), coverage(ops, c.new_kernels, both)


def _group(combos: Iterable[tuple[str, tuple[tuple[str, str], ...]]]) -> str:
    return "; ".join(sorted(describe_combo(x) for x in combos))


def _kernel_removed(c: OpChange) -> Iterator[str]:
    old, new = _kernel_sides(c)
    gone = old - new
    if gone:
        yield f"no kernel any more for {_group(gone)}"


def _kernel_added(c: OpChange) -> Iterator[str]:
    old, new = _kernel_sides(c)
    added = new - old
    if added:
        yield f"new kernel(s) for {_group(added)}"


# ---------------------------------------------------------------- the table

B, W, N = Severity.BREAKING, Severity.WARNING, Severity.INFO
P = Scope.PAIR
E = Example

RULES: tuple[Rule, ...] = (
    Rule("op-removed", B, Scope.PRESENCE,
         "An op of the old release is missing (removed or renamed).",
         "Keep the old op registered (deprecate it instead), and add the new name beside it.",
         _op_removed,
         (E("in x: float", "-", True), E("in x: float", "in x: float", False))),
    Rule("attr-removed", B, P,
         "An attr of the old op is gone; graphs that set it no longer load.",
         "Keep the attr; if it no longer matters, give it a default and ignore it.",
         _attr_removed,
         (E("attr a: int", "", True), E("attr a: int", "attr a: int", False))),
    Rule("attr-type-changed", B, P,
         "An attr changed type (int -> list(int), type -> list(type), ...).",
         "Add a new attr with the new type and a default, and keep the old one.",
         _attr_type_changed,
         (E("attr a: int", "attr a: list(int)", True), E("attr a: int", "attr a: int = 3", False))),
    Rule("attr-restriction-added", B, P,
         "An attr that allowed anything now has a list of allowed values.",
         "Keep the attr unrestricted and reject bad values in the kernel.",
         _attr_restriction_added,
         (E("attr t: type", "attr t: {int32, int64}", True),
          E("attr t: {int32}", "attr t: type", False))),
    Rule("attr-allowed-values-narrowed", B, P,
         "A value an attr allowed before is no longer allowed.",
         "Allow every old value; add new values only.",
         _attr_narrowed,
         (E("attr t: {int32, int64, bool}", "attr t: {int32, int64}", True),
          E("attr a: {'A', 'B'}", "attr a: {'A', 'B', 'C'}", False))),
    Rule("attr-minimum-added", B, P,
         "An attr without a minimum now has one.",
         "Leave the minimum off and check the value in the kernel.",
         _attr_minimum_added,
         (E("attr n: int", "attr n: int >= 3", True), E("attr n: int >= 3", "attr n: int", False))),
    Rule("attr-minimum-raised", B, P,
         "An attr's minimum went up.",
         "Keep the old minimum.",
         _attr_minimum_raised,
         (E("attr n: int >= 1", "attr n: int >= 3", True),
          E("attr n: int >= 3", "attr n: int >= 1", False))),
    Rule("attr-added-without-default", B, P,
         "A new attr has no default, so graphs made before it existed lack a value.",
         "Give the new attr a default that reproduces the old behaviour.",
         _attr_added_without_default,
         (E("", "attr a: int", True), E("", "attr a: int = 42", False))),
    Rule("attr-default-removed", B, P,
         "An attr lost its default; graphs that relied on it lack a value.",
         "Keep the default.",
         _attr_default_removed,
         (E("attr a: int = 91", "attr a: int", True), E("attr a: int", "attr a: int = 91", False))),
    Rule("attr-default-changed", B, P,
         "An attr's default changed, so saved graphs silently change meaning.",
         "Keep the old default; add a new attr (with the old behaviour as its default) instead.",
         _attr_default_changed,
         (E("attr a: int = 2", "attr a: int = 1", True),
          E("attr a: int = 2", "attr a: int = 2", False))),
    Rule("input-signature-changed", B, P,
         "The inputs changed (type, count, order or list-ness) once new attrs take defaults.",
         "Keep the inputs; a new list input needs a length default of 0, a type made "
         "polymorphic a type attr defaulting to the old type.",
         _input_signature,
         (E("in a: int32", "in a: float", True),
          E("in a: int32", "in a: T; attr T: type = DT_INT32", False),
          E("", "in a: N * int32; attr N: int >= 0 = 0", False),
          E("", "in a: N * int32; attr N: int >= 0 = 1", True))),
    Rule("input-became-ref", B, P,
         "An input changed from a value to a reference (Ref).",
         "Inputs may stop being references, never start.",
         _input_became_ref,
         (E("in i: int32", "in i: Ref(int32)", True),
          E("in i: Ref(int32)", "in i: int32", False))),
    Rule("output-signature-changed", B, P,
         "The outputs changed (type, count or list-ness) once new attrs take defaults.",
         "Keep the outputs; add a new op for the new behaviour.",
         _output_signature,
         (E("out o: int32", "out o: float", True), E("out o: float", "out o: float", False))),
    Rule("output-renamed", B, P,
         "An output was renamed; functions refer to outputs by name.",
         "Keep the output's name.",
         _output_renamed,
         (E("out old: int32", "out new: int32", True),
          E("in old: int32", "in new: int32", False))),
    Rule("output-lost-ref", B, P,
         "An output changed from a reference (Ref) to a value.",
         "Outputs may become references, never stop being one.",
         _output_lost_ref,
         (E("out o: Ref(int32)", "out o: int32", True),
          E("out o: int32", "out o: Ref(int32)", False))),
    Rule("kernel-removed", B, Scope.KERNELS,
         "A kernel for a (device, dtype) of the old release is gone.",
         "Keep a kernel for every device and dtype the old release served.",
         _kernel_removed,
         (E("in x: T; attr T: type; kernel CPU T=float,int32",
            "in x: T; attr T: type; kernel CPU T=float", True),
          E("in x: T; attr T: type; kernel CPU T=float",
            "in x: T; attr T: type; kernel CPU T=float; kernel GPU T=float", False))),
    Rule("graph-invalid", B, Scope.GRAPH,
         "A graph saved with the old release does not validate against the new op-set.",
         "Fix the op change that the message names; see the other findings.",
         None),
    Rule("graph-invalid-before", W, Scope.GRAPH,
         "A graph in --graphs does not validate against the old release either, so it "
         "proves nothing about the change.",
         "Replace it with a graph saved by the old release.",
         None),
    Rule("invalid-opdef", W, Scope.DOCUMENT,
         "An op definition breaks the OpDef rules (TensorFlow's ValidateOpDef).",
         "Fix the definition; opmarket will not load the op as it is.",
         None),
    Rule("python-signature-changed", W, P,
         "The generated Python wrapper changed for existing callers.",
         "Keep input names and order; give new inputs and attrs defaults.",
         _python_signature,
         (E("in x: float", "in y: float", True),
          E("in x: float", "in x: float; attr a: int = 1", False),
          E("in x: float", "in x: float; in extra: N * float; attr N: int >= 0 = 0", True))),
    Rule("stateful-changed", W, P,
         "The op became stateful or stateless; optimizers and caches treat it differently.",
         "Keep the flag, or release the change as a new op.",
         _stateful_changed,
         (E("in x: float", "in x: float; stateful", True),
          E("in x: float; stateful", "in x: float; stateful", False))),
    Rule("op-deprecated", W, P,
         "The op is now deprecated; graphs at or after the version stop loading.",
         "Tell users what to use instead, in the explanation.",
         _op_deprecated,
         (E("in x: float", "in x: float; deprecated 9 use Y", True),
          E("in x: float; deprecated 9 use Y", "in x: float; deprecated 9 use Y", False))),
    Rule("op-added", N, Scope.PRESENCE,
         "A new op.",
         "Nothing to fix; needs a minor version bump.",
         _op_added,
         (E("-", "in x: float", True), E("in x: float", "in x: float", False))),
    Rule("attr-added", N, P,
         "A new attr with a default.",
         "Nothing to fix; needs a minor version bump.",
         _attr_added,
         (E("", "attr a: int = 42", True), E("", "attr a: int", False))),
    Rule("attr-default-added", N, P,
         "An attr without a default now has one.",
         "Nothing to fix.",
         _attr_default_added,
         (E("attr a: int", "attr a: int = 1234", True),
          E("attr a: int = 1", "attr a: int = 1", False))),
    Rule("attr-allowed-values-widened", N, P,
         "An attr allows more values than before (or anything).",
         "Nothing to fix; make sure kernels exist for the new values.",
         _attr_widened,
         (E("attr t: {int32}", "attr t: {int32, float}", True),
          E("attr t: {int32, float}", "attr t: {float, int32}", False))),
    Rule("attr-minimum-lowered", N, P,
         "An attr's minimum went down or away.",
         "Nothing to fix.",
         _attr_minimum_lowered,
         (E("attr n: int >= 2", "attr n: int >= 1", True),
          E("attr n: int >= 1", "attr n: int >= 1", False))),
    Rule("ref-relaxed", N, P,
         "An input no longer needs a reference, or an output became one.",
         "Nothing to fix.",
         _ref_relaxed,
         (E("in i: Ref(int32)", "in i: int32", True), E("in i: int32", "in i: int32", False))),
    Rule("op-flags-changed", N, P,
         "is_commutative, is_aggregate, allows_uninitialized_input or "
         "is_distributed_communication changed.",
         "Check that optimizations relying on the flag still hold.",
         _flags_changed,
         (E("in x: float", "in x: float; commutative", True),
          E("in x: float", "in x: float", False))),
    Rule("kernel-added", N, Scope.KERNELS,
         "A kernel for a new (device, dtype).",
         "Nothing to fix.",
         _kernel_added,
         (E("in x: T; attr T: type; kernel CPU T=float",
            "in x: T; attr T: type; kernel CPU T=float; kernel GPU T=float", True),
          E("in x: T; attr T: type; kernel CPU T=float",
            "in x: T; attr T: type; kernel CPU T=float", False))),
)  # fmt: skip

RULES_BY_ID: dict[str, Rule] = {r.id: r for r in RULES}
