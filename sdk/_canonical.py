"""The canonical op-set JSON: a versioned, deterministic form of ops and kernels.

``opmarket snapshot`` writes it and plugin repos commit it; docs/formats.md describes it
and sdk/schema/opset.schema.json is its JSON Schema.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opmarket.sdk._dtypes import DType, dtype_from_spec_name
from opmarket.sdk._errors import DocumentError, Problem
from opmarket.sdk._opdef import ArgDef, AttrDef, AttrType, Deprecation, OpDef
from opmarket.sdk._opset import KernelDef
from opmarket.sdk._tfproto import FULL_TYPE_IDS
from opmarket.sdk._values import (
    ATTR_BASE_TYPES,
    FullType,
    FuncValue,
    TaggedValue,
    TensorShape,
    TensorValue,
    normalize_double,
    normalize_float,
)

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "HISTORY_FORMAT",
    "Document",
    "decode_document",
    "encode_opset",
    "value_from_json",
    "value_to_json",
]

FORMAT = "opmarket.opset"
HISTORY_FORMAT = "opmarket.history"
FORMAT_VERSION = 1

_FLAGS = (
    "is_stateful", "is_commutative", "is_aggregate", "allows_uninitialized_input",
    "is_distributed_communication",
)  # fmt: skip
_TENSOR_FIELDS = (
    "half_val", "float_val", "double_val", "int_val", "string_val", "scomplex_val",
    "int64_val", "bool_val", "dcomplex_val", "uint32_val", "uint64_val",
)  # fmt: skip


@dataclass
class Document:
    """What one file holds: ops (in file order, names may repeat in a history), kernels,
    release metadata, and every problem found while reading it."""

    source: str
    ops: list[OpDef] = field(default_factory=list)
    kernels: list[KernelDef] = field(default_factory=list)
    name: str = ""
    version: str = ""
    format: str = ""
    problems: list[Problem] = field(default_factory=list)


class _Bad(Exception):
    def __init__(self, where: str, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


# ---------------------------------------------------------------- values to JSON


def _float_to_json(v: float) -> float | str:
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v


def _shape_to_json(s: TensorShape) -> Any:
    if s.names:
        return {"dims": None if s.dims is None else list(s.dims), "names": list(s.names)}
    return None if s.dims is None else list(s.dims)


def _tensor_to_json(t: TensorValue) -> dict[str, Any]:
    out: dict[str, Any] = {
        "dtype": t.dtype.spec_name if isinstance(t.dtype, DType) else int(t.dtype)
    }
    if t.shape is not None:
        out["shape"] = _shape_to_json(t.shape)
    if t.version_number:
        out["version_number"] = t.version_number
    if t.content:
        out["tensor_content"] = base64.b64encode(t.content).decode("ascii")
    if t.extra:
        out["extra"] = base64.b64encode(t.extra).decode("ascii")
    for name, vals in t.values:
        if name in ("float_val", "scomplex_val", "double_val", "dcomplex_val"):
            out[name] = [_float_to_json(v) for v in vals]
        else:
            out[name] = list(vals)
    return out


def value_to_json(attr_type: str, value: Any) -> Any:
    """An attr value of ``attr_type`` in its canonical JSON form."""
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        return [value_to_json(base, v) for v in value]
    if attr_type == "float":
        return _float_to_json(value)
    if attr_type == "type":
        return value.spec_name if isinstance(value, DType) else int(value)
    if attr_type == "shape":
        return _shape_to_json(value)
    if attr_type == "tensor":
        return _tensor_to_json(value)
    if attr_type == "func":
        return {
            "name": value.name,
            "attr": {k: {"type": t.type, "value": value_to_json(t.type, t.value)}
                     for k, t in value.attrs},
        }  # fmt: skip
    return value


def _full_type_to_json(ft: FullType) -> dict[str, Any]:
    out: dict[str, Any] = {"type_id": ft.type_id}
    if ft.args:
        out["args"] = [_full_type_to_json(a) for a in ft.args]
    if ft.s is not None:
        out["s"] = ft.s
    if ft.i is not None:
        out["i"] = ft.i
    return out


def _arg_to_json(arg: ArgDef) -> dict[str, Any]:
    out: dict[str, Any] = {"name": arg.name}
    if arg.number_attr:
        out["number_attr"] = arg.number_attr
    if arg.type is not DType.INVALID:
        out["type"] = arg.type.spec_name
    if arg.type_attr:
        out["type_attr"] = arg.type_attr
    if arg.type_list_attr:
        out["type_list_attr"] = arg.type_list_attr
    if arg.is_ref:
        out["is_ref"] = True
    if arg.full_type is not None:
        out["full_type"] = _full_type_to_json(arg.full_type)
    if arg.description:
        out["description"] = arg.description
    return out


def _attr_to_json(attr: AttrDef) -> dict[str, Any]:
    out: dict[str, Any] = {"name": attr.name, "type": attr.type}
    if attr.allowed_values is not None:
        out["allowed_values"] = value_to_json(f"list({attr.base_type})", attr.allowed_values)
    if attr.has_minimum:
        out["minimum"] = attr.minimum
    if attr.default is not None:
        out["default"] = value_to_json(attr.type, attr.default)
    if attr.description:
        out["description"] = attr.description
    return out


def opdef_to_json(op: OpDef) -> dict[str, Any]:
    out: dict[str, Any] = {"name": op.name}
    for key, args in (("inputs", op.inputs), ("outputs", op.outputs)):
        if args:
            out[key] = [_arg_to_json(a) for a in args]
    if op.attrs:
        out["attrs"] = [_attr_to_json(a) for a in op.attrs]
    if op.control_outputs:
        out["control_outputs"] = list(op.control_outputs)
    for flag in _FLAGS:
        if getattr(op, flag):
            out[flag] = True
    if op.deprecation is not None:
        out["deprecation"] = {
            "version": op.deprecation.version,
            "explanation": op.deprecation.explanation,
        }
    if op.summary:
        out["summary"] = op.summary
    if op.description:
        out["description"] = op.description
    return out


def kernel_to_json(k: KernelDef) -> dict[str, Any]:
    out: dict[str, Any] = {"op": k.op, "device": k.device}
    if k.constraints:
        out["constraints"] = {a: [t.spec_name for t in ts] for a, ts in k.constraints}
    if k.host_memory:
        out["host_memory"] = list(k.host_memory)
    if k.label:
        out["label"] = k.label
    if k.priority:
        out["priority"] = k.priority
    return out


def _kernel_key(k: KernelDef) -> tuple[Any, ...]:
    return (
        k.op,
        k.device,
        k.label,
        -k.priority,
        [(a, [int(t) for t in ts]) for a, ts in k.constraints],
    )


def opset_to_json_obj(
    ops: Iterable[OpDef], kernels: Iterable[KernelDef] = (), *, name: str = "", version: str = ""
) -> dict[str, Any]:
    out: dict[str, Any] = {"format": FORMAT, "format_version": FORMAT_VERSION}
    if name:
        out["name"] = name
    if version:
        out["version"] = version
    # A stable sort: versions of one op in a history keep their order.
    out["ops"] = [opdef_to_json(o) for o in sorted(ops, key=lambda o: o.name)]
    kernel_list = sorted(kernels, key=_kernel_key)
    if kernel_list:
        out["kernels"] = [kernel_to_json(k) for k in kernel_list]
    return out


def encode_opset(
    ops: Iterable[OpDef], kernels: Iterable[KernelDef] = (), *, name: str = "", version: str = ""
) -> str:
    """Canonical JSON text: ops sorted by name, fixed key order, two-space indent."""
    obj = opset_to_json_obj(ops, kernels, name=name, version=version)
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- JSON to values


def _expect(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise _Bad(where, message)


def _keys(obj: Any, where: str, allowed: Sequence[str], required: Sequence[str] = ()) -> None:
    _expect(isinstance(obj, dict), where, f"expected an object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - set(allowed))
    _expect(not unknown, where, f"unknown key(s) {', '.join(map(repr, unknown))}")
    missing = [k for k in required if k not in obj]
    _expect(not missing, where, f"missing key(s) {', '.join(map(repr, missing))}")


def _str(v: Any, where: str) -> str:
    _expect(isinstance(v, str), where, f"expected a string, got {v!r}")
    return str(v)


def _int(v: Any, where: str) -> int:
    _expect(
        isinstance(v, int) and not isinstance(v, bool), where, f"expected an integer, got {v!r}"
    )
    return int(v)


def _bool(v: Any, where: str) -> bool:
    _expect(isinstance(v, bool), where, f"expected true or false, got {v!r}")
    return bool(v)


def _list(v: Any, where: str) -> list[Any]:
    _expect(isinstance(v, list), where, f"expected a list, got {v!r}")
    return list(v)


def _dtype(v: Any, where: str) -> DType:
    name = _str(v, where)
    dt = dtype_from_spec_name(name)
    _expect(dt is not None, where, f"unknown dtype {name!r}")
    assert dt is not None
    return dt


def _double(v: Any, where: str) -> float:
    if isinstance(v, str) and v in ("nan", "inf", "-inf"):
        return normalize_double(float(v))
    _expect(isinstance(v, (int, float)) and not isinstance(v, bool), where,
            f"expected a number, got {v!r}")  # fmt: skip
    return normalize_double(float(v))


def _float(v: Any, where: str) -> float:
    """A float attr value: stored as float32, as TensorFlow's AttrValue does."""
    return normalize_float(_double(v, where))


