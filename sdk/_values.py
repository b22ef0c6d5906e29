"""Attr values that are more than a Python scalar: shapes, tensors, functions, full types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np

from opmarket.sdk._dtypes import DType

__all__ = [
    "ATTR_BASE_TYPES",
    "AttrValue",
    "FullType",
    "FuncValue",
    "TaggedValue",
    "TensorShape",
    "TensorValue",
    "normalize_float",
]

#: The attr types an OpDef may declare, each also inside ``list(...)``.
ATTR_BASE_TYPES: tuple[str, ...] = (
    "string", "int", "float", "bool", "type", "shape", "tensor", "func",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TensorShape:
    """A possibly partial shape: ``dims`` None for unknown rank, -1 for an unknown dim."""

    dims: tuple[int, ...] | None = ()

    @property
    def rank(self) -> int | None:
        return None if self.dims is None else len(self.dims)

    @property
    def is_fully_defined(self) -> bool:
        return self.dims is not None and all(d >= 0 for d in self.dims)

    def __str__(self) -> str:
        if self.dims is None:
            return "<unknown>"
        return "[" + ",".join("?" if d < 0 else str(d) for d in self.dims) + "]"


@dataclass(frozen=True, slots=True)
class TensorValue:
    """A constant tensor as TensorFlow's TensorProto stores it.

    ``values`` holds the populated ``*_val`` fields in field order, e.g.
    ``(("int_val", (5,)),)``; ``content`` is ``tensor_content``; ``shape`` None means the
    proto had no ``tensor_shape`` (a scalar).
    """

    dtype: DType
    shape: TensorShape | None = None
    values: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    content: bytes = b""
    version_number: int = 0

    def to_numpy(self) -> np.ndarray[Any, Any]:
        """The tensor as a numpy array, expanding TensorFlow's repeated-last-value rule."""
        npdt = self.dtype.numpy
        if npdt is None:
            raise ValueError(f"tensor of dtype {self.dtype} has no numpy form")
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
    """A self-describing attr value: ``type`` is an attr type string such as ``list(int)``."""

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


def normalize_float(value: float) -> float:
    """Round to float32, as AttrValue stores it, and keep the shortest decimal that round-trips."""
    return float(str(np.float32(value)))
