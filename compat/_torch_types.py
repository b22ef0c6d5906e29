"""The types of PyTorch schemas as its compatibility checks see them, their subtyping
(``Type::isSubtypeOfExt``, aten/src/ATen/core/type.cpp and jit_type.h, for the types a schema
can spell) and the equality of default values (``IValue`` equality)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BASE_TYPES",
    "Device",
    "SchemaType",
    "is_subtype",
    "make_type",
    "make_union",
    "values_equal",
]


@dataclass(frozen=True, slots=True)
class SchemaType:
    """A type as the schema checks see it: ``kind`` (``Tensor``, ``int``, ``List``,
    ``Optional``, ``Class``, ``Var``...), its contained types, and a name (classes, vars)."""

    kind: str
    args: tuple[SchemaType, ...] = ()
    name: str = ""

    def __str__(self) -> str:
        if self.kind == "List":
            return f"{self.args[0]}[]"
        if self.kind == "Optional":
            return f"{self.args[0]}?"
        if self.kind == "Class":
            return self.name
        if self.kind == "Var":
            return "t"  # PyTorch holds every type variable equal to every other
        if self.kind == "Tuple":
            return f"({', '.join(str(a) for a in self.args)})"
        if self.args:
            return f"{self.kind}({', '.join(str(a) for a in self.args)})"
        return self.kind


_INTERNED: dict[tuple[str, tuple[SchemaType, ...], str], SchemaType] = {}


def make_type(kind: str, args: tuple[SchemaType, ...] = (), name: str = "") -> SchemaType:
    # Types repeat thousands of times in a registry: make each once.
    key = (kind, args, name)
    found = _INTERNED.get(key)
    if found is None:
        found = _INTERNED[key] = SchemaType(kind, args, name)
    return found


_NONE = make_type("NoneType")
_NUMBERS = ("int", "float", "complex")
# Base type names -> (fake type kind); ScalarType and friends are ints to the checks.
BASE_TYPES = {
    "Generator": "Generator",
    "Dimname": "str",
    "ScalarType": "int",
    "Layout": "int",
    "MemoryFormat": "int",
    "QScheme": "int",
    "Storage": "Storage",
    "Stream": "Stream",
    "ConstQuantizerPtr": "int",
    "Device": "Device",
    "DeviceIndex": "int",
    "Scalar": "Scalar",
    "str": "str",
    "float": "float",
    "complex": "complex",
    "int": "int",
    "SymInt": "int",
    "SymBool": "bool",
    "bool": "bool",
    "None": "NoneType",
    "NoneType": "NoneType",
    "Capsule": "Capsule",
    "Any": "Any",
    "AnyClassType": "AnyClassType",
    "AnyEnumType": "AnyEnumType",
}


# ---------------------------------------------------------------- values


def values_equal(a: object, b: object) -> bool:
    """IValue equality of two parsed defaults: the tags must match (1 is not 1.0) and NaN
    is unequal to itself, as in C++."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return len(a) == len(b) and all(values_equal(x, y) for x, y in zip(a, b, strict=True))
    return a == b


@dataclass(frozen=True, slots=True)
class Device:
    """A ``Device`` default (``"cpu"``)."""

    text: str


# ---------------------------------------------------------------- subtyping


def _is_union(t: SchemaType) -> bool:
    return t.kind == "Union"


def _base_subtype(a: SchemaType, b: SchemaType) -> bool:
    # Type::isSubtypeOfExt
    if b.kind == "Any" or a == b:
        return True
    if b.kind == "Optional":
        return is_subtype(a, b.args[0])
    if _is_union(b):
        return any(is_subtype(a, t) for t in b.args)
    return False


def _union_members(b: SchemaType) -> list[SchemaType]:
    if _is_union(b):
        return list(b.args)
    if b.kind == "Optional":
        inner = b.args[0]
        return [_NONE, *([make_type(n) for n in _NUMBERS] if inner.kind == "Scalar" else [inner])]
    if b.kind == "Scalar":
        return [make_type(n) for n in _NUMBERS]
    return [b]


def is_subtype(a: SchemaType, b: SchemaType) -> bool:
    """``a->isSubtypeOfExt(*b)`` as PyTorch decides it for schema types."""
    k = a.kind
    if k in _NUMBERS:
        return b.kind == "Scalar" or _base_subtype(a, b)
    if k == "NoneType":
        return b.kind == "Optional" or _base_subtype(a, b)
    if k == "Scalar":
        if _is_union(b):
            return all(any(is_subtype(make_type(n), m) for m in b.args) for n in _NUMBERS)
        return _base_subtype(a, b)
    if k == "Optional":
        if b.kind == "Optional":
            return is_subtype(a.args[0], b.args[0])
        if _is_union(b):
            return is_subtype(_NONE, b) and is_subtype(a.args[0], b)
        return b.kind == "Any" or a == b
    if k == "Union":
        if _is_union(b) and set(a.args) == set(b.args):
            return True
        members = _union_members(b)
        return all(any(is_subtype(x, m) for m in members) for x in a.args)
    if k == "Tuple":
        if _base_subtype(a, b):
            return True
        return (
            b.kind == "Tuple"
            and len(a.args) == len(b.args)
            and all(is_subtype(x, y) for x, y in zip(a.args, b.args, strict=True))
        )
    if k in ("Future", "Await") and b.kind == k:
        return is_subtype(a.args[0], b.args[0])
    if k == "Class" and b.kind == "AnyClassType":
        return True
    return _base_subtype(a, b)


def make_union(types: list[SchemaType]) -> SchemaType:
    flat: list[SchemaType] = []
    for t in types:
        if t.kind == "Union":
            flat.extend(t.args)
        elif t.kind == "Optional":
            flat.extend((t.args[0], _NONE))
        else:
            flat.append(t)
    out: list[SchemaType] = []
    for t in flat:
        if t not in out:
            out.append(t)
    return make_type("Union", tuple(out))