def _shape(v: Any, where: str) -> TensorShape:
    names: tuple[str, ...] = ()
    if isinstance(v, dict):
        _keys(v, where, ("dims", "names"), ("dims", "names"))
        names = tuple(_str(n, where) for n in _list(v["names"], where))
        v = v["dims"]
    if v is None:
        return TensorShape(None, names)
    dims = tuple(_int(d, where) for d in _list(v, where))
    _expect(not names or len(names) == len(dims), where, "one name per dim")
    return TensorShape(dims, names)


def _tensor(v: Any, where: str) -> TensorValue:
    _keys(v, where, ("dtype", "shape", "version_number", "tensor_content", "extra",
                     *_TENSOR_FIELDS), ("dtype",))  # fmt: skip
    values: list[tuple[str, tuple[Any, ...]]] = []
    for name in _TENSOR_FIELDS:
        if name not in v:
            continue
        items = _list(v[name], f"{where}.{name}")
        conv: list[Any]
        if name in ("float_val", "scomplex_val"):
            conv = [_float(x, f"{where}.{name}") for x in items]
        elif name in ("double_val", "dcomplex_val"):
            conv = [_double(x, f"{where}.{name}") for x in items]
        elif name == "string_val":
            conv = [_str(x, f"{where}.{name}") for x in items]
        elif name == "bool_val":
            conv = [_bool(x, f"{where}.{name}") for x in items]
        else:
            conv = [_int(x, f"{where}.{name}") for x in items]
        values.append((name, tuple(conv)))
    try:
        content = base64.b64decode(_str(v.get("tensor_content", ""), where), validate=True)
        extra = base64.b64decode(_str(v.get("extra", ""), where), validate=True)
    except ValueError:
        raise _Bad(where, "tensor_content and extra must be base64") from None
    raw_dtype = v["dtype"]
    return TensorValue(
        dtype=_int(raw_dtype, where) if isinstance(raw_dtype, int) else _dtype(raw_dtype, where),
        shape=_shape(v["shape"], f"{where}.shape") if "shape" in v else None,
        values=tuple(values),
        content=content,
        version_number=_int(v.get("version_number", 0), where),
        extra=extra,
    )


