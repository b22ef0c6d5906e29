"""Data types: TensorFlow's ``DataType`` enum (types.proto) with spec names and numpy dtypes."""

from __future__ import annotations

import enum
from functools import cache
from typing import Any

import numpy as np

from opmarket.sdk._errors import UnknownDTypeError

__all__ = [
    "NUMBER_TYPES",
    "QUANTIZED_TYPES",
    "REAL_NUMBER_TYPES",
    "DType",
    "as_dtype",
]

REF_OFFSET = 100


class DType(enum.IntEnum):
    """A tensor element type; values are TensorFlow's ``DataType`` numbers."""

    INVALID = 0
    FLOAT = 1
    DOUBLE = 2
    INT32 = 3
    UINT8 = 4
    INT16 = 5
    INT8 = 6
    STRING = 7
    COMPLEX64 = 8
    INT64 = 9
    BOOL = 10
    QINT8 = 11
    QUINT8 = 12
    QINT32 = 13
    BFLOAT16 = 14
    QINT16 = 15
    QUINT16 = 16
    UINT16 = 17
    COMPLEX128 = 18
    HALF = 19
    RESOURCE = 20
    VARIANT = 21
    UINT32 = 22
    UINT64 = 23
    FLOAT8_E5M2 = 24
    FLOAT8_E4M3FN = 25
    FLOAT8_E4M3FNUZ = 26
    FLOAT8_E4M3B11FNUZ = 27
    FLOAT8_E5M2FNUZ = 28
    INT4 = 29
    UINT4 = 30
    INT2 = 31
    UINT2 = 32
    FLOAT4_E2M1FN = 33

    FLOAT_REF = 101
    DOUBLE_REF = 102
    INT32_REF = 103
    UINT8_REF = 104
    INT16_REF = 105
    INT8_REF = 106
    STRING_REF = 107
    COMPLEX64_REF = 108
    INT64_REF = 109
    BOOL_REF = 110
    QINT8_REF = 111
    QUINT8_REF = 112
    QINT32_REF = 113
    BFLOAT16_REF = 114
    QINT16_REF = 115
    QUINT16_REF = 116
    UINT16_REF = 117
    COMPLEX128_REF = 118
    HALF_REF = 119
    RESOURCE_REF = 120
    VARIANT_REF = 121
    UINT32_REF = 122
    UINT64_REF = 123
    FLOAT8_E5M2_REF = 124
    FLOAT8_E4M3FN_REF = 125
    FLOAT8_E4M3FNUZ_REF = 126
    FLOAT8_E4M3B11FNUZ_REF = 127
    FLOAT8_E5M2FNUZ_REF = 128
    INT4_REF = 129
    UINT4_REF = 130
    INT2_REF = 131
    UINT2_REF = 132
    FLOAT4_E2M1FN_REF = 133

    @property
    def tf_name(self) -> str:
        """The enum name in TensorFlow's text format, e.g. ``DT_FLOAT``."""
        return "DT_" + self.name

    @property
    def spec_name(self) -> str:
        """The name a REGISTER_OP spec uses, e.g. ``float`` or ``int32_ref``."""
        return _SPEC_NAMES[self]

    @property
    def is_ref(self) -> bool:
        """True for a reference type such as ``FLOAT_REF`` (TensorFlow's IsRefType)."""
        return self.value > REF_OFFSET

    @property
    def base(self) -> DType:
        """The non-reference type (``FLOAT`` for ``FLOAT_REF``)."""
        return DType(self.value - REF_OFFSET) if self.is_ref else self

    @property
    def as_ref(self) -> DType:
        """The reference type of this one (``FLOAT_REF`` for ``FLOAT``); a ref type is itself."""
        return self if self.is_ref else DType(self.value + REF_OFFSET)

    @property
    def numpy(self) -> np.dtype[Any] | None:
        """The numpy dtype that holds this type's elements, or None (resource, variant, ...)."""
        return _numpy_dtypes().get(self.base)

    def __str__(self) -> str:
        return self.spec_name

    def __repr__(self) -> str:
        return f"opmarket.{self.spec_name}"


# TensorFlow's DataTypeString names; ``half`` for HALF, ``INVALID`` for 0.
_SPEC_NAMES: dict[DType, str] = {}
for _dt in DType:
    if _dt is DType.INVALID:
        _SPEC_NAMES[_dt] = "INVALID"
    elif _dt.is_ref:
        _SPEC_NAMES[_dt] = _dt.name[: -len("_REF")].lower() + "_ref"
    else:
        _SPEC_NAMES[_dt] = _dt.name.lower()

# What DataTypeFromString accepts, besides the ``<name>_ref`` forms.
_FROM_SPEC: dict[str, DType] = {
    name: dt for dt, name in _SPEC_NAMES.items() if not dt.is_ref and dt is not DType.INVALID
}
_FROM_SPEC["float32"] = DType.FLOAT
_FROM_SPEC["float64"] = DType.DOUBLE
_FROM_SPEC["float16"] = DType.HALF


def dtype_from_spec_name(name: str) -> DType | None:
    """TensorFlow's ``DataTypeFromString``: a spec type name to a DType, or None."""
    if name.endswith("_ref"):
        base = _FROM_SPEC.get(name[: -len("_ref")])
        return None if base is None else base.as_ref
    return _FROM_SPEC.get(name)


