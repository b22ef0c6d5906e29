"""One op in two releases, and what TensorFlow's checker computes from the pair.

The analyses are computed once, on first use, and shared by every rule that needs them.
``arg_signature`` is TensorFlow's ComputeArgSignature (op_def_util.cc), kept token by token
so a mismatch can be explained, not just detected.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opmarket.registry import inferred_attrs
from opmarket.sdk import ArgDef, AttrDef, DType, KernelDef, OpDef

__all__ = ["OpChange", "SigToken", "arg_signature"]


@dataclass(frozen=True, slots=True)
class SigToken:
    """One tensor of an input or output list: its arg, its type text, and its ref-ness."""

    arg: str
    type: str  # "float", "T" (an attr both releases have), "N * T", ...
    is_ref: bool
    named: bool  # outputs are compared with their names, inputs without

    @property
    def text(self) -> str:
        return f"{self.arg}:{self.type}" if self.named else self.type


def _dtype_name(value: Any) -> str:
    if isinstance(value, int) and value in DType._value2member_map_:
        return DType(value).spec_name
    return "INVALID" if value in (None, 0) else f"unknown dtype enum ({value})"


def _default_as(attr: AttrDef | None, kind: str) -> Any:
    """The attr's default read as a ``kind`` value, as TensorFlow reads a proto field: a
    missing attr, a missing default or a default of another kind reads as unset."""
    if attr is None or attr.default is None or attr.type != kind:
        return None
    return attr.default


def arg_signature(
    args: Sequence[ArgDef],
    old_attrs: Mapping[str, AttrDef],
    new_attrs: Mapping[str, AttrDef],
    named: bool,
) -> list[SigToken]:
    """The args as TensorFlow's ComputeArgSignature lists them: attrs both releases have
    stay symbolic, attrs only the new release has are replaced by their defaults."""
    out: list[SigToken] = []
    for arg in args:
        if arg.type_list_attr:
            if arg.type_list_attr in old_attrs:
                out.append(SigToken(arg.name, arg.type_list_attr, arg.is_ref, named))
            else:
                types = _default_as(new_attrs.get(arg.type_list_attr), "list(type)") or ()
                out.extend(SigToken(arg.name, _dtype_name(t), arg.is_ref, named) for t in types)
            continue
        num = 1
        prefix = ""
        if arg.number_attr:
            if arg.number_attr in old_attrs:
                prefix = f"{arg.number_attr} * "
            else:
                num = _default_as(new_attrs.get(arg.number_attr), "int") or 0
        if arg.type is not DType.INVALID:
            type_text = arg.type.spec_name
        elif arg.type_attr in old_attrs:
            type_text = arg.type_attr
        else:
            type_text = _dtype_name(_default_as(new_attrs.get(arg.type_attr), "type"))
        out.extend(SigToken(arg.name, prefix + type_text, arg.is_ref, named) for _ in range(num))
    return out


class OpChange:
    """An op as two releases define it; ``old`` or ``new`` is None when it is missing.

    When both are present, the attr maps and TensorFlow's arg signatures are computed up
    front: nearly every rule needs them, and plain attributes are cheaper than lazy ones.
    """

    __slots__ = (
        "_inferred",
        "common_attrs",
        "inputs_match",
        "new",
        "new_attrs",
        "new_inputs",
        "new_kernels",
        "new_outputs",
        "old",
        "old_attrs",
        "old_inputs",
        "old_kernels",
        "old_outputs",
        "outputs_match",
        "outputs_match_unnamed",
        "renamed_to",
    )

    def __init__(
        self,
        old: OpDef | None,
        new: OpDef | None,
        old_kernels: Sequence[KernelDef] | None = None,
        new_kernels: Sequence[KernelDef] | None = None,
    ) -> None:
        self.old = old
        self.new = new
        # None: this side's kernels are not known (a TensorFlow text file, a spec document).
        self.old_kernels = old_kernels
        self.new_kernels = new_kernels
        self.renamed_to: str | None = None  # set by the engine when a removed op looks renamed
        self._inferred: tuple[frozenset[str], frozenset[str]] | None = None
        self.old_attrs: dict[str, AttrDef] = {a.name: a for a in old.attrs} if old else {}
        self.new_attrs: dict[str, AttrDef] = {a.name: a for a in new.attrs} if new else {}
        #: (old, new) for every attr of the old op that the new one still has, in old order.
        self.common_attrs: list[tuple[AttrDef, AttrDef]] = []
        self.old_inputs: list[SigToken] = []
        self.new_inputs: list[SigToken] = []
        self.old_outputs: list[SigToken] = []
        self.new_outputs: list[SigToken] = []
        self.inputs_match = self.outputs_match = self.outputs_match_unnamed = True
        if old is None or new is None:
            return
        olds, news = self.old_attrs, self.new_attrs
        self.common_attrs = [(a, news[a.name]) for a in old.attrs if a.name in news]
        self.old_inputs = arg_signature(old.inputs, olds, news, False)
        self.new_inputs = arg_signature(new.inputs, olds, news, False)
        self.old_outputs = arg_signature(old.outputs, olds, news, True)
        self.new_outputs = arg_signature(new.outputs, olds, news, True)
        self.inputs_match = [t.type for t in self.old_inputs] == [t.type for t in self.new_inputs]
        self.outputs_match_unnamed = [t.type for t in self.old_outputs] == [
            t.type for t in self.new_outputs
        ]
        self.outputs_match = self.outputs_match_unnamed and [t.arg for t in self.old_outputs] == [
            t.arg for t in self.new_outputs
        ]

    @property
    def name(self) -> str:
        op = self.new or self.old
        assert op is not None
        return op.name

    @property
    def pair(self) -> tuple[OpDef, OpDef]:
        assert self.old is not None and self.new is not None
        return self.old, self.new

    def inferred(self) -> tuple[frozenset[str], frozenset[str]]:
        """The attrs each release's Python wrapper infers from its inputs (old, new), as
        the wrapper generator decides them."""
        if self._inferred is None:
            old, new = self.pair
            self._inferred = inferred_attrs(old), inferred_attrs(new)
        return self._inferred
