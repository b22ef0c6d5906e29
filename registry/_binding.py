"""Binding a call's arguments: inputs made arrays (Python values converted only where no value
changes), attrs coerced, inferred from the inputs, defaulted and checked."""

from __future__ import annotations

import reprlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from opmarket.registry._attrvalues import coerce_attr
from opmarket.sdk import (
    ArgDef,
    DType,
    InvalidArgumentError,
    OpDef,
    TensorShape,
    as_dtype,
    check_attr_value,
)

__all__ = ["Binder", "dtype_of", "show_attr", "show_value"]

_np_to_dtype: dict[np.dtype[Any], DType] = {}


def dtype_of(array: Any) -> DType:
    """The DType of a numpy array (cached per numpy dtype: this is on the call path)."""
    npdt = array.dtype
    found = _np_to_dtype.get(npdt)
    if found is None:
        found = _np_to_dtype[npdt] = as_dtype(npdt)
    return found


class Binder:
    """Binds calls of one op: ``bind(inputs, attrs)``."""

    __slots__ = ("op_def",)

    def __init__(self, op_def: OpDef) -> None:
        self.op_def = op_def

    def bind(
        self, inputs: Sequence[Any], given: Mapping[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """Inputs as arrays (one list per list argument) and every attr, inferred, defaulted
        and checked; InvalidArgumentError naming the op otherwise."""
        op = self.op_def
        if len(inputs) != len(op.inputs):
            raise InvalidArgumentError(
                f"{op.name} takes {len(op.inputs)} inputs, got {len(inputs)}"
            )
        attrs: dict[str, Any] = {}
        for key, value in given.items():
            a = op.attr(key)
            if a is None:
                if key.startswith("_"):
                    attrs[key] = value
                    continue
                raise InvalidArgumentError(f"{op.name} has no attr {key!r}")
            try:
                attrs[key] = coerce_attr(value, a.type, strict=True)
            except (ValueError, TypeError) as exc:
                raise InvalidArgumentError(f"{op.name}: attr {key!r}: {exc}") from None
            if a.base_type == "type":
                attrs[key] = self._dtypes(key, attrs[key])
        bound: list[Any] = []
        for arg, value in zip(op.inputs, inputs, strict=True):
            bound.append(self._bind_arg(arg, value, attrs))
        for a in op.attrs:
            if a.name not in attrs:
                if a.default is None:
                    raise InvalidArgumentError(f"{op.name} needs attr {a.name!r} ({a.type})")
                attrs[a.name] = a.default
            problem = check_attr_value(attrs[a.name], a)
            if problem is not None:
                raise InvalidArgumentError(f"{op.name}: {problem}")
        return bound, attrs

    def _dtypes(self, name: str, value: Any) -> Any:
        """A type attr's value with TensorFlow's DataType numbers (``3``, as a TensorFlow
        file holds them) made DTypes, so that kernels only ever see DTypes; a bool is refused
        (it would pass as the number 0 or 1)."""
        if isinstance(value, tuple):
            return tuple(self._dtypes(name, v) for v in value)
        if isinstance(value, bool):
            raise InvalidArgumentError(
                f"{self.op_def.name}: attr {name!r}: expected a dtype "
                f"(np.int32, 'int32' or DType.INT32), got {value!r}"
            )
        if (
            isinstance(value, int)
            and not isinstance(value, DType)
            and (value in DType._value2member_map_)
        ):
            return DType(value)
        return value  # anything else is for check_attr_value to refuse

    def _bind_arg(self, arg: ArgDef, value: Any, attrs: dict[str, Any]) -> Any:
        op = self.op_def
        if arg.is_list:
            if not isinstance(value, (list, tuple)):
                raise InvalidArgumentError(
                    f"{op.name}: input {arg.name!r} is a list of tensors, got {show_value(value)}"
                )
            if arg.number_attr:
                self._set_inferred(arg.number_attr, len(value), arg, attrs)
            arrays = [self._convert(arg, v, attrs) for v in value]
            if arg.type_list_attr:
                self._set_inferred(
                    arg.type_list_attr, tuple(dtype_of(a) for a in arrays), arg, attrs
                )
            return arrays
        return self._convert(arg, value, attrs)

    def _convert(self, arg: ArgDef, value: Any, attrs: dict[str, Any]) -> Any:
        op = self.op_def
        want: DType | None = arg.type.base if arg.type is not DType.INVALID else None
        if arg.type_attr and isinstance(attrs.get(arg.type_attr), DType):
            want = attrs[arg.type_attr]
        if isinstance(value, np.ndarray):
            array = value
        elif isinstance(value, np.generic):
            array = np.asarray(value)
        else:
            array = self._from_python(arg, value, want)
        try:
            got = dtype_of(array)
        except Exception:
            raise InvalidArgumentError(
                f"{op.name}: input {arg.name!r} has dtype {array.dtype}, "
                "which opmarket has no type for"
            ) from None
        if arg.type_attr:
            self._set_inferred(arg.type_attr, got, arg, attrs)
        elif want is not None and got is not want:
            raise InvalidArgumentError(
                f"{op.name}: input {arg.name!r} must be {want.spec_name}, got {got.spec_name}"
            )
        return array

    def _from_python(self, arg: ArgDef, value: Any, want: DType | None) -> Any:
        """A Python value (a number, a list of them) as an array of the type the input takes;
        converted only where no value changes (see :meth:`_cast`)."""
        if want is not None and want.numpy is not None and want.numpy.kind == "O":
            return np.asarray(value, dtype=want.numpy)  # strings: Python objects as they are
        try:
            array = np.asarray(value)
        except (ValueError, TypeError, OverflowError) as exc:  # ragged lists, odd objects
            raise InvalidArgumentError(
                f"{self.op_def.name}: input {arg.name!r}: cannot make an "
                f"array of {_brief(value)}: {exc}"
            ) from None
        if want is not None and want.numpy is not None:
            return self._cast(arg, value, array, want, want.spec_name)
        attr = self.op_def.attr(arg.type_attr) if arg.type_attr else None
        if attr is None:
            return array
        candidates = [t for t in (attr.default, *(attr.allowed_values or ())) if t is not None]
        if not candidates or _np_dtype_ok(array.dtype, candidates):
            return array
        same_kind = [
            t for t in candidates if t.numpy is not None and t.numpy.kind == array.dtype.kind
        ]
        pick = same_kind[0] if same_kind else candidates[0]
        if pick.numpy is None:
            return array
        allowed = ", ".join(t.spec_name for t in dict.fromkeys(candidates))
        return self._cast(arg, value, array, pick, f"one of {allowed}")

    def _cast(self, arg: ArgDef, value: Any, array: Any, want: DType, expected: str) -> Any:
        """``array`` (made from the Python ``value``) as ``want``: a cast numpy calls
        same-kind that keeps every value (in range; finite stays finite), or any numeric
        cast that gives back exactly the numbers written (``[1.0, 2.0]`` to int32);
        InvalidArgumentError naming the op and the input otherwise."""
        npdt = want.numpy
        assert npdt is not None
        if array.dtype == npdt:
            return array
        op = self.op_def.name
        if array.dtype.kind not in "biuf":
            raise InvalidArgumentError(
                f"{op}: input {arg.name!r} must be {expected}, got {_brief(value)}"
            )
        same_kind = bool(np.can_cast(array.dtype, npdt, "same_kind"))
        if same_kind or (array.dtype.kind != "b" and not _inexact(npdt)):
            with np.errstate(all="ignore"):  # overflow is judged below, not warned about
                cast = array.astype(npdt)
                if same_kind and _inexact(npdt):
                    fits = bool(np.all(np.isfinite(cast) | ~np.isfinite(array)))
                else:
                    fits = bool(np.array_equal(cast.astype(array.dtype), array))
            if fits:
                return cast
        raise InvalidArgumentError(
            f"{op}: input {arg.name!r} must be {expected}; {_brief(value)} "
            f"({array.dtype}) does not convert to {want.spec_name} without "
            "changing its values"
        )

    def _set_inferred(self, name: str, value: Any, arg: ArgDef, attrs: dict[str, Any]) -> None:
        have = attrs.get(name)
        if have is None:
            attrs[name] = value
        elif have != value:
            raise InvalidArgumentError(
                f"{self.op_def.name}: input {arg.name!r} makes {name}={show_attr(value)}, "
                f"but {name} is {show_attr(have)}"
            )


def _inexact(npdt: np.dtype[Any]) -> bool:
    """Whether ``npdt`` is a floating or complex type (ml_dtypes' floats too)."""
    if npdt.kind in "fc":
        return True
    import ml_dtypes  # deferred, as opmarket.sdk does: only Python values reach here

    try:
        ml_dtypes.finfo(npdt)  # type: ignore[no-untyped-call]  # ml_dtypes ships no types here
    except ValueError:
        return False
    return True


def _brief(value: Any) -> str:
    """``value`` for a message, shortened as reprlib does."""
    return reprlib.repr(value)


def _np_dtype_ok(npdt: np.dtype[Any], candidates: Sequence[DType]) -> bool:
    return any(t.numpy == npdt for t in candidates)


def show_attr(v: Any) -> str:
    """An attr value as a message or docstring shows it."""
    if isinstance(v, DType):
        return v.spec_name
    if isinstance(v, TensorShape):
        return str(v)  # [2,?] or <unknown>, not the dataclass repr
    if isinstance(v, tuple):
        return "[" + ", ".join(show_attr(x) for x in v) + "]"
    return repr(v)


def show_value(value: Any) -> str:
    """What a value is, for a message: ``an array of int32``, ``a str``."""
    if isinstance(value, np.ndarray):
        return f"an array of {value.dtype}"
    return f"a {type(value).__name__}"