def value_from_json(attr_type: str, v: Any, where: str = "value") -> Any:
    """Read the canonical JSON form of an ``attr_type`` value; raises ValueError if malformed."""
    base, is_list = AttrType.parse(attr_type)
    if is_list:
        return tuple(
            value_from_json(base, x, f"{where}[{i}]") for i, x in enumerate(_list(v, where))
        )
    if attr_type == "string":
        return _str(v, where)
    if attr_type == "int":
        return _int(v, where)
    if attr_type == "float":
        return _float(v, where)
    if attr_type == "bool":
        return _bool(v, where)
    if attr_type == "type":
        return _dtype(v, where)
    if attr_type == "shape":
        return _shape(v, where)
    if attr_type == "tensor":
        return _tensor(v, where)
    if attr_type == "func":
        _keys(v, where, ("name", "attr"), ("name",))
        attrs = v.get("attr", {})
        _expect(isinstance(attrs, dict), where, "attr must be an object")
        tagged = []
        for key in sorted(attrs):
            item = attrs[key]
            _keys(item, f"{where}.attr.{key}", ("type", "value"), ("type", "value"))
            t = _str(item["type"], where)
            tagged.append((key, TaggedValue(t, value_from_json(t, item["value"], where))))
        return FuncValue(_str(v["name"], where), tuple(tagged))
    if attr_type == "placeholder":
        return _str(v, where)
    if attr_type == "none":
        _expect(v is None, where, "a 'none' value must be null")
        return None
    raise _Bad(where, f"unknown attr type {attr_type!r}")


