"""The OpDef model: immutable, typed mirrors of TensorFlow's OpDef, ArgDef and AttrDef."""

from __future__ import annotations

import keyword
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from opmarket.sdk._dtypes import DType
from opmarket.sdk._values import AttrValue, FullType

__all__ = ["ArgDef", "AttrDef", "AttrType", "Deprecation", "OpDef", "py_name", "snake_case"]


class AttrType(NamedTuple):
    """An attr type string taken apart: ``list(int)`` is ``AttrType("int", True)``."""

    base: str
    is_list: bool

    @classmethod
    def parse(cls, text: str) -> AttrType:
        """Split ``text``; a malformed ``list(`` spelling stays whole (an unknown base type)."""
        found = _PARSED.get(text)
        if found is None:
            if text.startswith("list(") and text.endswith(")"):
                found = cls(text[5:-1], True)
            else:
                found = cls(text, False)
            if len(_PARSED) < 256:  # the attr types that exist are few; keep them
                _PARSED[text] = found
        return found

    def __str__(self) -> str:
        return f"list({self.base})" if self.is_list else self.base


_PARSED: dict[str, AttrType] = {}


@dataclass(frozen=True, slots=True)
class ArgDef:
    """An input or output: one tensor, or a list of ``number_attr`` or ``type_list_attr`` tensors.

    Exactly one of ``type`` (a fixed dtype), ``type_attr`` or ``type_list_attr`` says its type.
    """

    name: str
    type: DType = DType.INVALID
    type_attr: str = ""
    number_attr: str = ""
    type_list_attr: str = ""
    is_ref: bool = False
    description: str = ""
    full_type: FullType | None = None

    @property
    def is_list(self) -> bool:
        """True when the argument is a list of tensors."""
        return bool(self.number_attr or self.type_list_attr)

    @property
    def spec(self) -> str:
        """The argument as a REGISTER_OP spec string, e.g. ``"values: N * T"``."""
        body = (
            self.type.spec_name
            if self.type is not DType.INVALID
            else (self.type_attr or self.type_list_attr)
        )
        if self.number_attr:
            body = f"{self.number_attr} * {body}"
        if self.is_ref:
            body = f"Ref({body})"
        return f"{self.name}: {body}"


@dataclass(frozen=True, slots=True)
class AttrDef:
    """An attr: its type string (``int``, ``list(type)``, ...), default, constraints and doc.

    ``default`` is None when the attr has no default; ``allowed_values`` is None when it is
    unrestricted, else the tuple of allowed values (dtypes for type attrs, str for strings).
    """

    name: str
    type: str
    default: AttrValue | None = None
    allowed_values: tuple[Any, ...] | None = None
    has_minimum: bool = False
    minimum: int = 0
    description: str = ""

    @property
    def is_list(self) -> bool:
        """True for a ``list(...)`` attr type, such as ``list(int)``."""
        return AttrType.parse(self.type).is_list

    @property
    def base_type(self) -> str:
        """The element type: ``int`` for both ``int`` and ``list(int)``."""
        return AttrType.parse(self.type).base

    @property
    def spec(self) -> str:
        """The attr as a REGISTER_OP spec string, e.g. ``"T: {float, int32} = DT_INT32"``."""
        from opmarket.sdk._spec import format_attr  # the grammar lives with the parser

        return format_attr(self)


@dataclass(frozen=True, slots=True)
class Deprecation:
    """The GraphDef version from which an op is gone, and why."""

    version: int
    explanation: str = ""


_NAMESPACE_SEP = ">"


@dataclass(frozen=True, slots=True)
class OpDef:
    """One op's definition, field for field what TensorFlow's OpDefBuilder produces."""

    name: str
    inputs: tuple[ArgDef, ...] = ()
    outputs: tuple[ArgDef, ...] = ()
    attrs: tuple[AttrDef, ...] = ()
    control_outputs: tuple[str, ...] = ()
    deprecation: Deprecation | None = None
    summary: str = ""
    description: str = ""
    is_commutative: bool = False
    is_aggregate: bool = False
    is_stateful: bool = False
    allows_uninitialized_input: bool = False
    is_distributed_communication: bool = False
    _attr_index: dict[str, AttrDef] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        self._attr_index.update((a.name, a) for a in self.attrs)

    def attr(self, name: str) -> AttrDef | None:
        """The attr called ``name``, or None."""
        return self._attr_index.get(name)

    def input(self, name: str) -> ArgDef | None:
        """The input called ``name``, or None."""
        return next((a for a in self.inputs if a.name == name), None)

    def output(self, name: str) -> ArgDef | None:
        """The output called ``name``, or None."""
        return next((a for a in self.outputs if a.name == name), None)

    @property
    def namespace(self) -> str:
        """The part before the last ``>`` (``Opm`` in ``Opm>ZeroOut``), or ``""``."""
        return self.name.rpartition(_NAMESPACE_SEP)[0]

    @property
    def short_name(self) -> str:
        """The name without its namespace (``ZeroOut`` in ``Opm>ZeroOut``)."""
        return self.name.rpartition(_NAMESPACE_SEP)[2]

    @property
    def python_name(self) -> str:
        """The snake_case name of the generated Python wrapper, e.g. ``zero_out``."""
        return snake_case(self.short_name)

    def replace(self, **changes: Any) -> OpDef:
        """A copy with some fields changed (the model is immutable)."""
        return replace(self, **changes)

    def without_docs(self) -> OpDef:
        """A copy with every summary and description removed, as TensorFlow's ops.pbtxt has."""
        return replace(
            self,
            summary="",
            description="",
            inputs=tuple(replace(a, description="") for a in self.inputs),
            outputs=tuple(replace(a, description="") for a in self.outputs),
            attrs=tuple(replace(a, description="") for a in self.attrs),
        )


def py_name(name: str, taken: set[str]) -> str:
    """``name`` as a Python parameter name not in ``taken`` (no keyword, no leading ``_``),
    added to ``taken``: how ``opmarket.ops``' wrappers and the framework bridges name an
    op's inputs and attrs."""
    out = name
    while keyword.iskeyword(out) or out in taken or out.startswith("_"):
        out = out + "_" if not out.startswith("_") else "a" + out
    taken.add(out)
    return out


def snake_case(name: str) -> str:
    """The Python name of an op, as TensorFlow makes it: ``ZeroOut`` -> ``zero_out``.

    An underscore goes before a capital that follows a lower-case letter, or that follows a
    capital and precedes a lower-case letter (``CTCLoss`` -> ``ctc_loss``).
    """
    out: list[str] = []
    for i, c in enumerate(name):
        if c.isupper() and i > 0:
            prev = name[i - 1]
            nxt = name[i + 1] if i + 1 < len(name) else ""
            if prev.islower() or (prev.isupper() and nxt.islower()):
                out.append("_")
        out.append(c.lower())
    return "".join(out)