# TensorFlow's compound spec words, expanded as TensorFlow does: in enum order.
NUMBER_TYPES: tuple[DType, ...] = (
    DType.FLOAT,
    DType.DOUBLE,
    DType.INT32,
    DType.UINT8,
    DType.INT16,
    DType.INT8,
    DType.COMPLEX64,
    DType.INT64,
    DType.QINT8,
    DType.QUINT8,
    DType.QINT32,
    DType.BFLOAT16,
    DType.QINT16,
    DType.QUINT16,
    DType.UINT16,
    DType.COMPLEX128,
    DType.HALF,
    DType.UINT32,
    DType.UINT64,
)
REAL_NUMBER_TYPES: tuple[DType, ...] = (
    DType.FLOAT,
    DType.DOUBLE,
    DType.INT32,
    DType.UINT8,
    DType.INT16,
    DType.INT8,
    DType.INT64,
    DType.BFLOAT16,
    DType.UINT16,
    DType.HALF,
    DType.UINT32,
    DType.UINT64,
)
QUANTIZED_TYPES: tuple[DType, ...] = (
    DType.QINT8,
    DType.QUINT8,
    DType.QINT32,
    DType.QINT16,
    DType.QUINT16,
)

COMPOUND_TYPES: dict[str, tuple[DType, ...]] = {
    "numbertype": NUMBER_TYPES,
    "numerictype": NUMBER_TYPES,
    "realnumbertype": REAL_NUMBER_TYPES,
    "realnumerictype": REAL_NUMBER_TYPES,
    "quantizedtype": QUANTIZED_TYPES,
}


@cache
def _numpy_dtypes() -> dict[DType, np.dtype[Any]]:
    import ml_dtypes  # deferred: only needed once a dtype meets numpy

    table: dict[DType, Any] = {
        DType.FLOAT: np.float32,
        DType.DOUBLE: np.float64,
        DType.INT32: np.int32,
        DType.UINT8: np.uint8,
        DType.INT16: np.int16,
        DType.INT8: np.int8,
        DType.STRING: np.object_,
        DType.COMPLEX64: np.complex64,
        DType.INT64: np.int64,
        DType.BOOL: np.bool_,
        DType.UINT16: np.uint16,
        DType.COMPLEX128: np.complex128,
        DType.HALF: np.float16,
        DType.UINT32: np.uint32,
        DType.UINT64: np.uint64,
        DType.BFLOAT16: ml_dtypes.bfloat16,
        DType.FLOAT8_E5M2: ml_dtypes.float8_e5m2,
        DType.FLOAT8_E4M3FN: ml_dtypes.float8_e4m3fn,
        DType.FLOAT8_E4M3FNUZ: ml_dtypes.float8_e4m3fnuz,
        DType.FLOAT8_E4M3B11FNUZ: ml_dtypes.float8_e4m3b11fnuz,
        DType.FLOAT8_E5M2FNUZ: ml_dtypes.float8_e5m2fnuz,
        DType.INT4: ml_dtypes.int4,
        DType.UINT4: ml_dtypes.uint4,
        # Quantized types hold plain integers, as TensorFlow's Python API stores them.
        DType.QINT8: np.int8,
        DType.QUINT8: np.uint8,
        DType.QINT16: np.int16,
        DType.QUINT16: np.uint16,
        DType.QINT32: np.int32,
    }
    optional = (
        ("int2", DType.INT2),
        ("uint2", DType.UINT2),
        ("float4_e2m1fn", DType.FLOAT4_E2M1FN),
    )
    for name, dt in optional:
        if hasattr(ml_dtypes, name):
            table[dt] = getattr(ml_dtypes, name)
    return {dt: np.dtype(t) for dt, t in table.items()}


@cache
def _from_numpy() -> dict[np.dtype[Any], DType]:
    out: dict[np.dtype[Any], DType] = {}
    for dt, npdt in _numpy_dtypes().items():
        # Quantized types share numpy dtypes with plain integers; plain ones win.
        if npdt not in out or dt.name.startswith(("INT", "UINT")):
            out[npdt] = dt
    return out


def as_dtype(value: object) -> DType:
    """Convert a DType, a spec or enum name (``"int32"``, ``"DT_INT32"``), or a numpy dtype."""
    if isinstance(value, DType):
        return value
    if isinstance(value, str):
        name = value[3:].lower() if value.startswith("DT_") else value
        found = dtype_from_spec_name(name)
        if found is not None:
            return found
        raise UnknownDTypeError(f"unknown dtype {value!r}")
    if isinstance(value, bool) or not isinstance(value, (type, np.dtype)):
        raise UnknownDTypeError(f"cannot interpret {value!r} as a dtype")
    try:
        npdt = np.dtype(value)
    except TypeError as exc:
        raise UnknownDTypeError(f"cannot interpret {value!r} as a dtype") from exc
    found = _from_numpy().get(npdt)
    if found is None:
        raise UnknownDTypeError(f"numpy dtype {npdt} has no opmarket dtype")
    return found
