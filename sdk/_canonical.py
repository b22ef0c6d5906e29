"""The canonical op-set JSON: a versioned, deterministic form of ops and kernels.

``opmarket snapshot`` writes it and plugin repos commit it; docs/formats.md describes it
and sdk/schema/opset.schema.json is its JSON Schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opmarket.sdk._attrcodec import (
    BadJsonError,
    check_keys,
    expect,
    read_bool,
    read_dtype,
    read_int,
    read_list,
    read_str,
    value_from_json,
    value_to_json,
)
from opmarket.sdk._dtypes import DType
from opmarket.sdk._errors import DocumentError, Problem
from opmarket.sdk._opdef import ArgDef, AttrDef, AttrType, Deprecation, OpDef
from opmarket.sdk._opset import KernelDef, OpSet
from opmarket.sdk._tfproto import FULL_TYPE_IDS
from opmarket.sdk._values import (
    ATTR_BASE_TYPES,
    FullType,
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
HISTORY_FORMAT_VERSION = 1
FORMAT_VERSION = 1

_FLAGS = (
    "is_stateful",
    "is_commutative",
    "is_aggregate",
    "allows_uninitialized_input",
    "is_distributed_communication",
)


@dataclass
class Document:
    """What one file holds: its op-set (ops in file order; names may repeat in a TensorFlow
    history), the format it was read from, and every problem found while reading it. An
    opmarket history (format ``history``) holds its ``releases``, oldest first, and its
    ``opset`` is the latest release."""

    source: str
    opset: OpSet = field(default_factory=OpSet)
    format: str = ""
    problems: list[Problem] = field(default_factory=list)
    releases: list[OpSet] = field(default_factory=list)

    @property
    def ops(self) -> tuple[OpDef, ...]:
        """The op-set's ops."""
        return self.opset.ops

    @property
    def kernels(self) -> tuple[KernelDef, ...]:
        """The op-set's kernels."""
        return self.opset.kernels

    @property
    def name(self) -> str:
        """The release's distribution name, when the file says."""
        return self.opset.name

    @property
    def version(self) -> str:
        """The release's version, when the file says."""
        return self.opset.version


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


def _full_type(v: Any, where: str) -> FullType:
    check_keys(v, where, ("type_id", "args", "s", "i"), ("type_id",))
    type_id = read_str(v["type_id"], where)
    expect(
        type_id in FULL_TYPE_IDS or type_id.isdigit(),
        where,
        f"unknown full type id {type_id!r} (expected a TFT_* name or a number)",
    )
    return FullType(
        type_id=type_id,
        args=tuple(_full_type(a, where) for a in read_list(v.get("args", []), where)),
        s=read_str(v["s"], where) if "s" in v else None,
        i=read_int(v["i"], where) if "i" in v else None,
    )


_ARG_KEYS = (
    "name",
    "type",
    "type_attr",
    "number_attr",
    "type_list_attr",
    "is_ref",
    "full_type",
    "description",
)
_ATTR_KEYS = ("name", "type", "allowed_values", "minimum", "default", "description")
_OP_KEYS = (
    "name",
    "inputs",
    "outputs",
    "attrs",
    "control_outputs",
    *_FLAGS,
    "deprecation",
    "summary",
    "description",
)


def _arg(v: Any, where: str) -> ArgDef:
    check_keys(v, where, _ARG_KEYS, ("name",))
    return ArgDef(
        name=read_str(v["name"], where),
        type=read_dtype(v["type"], f"{where}.type") if "type" in v else DType.INVALID,
        type_attr=read_str(v.get("type_attr", ""), where),
        number_attr=read_str(v.get("number_attr", ""), where),
        type_list_attr=read_str(v.get("type_list_attr", ""), where),
        is_ref=read_bool(v.get("is_ref", False), where),
        description=read_str(v.get("description", ""), where),
        full_type=_full_type(v["full_type"], where) if "full_type" in v else None,
    )


def _attr(v: Any, where: str) -> AttrDef:
    check_keys(v, where, _ATTR_KEYS, ("name", "type"))
    name = read_str(v["name"], where)
    where = f"attr {name!r}"
    typ = read_str(v["type"], where)
    base = AttrType.parse(typ).base
    expect(base in ATTR_BASE_TYPES, where, f"unknown attr type {typ!r}")
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
        minimum=read_int(v.get("minimum", 0), f"{where}.minimum"),
        description=read_str(v.get("description", ""), where),
    )


