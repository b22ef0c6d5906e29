"""The rule table: every check compat-check makes, as data (id, severity, summary, hint, check).

``breaking`` rules on op definitions are exactly TensorFlow's (OpDefCompatible and
OpDefAttrDefaultsUnchanged in tensorflow/core/framework/op_def_util.cc): together they fire
for a change if and only if TensorFlow rejects it. ``warning`` rules report what TensorFlow
allows but users feel; ``info`` rules report additions. docs/compat-rules.md and the rule
tests are generated from this table, examples included.
"""

from __future__ import annotations

from typing import Any

from opmarket.compat import _rule_checks as c
from opmarket.compat._change import OpChange
from opmarket.compat._rule import Example, Rule, Scope, Severity
from opmarket.compat._torch_rules import TORCH_RULES

__all__ = ["RULES", "RULES_BY_ID", "TENSORFLOW_RULES", "Example", "Rule", "Scope", "Severity"]


# ---------------------------------------------------------------- the table

B, W, N = Severity.BREAKING, Severity.WARNING, Severity.INFO
P = Scope.PAIR
E = Example

TENSORFLOW_RULES: tuple[Rule[OpChange], ...] = (
    Rule(
        "op-removed",
        B,
        Scope.PRESENCE,
        "An op of the old release is missing (removed or renamed).",
        "Keep the old op registered (deprecate it instead), and add the new name beside it.",
        c.op_removed,
        (E("in x: float", "-", True), E("in x: float", "in x: float", False)),
    ),
    Rule(
        "attr-removed",
        B,
        P,
        "An attr of the old op is gone; graphs that set it no longer load.",
        "Keep the attr; if it no longer matters, give it a default and ignore it.",
        c.attr_removed,
        (E("attr a: int", "", True), E("attr a: int", "attr a: int", False)),
    ),
    Rule(
        "attr-type-changed",
        B,
        P,
        "An attr changed type (int -> list(int), type -> list(type), ...).",
        "Add a new attr with the new type and a default, and keep the old one.",
        c.attr_type_changed,
        (E("attr a: int", "attr a: list(int)", True), E("attr a: int", "attr a: int = 3", False)),
    ),
    Rule(
        "attr-restriction-added",
        B,
        P,
        "An attr that allowed anything now has a list of allowed values.",
        "Keep the attr unrestricted and reject bad values in the kernel.",
        c.attr_restriction_added,
        (
            E("attr t: type", "attr t: {int32, int64}", True),
            E("attr t: {int32}", "attr t: type", False),
        ),
    ),
    Rule(
        "attr-allowed-values-narrowed",
        B,
        P,
        "A value an attr allowed before is no longer allowed.",
        "Allow every old value; add new values only.",
        c.attr_narrowed,
        (
            E("attr t: {int32, int64, bool}", "attr t: {int32, int64}", True),
            E("attr a: {'A', 'B'}", "attr a: {'A', 'B', 'C'}", False),
        ),
    ),
    Rule(
        "attr-minimum-added",
        B,
        P,
        "An attr without a minimum now has one.",
        "Leave the minimum off and check the value in the kernel.",
        c.attr_minimum_added,
        (E("attr n: int", "attr n: int >= 3", True), E("attr n: int >= 3", "attr n: int", False)),
    ),
    Rule(
        "attr-minimum-raised",
        B,
        P,
        "An attr's minimum went up.",
        "Keep the old minimum.",
        c.attr_minimum_raised,
        (
            E("attr n: int >= 1", "attr n: int >= 3", True),
            E("attr n: int >= 3", "attr n: int >= 1", False),
        ),
    ),
    Rule(
        "attr-added-without-default",
        B,
        P,
        "A new attr has no default, so graphs made before it existed lack a value.",
        "Give the new attr a default that reproduces the old behaviour.",
        c.attr_added_without_default,
        (E("", "attr a: int", True), E("", "attr a: int = 42", False)),
    ),
    Rule(
        "attr-default-removed",
        B,
        P,
        "An attr lost its default; graphs that relied on it lack a value.",
        "Keep the default.",
        c.attr_default_removed,
        (E("attr a: int = 91", "attr a: int", True), E("attr a: int", "attr a: int = 91", False)),
    ),
    Rule(
        "attr-default-changed",
        B,
        P,
        "An attr's default changed, so saved graphs silently change meaning.",
        "Keep the old default; add a new attr (with the old behaviour as its default) instead.",
        c.attr_default_changed,
        (
            E("attr a: int = 2", "attr a: int = 1", True),
            E("attr a: int = 2", "attr a: int = 2", False),
        ),
    ),
    Rule(
        "input-signature-changed",
        B,
        P,
        "The inputs changed (type, count, order or list-ness) once new attrs take defaults.",
        "Keep the inputs; a new list input needs a length default of 0, a type made "
        "polymorphic a type attr defaulting to the old type.",
        c.input_signature,
        (
            E("in a: int32", "in a: float", True),
            E("in a: int32", "in a: T; attr T: type = DT_INT32", False),
            E("", "in a: N * int32; attr N: int >= 0 = 0", False),
            E("", "in a: N * int32; attr N: int >= 0 = 1", True),
        ),
    ),
    Rule(
        "input-became-ref",
        B,
        P,
        "An input changed from a value to a reference (Ref).",
        "Inputs may stop being references, never start.",
        c.input_became_ref,
        (E("in i: int32", "in i: Ref(int32)", True), E("in i: Ref(int32)", "in i: int32", False)),
    ),
    Rule(
        "output-signature-changed",
        B,
        P,
        "The outputs changed (type, count or list-ness) once new attrs take defaults.",
        "Keep the outputs; add a new op for the new behaviour.",
        c.output_signature,
        (E("out o: int32", "out o: float", True), E("out o: float", "out o: float", False)),
    ),
    Rule(
        "output-renamed",
        B,
        P,
        "An output was renamed; functions refer to outputs by name.",
        "Keep the output's name.",
        c.output_renamed,
        (E("out old: int32", "out new: int32", True), E("in old: int32", "in new: int32", False)),
    ),
    Rule(
        "output-lost-ref",
        B,
        P,
        "An output changed from a reference (Ref) to a value.",
        "Outputs may become references, never stop being one.",
        c.output_lost_ref,
        (
            E("out o: Ref(int32)", "out o: int32", True),
            E("out o: int32", "out o: Ref(int32)", False),
        ),
    ),
    Rule(
        "kernel-removed",
        B,
        Scope.KERNELS,
        "A kernel for a (device, dtype) of the old release is gone.",
        "Keep a kernel for every device and dtype the old release served.",
        c.kernel_removed,
        (
            E(
                "in x: T; attr T: type; kernel CPU T=float,int32",
                "in x: T; attr T: type; kernel CPU T=float",
                True,
            ),
            E(
                "in x: T; attr T: type; kernel CPU T=float",
                "in x: T; attr T: type; kernel CPU T=float; kernel GPU T=float",
                False,
            ),
        ),
    ),
    Rule(
        "graph-invalid",
        B,
        Scope.GRAPH,
        "A graph saved with the old release does not validate against the new op-set.",
        "Fix the op change that the message names; see the other findings.",
        None,
    ),
    Rule(
        "graph-default-changed",
        B,
        Scope.GRAPH,
        "A node of a saved graph leaves an attr to its default, and that default changed: the "
        "graph still loads but computes something else.",
        "Keep the old default; graphs saved from now on store every value (format_version 3).",
        None,
    ),
    Rule(
        "graph-invalid-before",
        W,
        Scope.GRAPH,
        "A graph in --graphs does not validate against the old release either, so it "
        "proves nothing about the change.",
        "Replace it with a graph saved by the old release.",
        None,
    ),
    Rule(
        "invalid-opdef",
        W,
        Scope.DOCUMENT,
        "An op definition breaks the OpDef rules (TensorFlow's ValidateOpDef).",
        "Fix the definition; opmarket will not load the op as it is.",
        None,
    ),
    Rule(
        "python-signature-changed",
        W,
        P,
        "The generated Python wrapper changed for existing callers.",
        "Keep input names and order; give new inputs and attrs defaults.",
        c.python_signature,
        (
            E("in x: float", "in y: float", True),
            E("in x: float", "in x: float; attr a: int = 1", False),
            E("in x: float", "in x: float; in extra: N * float; attr N: int >= 0 = 0", True),
        ),
    ),
    Rule(
        "stateful-changed",
        W,
        P,
        "The op became stateful or stateless; optimizers and caches treat it differently.",
        "Keep the flag, or release the change as a new op.",
        c.stateful_changed,
        (
            E("in x: float", "in x: float; stateful", True),
            E("in x: float; stateful", "in x: float; stateful", False),
        ),
    ),
    Rule(
        "op-deprecated",
        W,
        P,
        "The op is now deprecated; graphs at or after the version stop loading.",
        "Tell users what to use instead, in the explanation.",
        c.op_deprecated,
        (
            E("in x: float", "in x: float; deprecated 9 use Y", True),
            E("in x: float; deprecated 9 use Y", "in x: float; deprecated 9 use Y", False),
        ),
    ),
    Rule(
        "op-added",
        N,
        Scope.PRESENCE,
        "A new op.",
        "Nothing to fix; needs a minor version bump.",
        c.op_added,
        (E("-", "in x: float", True), E("in x: float", "in x: float", False)),
    ),
    Rule(
        "attr-added",
        N,
        P,
        "A new attr with a default.",
        "Nothing to fix; needs a minor version bump.",
        c.attr_added,
        (E("", "attr a: int = 42", True), E("", "attr a: int", False)),
    ),
    Rule(
        "attr-default-added",
        N,
        P,
        "An attr without a default now has one.",
        "Nothing to fix.",
        c.attr_default_added,
        (
            E("attr a: int", "attr a: int = 1234", True),
            E("attr a: int = 1", "attr a: int = 1", False),
        ),
    ),
    Rule(
        "attr-allowed-values-widened",
        N,
        P,
        "An attr allows more values than before (or anything).",
        "Nothing to fix; make sure kernels exist for the new values.",
        c.attr_widened,
        (
            E("attr t: {int32}", "attr t: {int32, float}", True),
            E("attr t: {int32, float}", "attr t: {float, int32}", False),
        ),
    ),
    Rule(
        "attr-minimum-lowered",
        N,
        P,
        "An attr's minimum went down or away.",
        "Nothing to fix.",
        c.attr_minimum_lowered,
        (
            E("attr n: int >= 2", "attr n: int >= 1", True),
            E("attr n: int >= 1", "attr n: int >= 1", False),
        ),
    ),
    Rule(
        "ref-relaxed",
        N,
        P,
        "An input no longer needs a reference, or an output became one.",
        "Nothing to fix.",
        c.ref_relaxed,
        (E("in i: Ref(int32)", "in i: int32", True), E("in i: int32", "in i: int32", False)),
    ),
    Rule(
        "op-flags-changed",
        N,
        P,
        "is_commutative, is_aggregate, allows_uninitialized_input or "
        "is_distributed_communication changed.",
        "Check that optimizations relying on the flag still hold.",
        c.flags_changed,
        (
            E("in x: float", "in x: float; commutative", True),
            E("in x: float", "in x: float", False),
        ),
    ),
    Rule(
        "kernel-added",
        N,
        Scope.KERNELS,
        "A kernel for a new (device, dtype).",
        "Nothing to fix.",
        c.kernel_added,
        (
            E(
                "in x: T; attr T: type; kernel CPU T=float",
                "in x: T; attr T: type; kernel CPU T=float; kernel GPU T=float",
                True,
            ),
            E(
                "in x: T; attr T: type; kernel CPU T=float",
                "in x: T; attr T: type; kernel CPU T=float",
                False,
            ),
        ),
    ),
)

#: The one table: TensorFlow's rules, then PyTorch's schema rules (compat/_torch_rules.py).
RULES: tuple[Rule[Any], ...] = (*TENSORFLOW_RULES, *TORCH_RULES)

RULES_BY_ID: dict[str, Rule[Any]] = {r.id: r for r in RULES}
