"""Spec-form JSON: ops written as REGISTER_OP spec strings.

``{"ops": [{"name": "ZeroOut", "inputs": ["to_zero: int32"], "outputs": ["zeroed: int32"],
"attrs": [], "stateful": false, "doc": "..."}]}``
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, cast

from opmarket.sdk._builder import OpFlags, finalize_op
from opmarket.sdk._errors import DocumentError, OpmarketError, Problem
from opmarket.sdk._opdef import ArgDef, AttrDef, Deprecation, OpDef

__all__ = ["SPEC_KEYS", "NotExpressibleError", "decode_spec_document", "op_to_spec"]

# spec-form key -> finalize_op keyword for the boolean flags
_FLAG_KEYS = {
    "stateful": "is_stateful",
    "commutative": "is_commutative",
    "aggregate": "is_aggregate",
    "allows_uninitialized_input": "allows_uninitialized_input",
    "distributed_communication": "is_distributed_communication",
}
_LIST_KEYS = ("inputs", "outputs", "attrs", "control_outputs")
SPEC_KEYS: tuple[str, ...] = ("name", *_LIST_KEYS, "doc", *_FLAG_KEYS, "deprecation")


class NotExpressibleError(OpmarketError, ValueError):
    """An OpDef that no set of spec strings produces (e.g. a float8 type in an allowed set)."""


def looks_like_spec_document(obj: Any) -> bool:
    """True for ``{"ops": [...]}`` whose ops give their arguments as strings."""
    if not isinstance(obj, dict) or "format" in obj or not isinstance(obj.get("ops"), list):
        return False
    for op in obj["ops"]:
        if isinstance(op, dict):
            for key in _LIST_KEYS:
                items = op.get(key)
                if isinstance(items, list) and items:
                    return all(isinstance(i, str) for i in items)
    return True


def _decode_op(raw: Any, index: int, source: str) -> tuple[OpDef | None, list[Problem]]:
    if not isinstance(raw, dict):
        return None, [
            Problem(f"expected an object, got {raw!r}", field=f"ops[{index}]", source=source)
        ]
    name = raw.get("name")
    label = name if isinstance(name, str) else f"#{index}"
    problems: list[Problem] = []

    def bad(field: str, message: str) -> None:
        problems.append(Problem(message, op=label, field=field, source=source))

    unknown = sorted(set(raw) - set(SPEC_KEYS))
    if unknown:
        bad("", f"unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(SPEC_KEYS)}")
    if not isinstance(name, str) or not name:
        bad("name", 'every op needs a "name" string')
    lists: dict[str, list[str]] = {}
    for key in _LIST_KEYS:
        value = raw.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            bad(key, f"{key!r} must be a list of spec strings")
            value = []
        lists[key] = value
    flags: dict[str, bool] = {}
    for key, keyword in _FLAG_KEYS.items():
        value = raw.get(key, False)
        if not isinstance(value, bool):
            bad(key, f"{key!r} must be true or false")
        flags[keyword] = value is True
    doc = raw.get("doc", "")
    if not isinstance(doc, str):
        bad("doc", "'doc' must be a string")
        doc = ""
    deprecation = None
    dep = raw.get("deprecation")
    if dep is not None:
        ok = (
            isinstance(dep, dict)
            and set(dep) <= {"version", "explanation"}
            and isinstance(dep.get("version"), int)
            and not isinstance(dep.get("version"), bool)
            and isinstance(dep.get("explanation", ""), str)
        )
        if ok:
            deprecation = Deprecation(dep["version"], dep.get("explanation", ""))
        else:
            bad("deprecation", 'expected {"version": <int>, "explanation": "<text>"}')
    if not isinstance(name, str) or not name:
        return None, problems
    opdef, errors = finalize_op(
        name,
        inputs=lists["inputs"],
        outputs=lists["outputs"],
        attrs=lists["attrs"],
        control_outputs=lists["control_outputs"],
        doc=doc,
        deprecation=deprecation,
        **cast(OpFlags, flags),
    )
    problems.extend(Problem(e, op=label, source=source) for e in errors)
    return (opdef if not problems else None), problems


def decode_spec_document(obj: Mapping[str, Any], source: str) -> tuple[list[OpDef], list[Problem]]:
    """Build every op of a spec-form document, collecting every problem."""
    unknown = sorted(set(obj) - {"ops"})
    if unknown:
        raise DocumentError(source, f"unknown top-level key(s) {', '.join(map(repr, unknown))}")
    ops: list[OpDef] = []
    problems: list[Problem] = []
    seen: set[str] = set()
    for i, raw in enumerate(obj["ops"]):
        opdef, found = _decode_op(raw, i, source)
        problems.extend(found)
        if opdef is not None:
            if opdef.name in seen:  # TensorFlow refuses to register an op twice
                problems.append(Problem("declared more than once", op=opdef.name, source=source))
            seen.add(opdef.name)
            ops.append(opdef)
    return ops, problems


def _doc_text(op: OpDef) -> str:
    """Documentation text that TensorFlow's Doc() reads back into the same fields."""
    parts: list[str] = []
    if op.summary:
        parts.append(op.summary)
    if op.description:
        parts.append(op.description)
    named: list[ArgDef | AttrDef] = [*op.inputs, *op.outputs, *op.attrs]
    entries = []
    for item in named:
        if item.description:
            first, *rest = item.description.split("\n")
            lines = [f"{item.name}: {first}"] + [f"  {line}" if line else "" for line in rest]
            entries.append("\n".join(lines))
    if entries:
        parts.append("\n".join(entries))
    return "\n\n".join(parts)