def opdef_from_json(v: Any) -> OpDef:
    check_keys(v, "op", _OP_KEYS, ("name",))
    name = read_str(v["name"], "name")
    dep = v.get("deprecation")
    deprecation = None
    if dep is not None:
        check_keys(dep, "deprecation", ("version", "explanation"), ("version",))
        deprecation = Deprecation(
            read_int(dep["version"], "deprecation.version"),
            read_str(dep.get("explanation", ""), "deprecation.explanation"),
        )

    def items(key: str) -> list[tuple[str, Any]]:
        return [(f"{key}[{i}]", x) for i, x in enumerate(read_list(v.get(key, []), key))]

    return OpDef(
        name=name,
        inputs=tuple(_arg(x, where) for where, x in items("inputs")),
        outputs=tuple(_arg(x, where) for where, x in items("outputs")),
        attrs=tuple(_attr(x, where) for where, x in items("attrs")),
        control_outputs=tuple(read_str(x, where) for where, x in items("control_outputs")),
        deprecation=deprecation,
        summary=read_str(v.get("summary", ""), "summary"),
        description=read_str(v.get("description", ""), "description"),
        **{f: read_bool(v.get(f, False), f) for f in _FLAGS},
    )


def kernel_from_json(v: Any) -> KernelDef:
    check_keys(
        v,
        "kernel",
        ("op", "device", "constraints", "host_memory", "label", "priority"),
        ("op", "device"),
    )
    cons = v.get("constraints", {})
    expect(isinstance(cons, dict), "constraints", "expected an object of attr -> dtypes")
    return KernelDef(
        op=read_str(v["op"], "op"),
        device=read_str(v["device"], "device"),
        constraints=tuple(
            (attr, tuple(read_dtype(t, f"constraints.{attr}") for t in read_list(cons[attr], attr)))
            for attr in sorted(cons)
        ),
        host_memory=tuple(
            read_str(h, "host_memory") for h in read_list(v.get("host_memory", []), "")
        ),
        label=read_str(v.get("label", ""), "label"),
        priority=read_int(v.get("priority", 0), "priority"),
    )


def decode_history(obj: Mapping[str, Any], source: str) -> Document:
    """Read a parsed opmarket history (``{"format": "opmarket.history", "releases": [op-set,
    ...]}``); each release's problems are collected, naming the release."""
    version = obj.get("format_version")
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or (version > HISTORY_FORMAT_VERSION)
    ):
        raise DocumentError(source, f"unsupported format_version {version!r}")
    raw_releases = obj.get("releases")
    if not isinstance(raw_releases, list):
        raise DocumentError(source, "'releases' must be a list of op-sets")
    doc = Document(source=source, format="history")
    for i, raw in enumerate(raw_releases):
        where = f"{source} (release {i + 1})"
        if not isinstance(raw, dict):
            raise DocumentError(where, "a release is an op-set object")
        release = decode_document(raw, where)
        doc.problems.extend(release.problems)
        doc.releases.append(
            OpSet(tuple(release.ops), tuple(release.kernels), release.name, release.version)
        )
    if doc.releases:
        latest = doc.releases[-1]
        doc.opset = latest
    return doc


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
    raw_ops, raw_kernels = obj.get("ops", []), obj.get("kernels", [])
    if not isinstance(raw_ops, list) or not isinstance(raw_kernels, list):
        raise DocumentError(source, "'ops' and 'kernels' must be lists")
    ops: list[OpDef] = []
    kernels: list[KernelDef] = []
    for i, raw in enumerate(raw_ops):
        op_name = raw.get("name", f"#{i}") if isinstance(raw, dict) else f"#{i}"
        try:
            ops.append(opdef_from_json(raw))
        except ValueError as exc:
            where = exc.where if isinstance(exc, BadJsonError) else ""
            doc.problems.append(Problem(str(exc), op=str(op_name), field=where, source=source))
    for i, raw in enumerate(raw_kernels):
        try:
            kernels.append(kernel_from_json(raw))
        except BadJsonError as exc:
            doc.problems.append(
                Problem(exc.message, field=f"kernels[{i}].{exc.where}", source=source)
            )
    doc.opset = OpSet(tuple(ops), tuple(kernels), obj.get("name", ""), obj.get("version", ""))
    return doc
