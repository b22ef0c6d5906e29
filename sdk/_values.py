"""Attr values that are more than a Python scalar: shapes, tensors, functions, full types."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from opmarket.sdk._dtypes import DType
from opmarket.sdk._errors import InvalidArgumentError

__all__ = [
    "ATTR_BASE_TYPES",
    "TENSOR_VALUE_FIELDS",
    "AttrValue",
    "FullType",
    "FuncValue",
    "TaggedValue",
    "TensorShape",
    "TensorValue",
    "normalize_double",
    "normalize_float",
]

#: The attr types an OpDef may declare, each also inside ``list(...)``.
ATTR_BASE_TYPES: tuple[str, ...] = (
    "string",
    "int",
    "float",
    "bool",
    "type",
    "shape",
    "tensor",
    "func",
)


@dataclass(frozen=True, slots=True)
class TensorShape:
    """A possibly partial shape: ``dims`` None for unknown rank, -1 for an unknown dim.

    ``names`` carries TensorShapeProto's optional dim names, one per dim, when any is set.
    """

    dims: tuple[int, ...] | None = ()
    names: tuple[str, ...] = ()

    @property
    def rank(self) -> int | None:
        """The number of dims, or None when the rank is unknown."""
        return None if self.dims is None else len(self.dims)

    @property
    def is_fully_defined(self) -> bool:
        """Whether the rank and every dim are known (no dim is -1)."""
        return self.dims is not None and all(d >= 0 for d in self.dims)

    def __str__(self) -> str:
        if self.dims is None:
            return "<unknown>"
        return "[" + ",".join("?" if d < 0 else str(d) for d in self.dims) + "]"


#: TensorProto's typed value fields, in its order (what ``TensorValue.values`` names).
TENSOR_VALUE_FIELDS: tuple[str, ...] = (
    "half_val",
    "float_val",
    "double_val",
    "int_val",
    "string_val",
    "scomplex_val",
    "int64_val",
    "bool_val",
    "dcomplex_val",
    "uint32_val",
    "uint64_val",
)


@dataclass(frozen=True, slots=True)
class TensorValue:
    """A constant tensor as TensorFlow's TensorProto stores it.

    ``values`` holds the populated ``*_val`` fields in field order, e.g.
    ``(("int_val", (5,)),)``; ``content`` is ``tensor_content``; ``shape`` None means the
    proto had no ``tensor_shape`` (a scalar). ``extra`` keeps the fields opmarket does not
    model (``float8_val``, resource handles, variants) as serialized TensorProto bytes.
    """

    dtype: DType | int  # an int only for numbers outside the DataType enum
    shape: TensorShape | None = None
    values: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    content: bytes = b""
    version_number: int = 0
    extra: bytes = b""

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """The tensor as a numpy array, expanding TensorFlow's repeated-last-value rule."""
        npdt = self.dtype.numpy if isinstance(self.dtype, DType) else None
        if npdt is None:
            raise InvalidArgumentError(f"tensor of dtype {self.dtype} has no numpy form")
        dims = (self.shape.dims if self.shape is not None else None) or ()
        if self.content:
            return np.frombuffer(self.content, dtype=npdt).reshape(dims).copy()
        flat: list[Any] = []
        for name, vals in self.values:
            if name in ("scomplex_val", "dcomplex_val"):
                flat.extend(complex(r, i) for r, i in zip(vals[::2], vals[1::2], strict=True))
            elif name == "half_val" and self.dtype in (DType.HALF, DType.BFLOAT16):
                raw = np.array(vals, dtype=np.uint16)
                flat.extend(raw.view(np.float16 if self.dtype is DType.HALF else npdt).tolist())
            else:
                flat.extend(vals)
        size = int(np.prod(dims)) if dims else 1
        if not flat:
            return np.zeros(dims, dtype=npdt)
        if len(flat) < size:
            flat.extend([flat[-1]] * (size - len(flat)))
        return np.array(flat[:size], dtype=npdt).reshape(dims)


@dataclass(frozen=True, slots=True)
class TaggedValue:
    """A self-describing attr value (inside a func value): ``type`` is an attr type string such
    as ``list(int)``, ``placeholder``, or ``none`` for an AttrValue with nothing set."""

    type: str
    value: Any


@dataclass(frozen=True, slots=True)
class FuncValue:
    """A function attr value (TensorFlow's NameAttrList): a name and attrs to call it with."""

    name: str
    attrs: tuple[tuple[str, TaggedValue], ...] = ()


@dataclass(frozen=True, slots=True)
class FullType:
    """TensorFlow's FullTypeDef, carried through unchanged (``type_id`` by enum name)."""

    type_id: str
    args: tuple[FullType, ...] = ()
    s: str | None = None
    i: int | None = None


#: A Python attr value: str, int, float, bool, DType, TensorShape, TensorValue, FuncValue,
#: or a tuple of one of those for ``list(...)`` attrs.
AttrValue: TypeAlias = Any


#: The one NaN object attr values use, so that equal OpDefs compare equal (tuples compare
#: items by identity first, and NaN != NaN).
NAN = float("nan")


def normalize_double(value: float) -> float:
    """A double attr value, with NaN made the shared NAN."""
    return NAN if math.isnan(value) else float(value)


def normalize_float(value: float) -> float:
    """Round to float32, as AttrValue stores it, keeping the shortest decimal that round-trips."""
    if not math.isfinite(value):
        return normalize_double(value)
    try:
        single = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:  # rounds past the largest float32
        return math.copysign(math.inf, value)
    return float(str(np.float32(single)))