def _full_type(v: Any, where: str) -> FullType:
    _keys(v, where, ("type_id", "args", "s", "i"), ("type_id",))
    type_id = _str(v["type_id"], where)
    _expect(
        type_id in FULL_TYPE_IDS or type_id.isdigit(),
        where,
        f"unknown full type id {type_id!r} (expected a TFT_* name or a number)",
    )
    return FullType(
        type_id=type_id,
        args=tuple(_full_type(a, where) for a in _list(v.get("args", []), where)),
        s=_str(v["s"], where) if "s" in v else None,
        i=_int(v["i"], where) if "i" in v else None,
    )


_ARG_KEYS = ("name", "type", "type_attr", "number_attr", "type_list_attr", "is_ref",
             "full_type", "description")  # fmt: skip
_ATTR_KEYS = ("name", "type", "allowed_values", "minimum", "default", "description")
_OP_KEYS = ("name", "inputs", "outputs", "attrs", "control_outputs", *_FLAGS, "deprecation",
            "summary", "description")  # fmt: skip


def _arg(v: Any, where: str) -> ArgDef:
    _keys(v, where, _ARG_KEYS, ("name",))
    return ArgDef(
        name=_str(v["name"], where),
        type=_dtype(v["type"], f"{where}.type") if "type" in v else DType.INVALID,
        type_attr=_str(v.get("type_attr", ""), where),
        number_attr=_str(v.get("number_attr", ""), where),
        type_list_attr=_str(v.get("type_list_attr", ""), where),
        is_ref=_bool(v.get("is_ref", False), where),
        description=_str(v.get("description", ""), where),
        full_type=_full_type(v["full_type"], where) if "full_type" in v else None,
    )


def _attr(v: Any, where: str) -> AttrDef:
    _keys(v, where, _ATTR_KEYS, ("name", "type"))
    name = _str(v["name"], where)
    where = f"attr {name!r}"
    typ = _str(v["type"], where)
    base = AttrType.parse(typ).base
    _expect(base in ATTR_BASE_TYPES, where, f"unknown attr type {typ!r}")
    return AttrDef(
        name=name,
        type=typ,
        default=value_from_json(typ, v["default"], f"{where}.default") if "default" in v else None,
        allowed_values=(
            value_from_json(f"list({base})", v["allowed_values"], f"{where}.allowed_values")
            if "allowed_values" in v
            else None
        ),
        has_minimum="minimum" in v,
        minimum=_int(v.get("minimum", 0), f"{where}.minimum"),
        description=_str(v.get("description", ""), where),
    )


