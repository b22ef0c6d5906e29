"""The checks behind the rule table (``_rules.RULES``): one function per rule, each yielding a
message for every time its rule fires on an op's change between two releases."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from opmarket.compat._change import OpChange, SigToken
from opmarket.compat._kernels import coverage, describe_combo
from opmarket.compat._values import show_value, values_equal
from opmarket.sdk import AttrDef

__all__ = [
    "attr_added",
    "attr_added_without_default",
    "attr_default_added",
    "attr_default_changed",
    "attr_default_removed",
    "attr_minimum_added",
    "attr_minimum_lowered",
    "attr_minimum_raised",
    "attr_narrowed",
    "attr_removed",
    "attr_restriction_added",
    "attr_type_changed",
    "attr_widened",
    "flags_changed",
    "input_became_ref",
    "input_signature",
    "kernel_added",
    "kernel_removed",
    "op_added",
    "op_deprecated",
    "op_removed",
    "output_lost_ref",
    "output_renamed",
    "output_signature",
    "python_signature",
    "ref_relaxed",
    "stateful_changed",
]


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
    return (
        "{"
        + show_value(attr.type if attr.is_list else f"list({attr.type})", attr.allowed_values)[1:-1]
        + "}"
    )


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


def op_removed(c: OpChange) -> Iterator[str]:
    if c.old is not None and c.new is None:
        guess = f" (renamed to {c.renamed_to}?)" if c.renamed_to else ""
        yield f"op {c.old.name} is gone from the new release{guess}"


def op_added(c: OpChange) -> Iterator[str]:
    if c.old is None and c.new is not None:
        yield f"new op {c.new.name}"


# ---------------------------------------------------------------- attrs (TensorFlow)


def attr_removed(c: OpChange) -> Iterator[str]:
    for a in c.pair[0].attrs:
        if a.name not in c.new_attrs:
            yield f"attr '{a.name}' removed (was {a.spec})"


def attr_type_changed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.type != new.type:
            yield f"attr '{old.name}' changed type from {old.type} to {new.type}"


def attr_restriction_added(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.allowed_values is None and new.allowed_values is not None:
            yield f"attr '{old.name}' was unrestricted, now allows only {_show_allowed(new)}"


def attr_narrowed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if (
            old.allowed_values is not None
            and new.allowed_values is not None
            and _narrowed(old, new)
        ):
            yield (
                f"attr '{old.name}' allows fewer values: from {_show_allowed(old)} to "
                f"{_show_allowed(new)}"
            )


def attr_minimum_added(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if new.has_minimum and not old.has_minimum:
            yield f"attr '{old.name}' gained a minimum of {new.minimum}"


def attr_minimum_raised(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if new.has_minimum and old.has_minimum and new.minimum > old.minimum:
            yield f"attr '{old.name}' minimum raised from {old.minimum} to {new.minimum}"


def attr_added_without_default(c: OpChange) -> Iterator[str]:
    for a in c.pair[1].attrs:
        if a.name not in c.old_attrs and a.default is None:
            yield f"attr '{a.name}' added without a default ({a.spec})"


def attr_default_removed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.default is not None and new.default is None:
            yield f"attr '{old.name}' lost its default {_default(old)}"


def attr_default_changed(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if (
            old.default is not None
            and new.default is not None
            and (old.type != new.type or not values_equal(old.type, old.default, new.default))
        ):
            yield f"attr '{old.name}' default changed from {_default(old)} to {_default(new)}"


# ---------------------------------------------------------------- signatures (TensorFlow)


def input_signature(c: OpChange) -> Iterator[str]:
    if not c.inputs_match:
        yield _explain(c.old_inputs, c.new_inputs, "input")


def input_became_ref(c: OpChange) -> Iterator[str]:
    if c.inputs_match:
        for i, (o, n) in enumerate(zip(c.old_inputs, c.new_inputs, strict=True)):
            if n.is_ref and not o.is_ref:
                yield f"input {i} ('{n.arg}') changed from a value to a reference (Ref)"


def output_renamed(c: OpChange) -> Iterator[str]:
    if not c.outputs_match and c.outputs_match_unnamed:
        for o, n in zip(c.old_outputs, c.new_outputs, strict=True):
            if o.arg != n.arg:
                yield (
                    f"output '{o.arg}' renamed to '{n.arg}'; TensorFlow sees "
                    f"'{_sig_text(c.old_outputs)}' vs. '{_sig_text(c.new_outputs)}'"
                )
                return


def output_signature(c: OpChange) -> Iterator[str]:
    if not c.outputs_match and not c.outputs_match_unnamed:
        yield _explain(c.old_outputs, c.new_outputs, "output")


def output_lost_ref(c: OpChange) -> Iterator[str]:
    if c.outputs_match:
        for i, (o, n) in enumerate(zip(c.old_outputs, c.new_outputs, strict=True)):
            if o.is_ref and not n.is_ref:
                yield f"output {i} ('{o.arg}') changed from a reference (Ref) to a value"


# ---------------------------------------------------------------- what users feel


def python_signature(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    fn = new.python_name + "()" if old.inputs != new.inputs else ""
    for o, n in zip(old.inputs, new.inputs, strict=False):
        if o.name != n.name:
            yield f"{fn}: input '{o.name}' is now called '{n.name}'; keyword callers break"
    for n in new.inputs[len(old.inputs) :]:
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


def stateful_changed(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    if old.is_stateful != new.is_stateful:
        now = "stateful" if new.is_stateful else "stateless"
        yield f"op is now {now}: constant folding, caching and retracing treat it differently"


def op_deprecated(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    dep = new.deprecation
    if dep is not None and (old.deprecation is None or dep.version < old.deprecation.version):
        why = f": {dep.explanation}" if dep.explanation else ""
        yield f"op is deprecated from GraphDef version {dep.version}{why}"


_FLAGS = (
    "is_commutative",
    "is_aggregate",
    "allows_uninitialized_input",
    "is_distributed_communication",
)


def flags_changed(c: OpChange) -> Iterator[str]:
    old, new = c.pair
    for flag in _FLAGS:
        if getattr(old, flag) != getattr(new, flag):
            yield f"{flag} changed from {getattr(old, flag)} to {getattr(new, flag)}"


# ---------------------------------------------------------------- additions


def attr_added(c: OpChange) -> Iterator[str]:
    for a in c.pair[1].attrs:
        if a.name not in c.old_attrs and a.default is not None:
            yield f"new attr '{a.name}' ({a.spec})"


def attr_default_added(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.default is None and new.default is not None:
            yield f"attr '{old.name}' now defaults to {_default(new)}"


def attr_widened(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.allowed_values is None or old.type != new.type:
            continue
        if new.allowed_values is None:
            yield f"attr '{old.name}' is no longer restricted (was {_show_allowed(old)})"
        elif _narrowed(new, old) and not _narrowed(old, new):
            yield f"attr '{old.name}' allows more values: {_show_allowed(new)}"


def attr_minimum_lowered(c: OpChange) -> Iterator[str]:
    for old, new in c.common_attrs:
        if old.has_minimum and (not new.has_minimum or new.minimum < old.minimum):
            to = str(new.minimum) if new.has_minimum else "none"
            yield f"attr '{old.name}' minimum lowered from {old.minimum} to {to}"


def ref_relaxed(c: OpChange) -> Iterator[str]:
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


def kernel_removed(c: OpChange) -> Iterator[str]:
    old, new = _kernel_sides(c)
    gone = old - new
    if gone:
        yield f"no kernel any more for {_group(gone)}"


def kernel_added(c: OpChange) -> Iterator[str]:
    old, new = _kernel_sides(c)
    added = new - old
    if added:
        yield f"new kernel(s) for {_group(added)}"