def op_to_spec(op: OpDef) -> tuple[dict[str, Any], list[str]]:
    """The spec-form JSON object of ``op`` and notes on what it leaves out.

    Full types (set by TensorFlow's C++ type constructors, not by spec strings) are left out
    with a note; anything else spec strings cannot say raises NotExpressibleError.
    """
    notes = [
        f"op {op.name}: the full type of {kind} {arg.name!r} has no spec form; left out"
        for kind, args in (("input", op.inputs), ("output", op.outputs))
        for arg in args
        if arg.full_type is not None
    ]
    if notes:
        op = replace(
            op,
            inputs=tuple(replace(a, full_type=None) for a in op.inputs),
            outputs=tuple(replace(a, full_type=None) for a in op.outputs),
        )
    out: dict[str, Any] = {"name": op.name}
    out["inputs"] = [a.spec for a in op.inputs]
    out["outputs"] = [a.spec for a in op.outputs]
    out["attrs"] = [a.spec for a in op.attrs]
    if op.control_outputs:
        out["control_outputs"] = list(op.control_outputs)
    for key, field in _FLAG_KEYS.items():
        if getattr(op, field):
            out[key] = True
    if op.deprecation is not None:
        out["deprecation"] = {
            "version": op.deprecation.version,
            "explanation": op.deprecation.explanation,
        }
    doc = _doc_text(op)
    if doc:
        out["doc"] = doc
    # Check the round trip: spec strings cannot say everything an OpDef can.
    rebuilt, errors = finalize_op(
        op.name,
        inputs=out["inputs"],
        outputs=out["outputs"],
        attrs=out["attrs"],
        control_outputs=out.get("control_outputs", ()),
        doc=doc,
        deprecation=op.deprecation,
        **cast(OpFlags, {field: getattr(op, field) for field in _FLAG_KEYS.values()}),
    )
    if rebuilt != op:
        why = "; ".join(errors) if errors else _first_difference(op, rebuilt)
        raise NotExpressibleError(f"op {op.name} cannot be written in spec form: {why}")
    return out, notes


def _first_difference(op: OpDef, rebuilt: OpDef | None) -> str:
    if rebuilt is None:
        return "it does not rebuild"
    for a, b in zip(op.attrs, rebuilt.attrs, strict=False):
        if a != b:
            return f"attr {a.name!r} comes back as {b.spec!r}"
    pairs = zip((*op.inputs, *op.outputs), (*rebuilt.inputs, *rebuilt.outputs), strict=False)
    for arg, back in pairs:
        if arg != back:
            return f"argument {arg.name!r} has fields spec strings cannot carry"
    if (op.summary, op.description) != (rebuilt.summary, rebuilt.description):
        return "its documentation does not survive Doc()'s reading"
    return "a flag implied by its arguments differs (e.g. a resource input makes an op stateful)"