def opdef_from_json(v: Any) -> OpDef:
    _keys(v, "op", _OP_KEYS, ("name",))
    name = _str(v["name"], "name")
    dep = v.get("deprecation")
    deprecation = None
    if dep is not None:
        _keys(dep, "deprecation", ("version", "explanation"), ("version",))
        deprecation = Deprecation(
            _int(dep["version"], "deprecation.version"),
            _str(dep.get("explanation", ""), "deprecation.explanation"),
        )

    def items(key: str) -> list[tuple[str, Any]]:
        return [(f"{key}[{i}]", x) for i, x in enumerate(_list(v.get(key, []), key))]

    return OpDef(
        name=name,
        inputs=tuple(_arg(x, where) for where, x in items("inputs")),
        outputs=tuple(_arg(x, where) for where, x in items("outputs")),
        attrs=tuple(_attr(x, where) for where, x in items("attrs")),
        control_outputs=tuple(_str(x, where) for where, x in items("control_outputs")),
        deprecation=deprecation,
        summary=_str(v.get("summary", ""), "summary"),
        description=_str(v.get("description", ""), "description"),
        **{f: _bool(v.get(f, False), f) for f in _FLAGS},
    )  # fmt: skip


def kernel_from_json(v: Any) -> KernelDef:
    _keys(v, "kernel", ("op", "device", "constraints", "host_memory", "label", "priority"),
          ("op", "device"))  # fmt: skip
    cons = v.get("constraints", {})
    _expect(isinstance(cons, dict), "constraints", "expected an object of attr -> dtypes")
    return KernelDef(
        op=_str(v["op"], "op"),
        device=_str(v["device"], "device"),
        constraints=tuple(
            (attr, tuple(_dtype(t, f"constraints.{attr}") for t in _list(cons[attr], attr)))
            for attr in sorted(cons)
        ),
        host_memory=tuple(_str(h, "host_memory") for h in _list(v.get("host_memory", []), "")),
        label=_str(v.get("label", ""), "label"),
        priority=_int(v.get("priority", 0), "priority"),
    )  # fmt: skip


def decode_document(obj: Mapping[str, Any], source: str) -> Document:
    """Read a parsed canonical op-set JSON object; structural problems are collected per op."""
    doc = Document(source=source, format="json")
    version = obj.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise DocumentError(source, "format_version must be an integer")
    if version > FORMAT_VERSION:
        raise DocumentError(
            source,
            f"format_version {version} is newer than this opmarket reads ({FORMAT_VERSION}); "
            "upgrade opmarket",
        )
    unknown = sorted(set(obj) - {"format", "format_version", "name", "version", "ops", "kernels"})
    if unknown:
        raise DocumentError(source, f"unknown top-level key(s) {', '.join(map(repr, unknown))}")
    for key in ("name", "version"):
        if not isinstance(obj.get(key, ""), str):
            raise DocumentError(source, f"{key!r} must be a string")
    doc.name = obj.get("name", "")
    doc.version = obj.get("version", "")
    ops, kernels = obj.get("ops", []), obj.get("kernels", [])
    if not isinstance(ops, list) or not isinstance(kernels, list):
        raise DocumentError(source, "'ops' and 'kernels' must be lists")
    for i, raw in enumerate(ops):
        op_name = raw.get("name", f"#{i}") if isinstance(raw, dict) else f"#{i}"
        try:
            doc.ops.append(opdef_from_json(raw))
        except (_Bad, ValueError) as exc:
            where = exc.where if isinstance(exc, _Bad) else ""
            doc.problems.append(Problem(str(exc), op=str(op_name), field=where, source=source))
    for i, raw in enumerate(kernels):
        try:
            doc.kernels.append(kernel_from_json(raw))
        except _Bad as exc:
            doc.problems.append(
                Problem(exc.message, field=f"kernels[{i}].{exc.where}", source=source)
            )
    return doc
