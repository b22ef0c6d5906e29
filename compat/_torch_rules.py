"""PyTorch's schema rules, as rows of the rule table.

The ``breaking`` rows are ``FunctionSchema::isBackwardCompatibleWith`` and
``isForwardCompatibleWith`` (aten/src/ATen/core/function_schema.cpp) taken apart: for a pair
of schemas, some row fires if and only if PyTorch's check rejects the pair. Arguments are
paired as PyTorch pairs them: by position up to the old schema's first ``out`` argument
(a keyword-only argument written to), new arguments between there and the new schema's first
``out`` argument, then ``out`` arguments from the end. Returns are compared in the backward
direction only, as PyTorch does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property

from opmarket.compat._rule import Example, Rule, Scope, Severity
from opmarket.compat._torch_schema import Argument, Schema
from opmarket.compat._torch_types import is_subtype, values_equal

__all__ = ["TORCH_RULES", "SchemaChange"]


def _first_out(args: tuple[Argument, ...]) -> int:
    for i, a in enumerate(args):
        if a.is_out:
            return i
    return len(args)


@dataclass(frozen=True)
class SchemaChange:
    """One schema in two releases (``new`` None when gone), checked in ``direction``."""

    old: Schema
    new: Schema | None
    direction: str = "backward"

    @property
    def backward(self) -> bool:
        return self.direction == "backward"

    @cached_property
    def _new(self) -> Schema:
        assert self.new is not None
        return self.new

    @cached_property
    def outs(self) -> tuple[int, int]:
        """Where the ``out`` arguments start in the old and the new schema."""
        return _first_out(self.old.arguments), _first_out(self._new.arguments)

    @cached_property
    def pairs(self) -> list[tuple[Argument, Argument]]:
        """(new, old) argument pairs that PyTorch compares, as it pairs them."""
        old, new = self.old.arguments, self._new.arguments
        old_out, new_out = self.outs
        last = old_out if self.backward else min(old_out, new_out)
        out = [(new[i], old[i]) for i in range(min(last, len(new)))]
        for i in range(old_out, len(old)):
            j = i - old_out + new_out
            if j < len(new):
                out.append((new[j], old[i]))
        return out

    @cached_property
    def added(self) -> tuple[Argument, ...]:
        """Arguments the new schema has before its ``out`` arguments and the old did not."""
        old_out, new_out = self.outs
        return self._new.arguments[old_out:new_out]


def _what(new: Argument, old: Argument) -> str:
    kind = "out argument" if old.is_out else "argument"
    return f"{kind} '{old.name}' ({old.text} -> {new.text})"


# ---------------------------------------------------------------- checks


def schema_removed(c: SchemaChange) -> Iterator[str]:
    if c.new is None:
        yield f"{c.old.full_name} is gone: {c.old.text}"


def schema_added(c: SchemaChange) -> Iterator[str]:
    # called with the new schema as ``old`` and no counterpart (see _torch_check)
    if c.new is None:
        yield f"new schema {c.old.text}"


def vararg_changed(c: SchemaChange) -> Iterator[str]:
    o, n = c.old, c._new
    if (o.is_vararg, o.is_varret) != (n.is_vararg, n.is_varret):
        yield f"'...' arguments or returns changed: {o.text} -> {n.text}"


def returns_count_changed(c: SchemaChange) -> Iterator[str]:
    o, n = c.old, c._new
    if len(o.returns) != len(n.returns):
        yield f"{len(o.returns)} returns became {len(n.returns)}"


def arguments_removed(c: SchemaChange) -> Iterator[str]:
    o, n = c.old.arguments, c._new.arguments
    if c.backward and len(n) < len(o):
        gone = ", ".join(f"'{a.name}'" for a in o if a.name not in {x.name for x in n})
        yield f"{len(o)} arguments became {len(n)}" + (f" ({gone} gone)" if gone else "")


def out_arguments_changed(c: SchemaChange) -> Iterator[str]:
    old_out, new_out = c.outs
    n_old = len(c.old.arguments) - old_out
    n_new = len(c._new.arguments) - new_out
    if (n_new < n_old) if c.backward else (n_new != n_old):
        yield f"{n_old} out arguments became {n_new}"


def argument_renamed(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if new.name != old.name:
            yield f"{_what(new, old)}: renamed or moved, callers pass it by name"


def argument_size_changed(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if new.n != old.n:
            yield f"{_what(new, old)}: the list's fixed size changed"


def argument_alias_changed(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if new.alias != old.alias:
            yield f"{_what(new, old)}: the alias annotation changed"


def argument_made_kwarg_only(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if new.kwarg_only and not old.kwarg_only:
            yield f"{_what(new, old)}: now keyword-only"


def argument_type_narrowed(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if c.backward and not is_subtype(old.type, new.type):
            yield f"{_what(new, old)}: {new.type} does not accept every {old.type}"


def argument_type_widened(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if not c.backward and not is_subtype(new.type, old.type):
            yield f"{_what(new, old)}: {new.type} accepts more than {old.type}"


def argument_default_removed(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if old.has_default and not new.has_default:
            yield f"{_what(new, old)}: the default is gone"


def argument_default_changed(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if old.has_default and new.has_default and not values_equal(old.default, new.default):
            yield f"{_what(new, old)}: the default changed"


def argument_default_added(c: SchemaChange) -> Iterator[str]:
    for new, old in c.pairs:
        if not c.backward and new.has_default and not old.has_default:
            yield f"{_what(new, old)}: a default was added"


def argument_added_without_default(c: SchemaChange) -> Iterator[str]:
    for a in c.added:
        if not a.has_default:
            yield f"new argument '{a.name}' ({a.text}) has no default"


def argument_added_with_list_default(c: SchemaChange) -> Iterator[str]:
    for a in c.added:
        if not c.backward and a.has_default and isinstance(a.default, tuple):
            yield f"new argument '{a.name}' ({a.text}) has a list as its default"


def argument_added(c: SchemaChange) -> Iterator[str]:
    for a in c.added:
        if a.has_default:
            yield f"new argument '{a.name}' ({a.text})"


def _return_pairs(c: SchemaChange) -> list[tuple[Argument, Argument]]:
    o, n = c.old.returns, c._new.returns
    return list(zip(n, o, strict=True)) if c.backward and len(o) == len(n) else []


def return_renamed(c: SchemaChange) -> Iterator[str]:
    for i, (new, old) in enumerate(_return_pairs(c)):
        if new.name != old.name:
            yield f"return {i} ({old.text} -> {new.text}): renamed"


def return_alias_changed(c: SchemaChange) -> Iterator[str]:
    for i, (new, old) in enumerate(_return_pairs(c)):
        if new.alias != old.alias:
            yield f"return {i} ({old.text} -> {new.text}): the alias annotation changed"


def return_type_changed(c: SchemaChange) -> Iterator[str]:
    for i, (new, old) in enumerate(_return_pairs(c)):
        if new.n != old.n or not is_subtype(new.type, old.type):
            yield f"return {i} ({old.text} -> {new.text}): callers expect {old.type}"


# ---------------------------------------------------------------- the rows

B, N = Severity.BREAKING, Severity.INFO
S = Scope.SCHEMA
BOTH = ("backward", "forward")
BACK = ("backward",)
FWD = ("forward",)
E = Example


def _row(  # noqa: PLR0917  (a table row)
    rule_id: str,
    severity: Severity,
    directions: tuple[str, ...],
    summary: str,
    hint: str,
    check: Callable[[SchemaChange], Iterable[str]],
    examples: tuple[Example, ...],
    scope: Scope = S,
) -> Rule[SchemaChange]:
    return Rule(rule_id, severity, scope, summary, hint, check, examples, "pytorch", directions)


F = "f(Tensor x) -> Tensor"

TORCH_RULES: tuple[Rule[SchemaChange], ...] = (
    _row(
        "schema-removed",
        B,
        BOTH,
        "An operator overload of the old release is missing (removed or renamed).",
        "Keep the old overload registered beside the new one.",
        schema_removed,
        (E(F, "-", True), E(F, F, False)),
        Scope.PRESENCE,
    ),
    _row(
        "schema-varargs-changed",
        B,
        BOTH,
        "The schema gained or lost '...' arguments or returns.",
        "Keep the '...' as it was; add a new overload for the new form.",
        vararg_changed,
        (E("f(...) -> ()", "f() -> ()", True), E("f(...) -> ()", "f(...) -> ()", False)),
    ),
    _row(
        "returns-count-changed",
        B,
        BOTH,
        "The number of returns changed.",
        "Keep the returns; add a new overload that returns more.",
        returns_count_changed,
        (
            E(F, "f(Tensor x) -> (Tensor, Tensor)", True),
            E(F, "f(Tensor x) -> Tensor y", False),
        ),
    ),
    _row(
        "arguments-removed",
        B,
        BACK,
        "The new schema has fewer arguments; programs that pass them fail.",
        "Keep every argument; one that no longer matters can keep a default and be ignored.",
        arguments_removed,
        (
            E("f(Tensor x, int n=1) -> Tensor", F, True),
            E(F, "f(Tensor x, int n=1) -> Tensor", False),
        ),
    ),
    _row(
        "out-arguments-changed",
        B,
        BOTH,
        "Out arguments (keyword-only, written to) were removed, or, forward, added.",
        "Keep the out arguments as they are; add a new overload for a new out form.",
        out_arguments_changed,
        (
            E("f(Tensor x, *, Tensor(a!) out) -> Tensor(a!)", "f(Tensor x) -> Tensor", True),
            E(
                "f(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
                "f(Tensor x, int n=1, *, Tensor(a!) out) -> Tensor(a!)",
                False,
            ),
        ),
    ),
    _row(
        "argument-renamed",
        B,
        BOTH,
        "An argument has another name at its place (renamed, reordered or inserted before "
        "it); callers pass arguments by name.",
        "Keep names and order; add new arguments after the old ones, before out arguments.",
        argument_renamed,
        (
            E("f(Tensor x, int dim) -> Tensor", "f(Tensor x, int axis) -> Tensor", True),
            E("f(Tensor x) -> Tensor", "f(Tensor x, int dim=0) -> Tensor", False),
        ),
    ),
    _row(
        "argument-size-changed",
        B,
        BOTH,
        "A list argument's fixed size changed (int[2] -> int[3] or int[]).",
        "Keep the size; take another size in a new overload.",
        argument_size_changed,
        (
            E("f(int[2] k) -> Tensor", "f(int[] k) -> Tensor", True),
            E("f(int[2] k) -> Tensor", "f(int[2] k) -> Tensor", False),
        ),
    ),
    _row(
        "argument-alias-changed",
        B,
        BOTH,
        "An argument's alias annotation changed (Tensor(a!) -> Tensor, a view or a write "
        "added or dropped).",
        "Keep the annotation; an op that now mutates or aliases differently is a new op.",
        argument_alias_changed,
        (
            E("f(Tensor(a!) x) -> Tensor(a!)", "f(Tensor x) -> Tensor(a!)", True),
            E("f(Tensor(a!) x) -> Tensor(a!)", "f(Tensor(a!) x) -> Tensor(a!)", False),
        ),
    ),
    _row(
        "argument-made-kwarg-only",
        B,
        BOTH,
        "A positional argument became keyword-only; callers that pass it by position fail.",
        "Keep it positional.",
        argument_made_kwarg_only,
        (
            E("f(Tensor x, int n=1) -> Tensor", "f(Tensor x, *, int n=1) -> Tensor", True),
            E("f(Tensor x, *, int n=1) -> Tensor", "f(Tensor x, int n=1) -> Tensor", False),
        ),
    ),
    _row(
        "argument-type-narrowed",
        B,
        BACK,
        "An argument's type no longer accepts every value the old type accepted (types may "
        "only widen: int -> Scalar, Tensor -> Tensor?).",
        "Keep the old type or widen it; take a narrower type in a new overload.",
        argument_type_narrowed,
        (
            E("f(Scalar s) -> Tensor", "f(int s) -> Tensor", True),
            E("f(int s) -> Tensor", "f(Scalar s) -> Tensor", False),
        ),
    ),
    _row(
        "argument-type-widened",
        B,
        FWD,
        "Forward: an argument's type accepts values the old release cannot take.",
        "Widen types in a new overload, or accept that programs made now fail on the old release.",
        argument_type_widened,
        (
            E("f(int s) -> Tensor", "f(Scalar s) -> Tensor", True),
            E("f(Scalar s) -> Tensor", "f(int s) -> Tensor", False),
        ),
    ),
    _row(
        "argument-default-removed",
        B,
        BOTH,
        "An argument lost its default; callers that leave it out fail.",
        "Keep the default.",
        argument_default_removed,
        (
            E("f(Tensor x, int n=1) -> Tensor", "f(Tensor x, int n) -> Tensor", True),
            E("f(Tensor x, int n) -> Tensor", "f(Tensor x, int n=1) -> Tensor", False),
        ),
    ),
    _row(
        "argument-default-changed",
        B,
        BOTH,
        "An argument's default changed (1 and 1.0 differ for a Scalar), so saved programs "
        "silently compute something else.",
        "Keep the old default; add a new argument for the new behaviour.",
        argument_default_changed,
        (
            E("f(Tensor x, int n=1) -> Tensor", "f(Tensor x, int n=2) -> Tensor", True),
            E("f(Tensor x, float a=1) -> Tensor", "f(Tensor x, float a=1.0) -> Tensor", False),
        ),
    ),
    _row(
        "argument-default-added",
        B,
        FWD,
        "Forward: an argument without a default gained one; programs made now may leave it "
        "out, which the old release cannot run.",
        "Add defaults only with a new overload, or accept the forward break.",
        argument_default_added,
        (
            E("f(Tensor x, int n) -> Tensor", "f(Tensor x, int n=1) -> Tensor", True),
            E("f(Tensor x, int n=1) -> Tensor", "f(Tensor x, int n=1) -> Tensor", False),
        ),
    ),
    _row(
        "argument-added-without-default",
        B,
        BOTH,
        "A new argument (before the out arguments) has no default, so old callers lack it.",
        "Give the new argument a default that reproduces the old behaviour.",
        argument_added_without_default,
        (
            E(F, "f(Tensor x, int n) -> Tensor", True),
            E(F, "f(Tensor x, int n=0) -> Tensor", False),
        ),
    ),
    _row(
        "argument-added-with-list-default",
        B,
        FWD,
        "Forward: a new argument's default is a list, which PyTorch's forward check refuses.",
        "Use None as the default (an optional list) and read None as the old behaviour.",
        argument_added_with_list_default,
        (
            E(F, "f(Tensor x, int[] d=[0]) -> Tensor", True),
            E(F, "f(Tensor x, int[]? d=None) -> Tensor", False),
        ),
    ),
    _row(
        "return-renamed",
        B,
        BACK,
        "A return was renamed; callers read named returns by name.",
        "Keep the return's name.",
        return_renamed,
        (
            E("f(Tensor x) -> Tensor a", "f(Tensor x) -> Tensor b", True),
            E("f(Tensor x) -> Tensor a", "f(Tensor x) -> Tensor a", False),
        ),
    ),
    _row(
        "return-alias-changed",
        B,
        BACK,
        "A return's alias annotation changed.",
        "Keep the annotation; an op that now aliases differently is a new op.",
        return_alias_changed,
        (
            E("f(Tensor(a) x) -> Tensor(a)", "f(Tensor(a) x) -> Tensor", True),
            E("f(Tensor(a) x) -> Tensor(a)", "f(Tensor(a) x) -> Tensor(a)", False),
        ),
    ),
    _row(
        "return-type-changed",
        B,
        BACK,
        "A return's type is not one the old type's callers can take (returns may only "
        "narrow: Tensor? -> Tensor).",
        "Keep the return type or narrow it.",
        return_type_changed,
        (
            E("f(Tensor x) -> Tensor", "f(Tensor x) -> Tensor?", True),
            E("f(Tensor x) -> Tensor?", "f(Tensor x) -> Tensor", False),
        ),
    ),
    _row(
        "schema-added",
        N,
        BOTH,
        "A new operator overload.",
        "Nothing to fix; needs a minor version bump.",
        schema_added,
        (E("-", F, True), E(F, F, False)),
        Scope.PRESENCE,
    ),
    _row(
        "argument-added",
        N,
        BOTH,
        "A new argument with a default.",
        "Nothing to fix; needs a minor version bump.",
        argument_added,
        (E(F, "f(Tensor x, int n=0) -> Tensor", True), E(F, F, False)),
    ),
)
