"""The REGISTER_OP spec language: ``Input("x: N * T")``, ``Attr("T: {float, int32} = DT_INT32")``.

Parsing follows TensorFlow's OpDefBuilder step for step, so that a spec TensorFlow accepts
means the same here and one it rejects is rejected here. Each function returns the parsed
piece or records a problem (a message naming the op and quoting the spec) and moves on, so
one document's problems are all reported together.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from opmarket.sdk._attrproto import format_value, proto_field_for, value_from_proto
from opmarket.sdk._dtypes import COMPOUND_TYPES, DType, dtype_from_spec_name
from opmarket.sdk._opdef import ArgDef, AttrDef, AttrType
from opmarket.sdk._tfproto import messages

__all__ = [
    "MutableArg",
    "MutableAttr",
    "format_attr",
    "parse_attr",
    "parse_attr_default",
    "parse_control_output",
    "parse_doc",
    "parse_input_or_output",
]

_SPACE = " \t\n\v\f\r"
_ATTR_NAME = re.compile(r"([A-Za-z][A-Za-z0-9_]*)[" + _SPACE + r"]*:[" + _SPACE + r"]*")
_LIST_PREFIX = re.compile(r"list[" + _SPACE + r"]*\([" + _SPACE + r"]*")
_ATTR_TYPE = re.compile(r"([a-z0-9]+)[" + _SPACE + r"]*")
_NUMBER = re.compile(r"[" + _SPACE + r"]*(-?[0-9]+)[" + _SPACE + r"]*")
_ARG_NAME = re.compile(r"([a-z][a-z0-9_]*)[" + _SPACE + r"]*:[" + _SPACE + r"]*")
_REF_OPEN = re.compile(r"Ref[" + _SPACE + r"]*\([" + _SPACE + r"]*")
_REF_CLOSE = re.compile(r"\)[" + _SPACE + r"]*")
_NAME_OR_TYPE = re.compile(r"([A-Za-z][A-Za-z0-9_]*)[" + _SPACE + r"]*")
_TIMES_TYPE = re.compile(r"\*[" + _SPACE + r"]*([A-Za-z][A-Za-z0-9_]*)[" + _SPACE + r"]*")
_CONTROL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_DOC_NAME = re.compile(r"([A-Za-z][A-Za-z0-9_]*)[" + _SPACE + r"]*:[" + _SPACE + r"]*")
_COMPOUND_PREFIXES = (
    "numbertype",
    "numerictype",
    "quantizedtype",
    "realnumbertype",
    "realnumberictype",
)
_BASE_TYPE_PREFIXES = ("string", "int", "float", "bool", "type", "shape", "tensor", "func")
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MAX_TENSOR_NEST = 100
_DEFAULT_EXAMPLES = {
    "string": "'foo'",
    "int": "-3",
    "float": "1e-05",
    "bool": "true",
    "type": "DT_INT32",
    "shape": "{ dim { size: 2 } } or { unknown_rank: true }",
    "tensor": "{ dtype: DT_INT32 int_val: 5 }",
    "func": "{ name: 'f' }",
}


@dataclass
class MutableAttr:
    """An AttrDef under construction (OpDefBuilder fills fields in place)."""

    name: str = ""
    type: str = ""
    default: Any = None
    allowed_values: list[Any] | None = None
    has_minimum: bool = False
    minimum: int = 0
    description: str = ""

    def freeze(self) -> AttrDef:
        allowed = None if self.allowed_values is None else tuple(self.allowed_values)
        return AttrDef(
            self.name,
            self.type,
            self.default,
            allowed,
            self.has_minimum,
            self.minimum,
            self.description,
        )


@dataclass
class MutableArg:
    """An ArgDef under construction."""

    name: str = ""
    type: DType = DType.INVALID
    type_attr: str = ""
    number_attr: str = ""
    type_list_attr: str = ""
    is_ref: bool = False
    description: str = ""

    def freeze(self) -> ArgDef:
        return ArgDef(
            self.name,
            DType(self.type),
            self.type_attr,
            self.number_attr,
            self.type_list_attr,
            self.is_ref,
            self.description,
        )


def _strip_leading(s: str) -> str:
    return s.lstrip(_SPACE)


def _consume_quoted(quote: str, spec: str) -> tuple[str, str] | None:
    """A quoted string at the start of ``spec``: (escaped body, rest after trailing space)."""
    if not spec.startswith(quote):
        return None
    i = 1
    while i < len(spec):
        ch = spec[i]
        if ch == "\\":
            i += 2
            continue
        if ch == quote:
            return spec[1:i], _strip_leading(spec[i + 1 :])
        i += 1
    return None


def _nests_under_limit(text: str) -> bool:
    depth = 0
    for ch in text:
        if ch in "{<":
            depth += 1
            if depth > _MAX_TENSOR_NEST:
                return False
        elif ch in "}>":
            depth -= 1
    return True


def parse_attr_default(attr_type: str, text: str) -> tuple[bool, Any]:
    """TensorFlow's ParseAttrValue: read ``text`` as a value of ``attr_type``.

    Returns (True, value) or (False, reason).
    """
    base, is_list = AttrType.parse(attr_type)
    fld = proto_field_for(base)
    if is_list:
        cleaned = text.strip(_SPACE)
        if len(cleaned) < 2 or cleaned[0] != "[" or cleaned[-1] != "]":
            return False, "a list default must be written in [ ]"
        if _strip_leading(cleaned[1:]) == "]":
            return True, ()
        to_parse = f"list {{ {fld}: {text} }}"
    else:
        to_parse = f"{fld}: {text}"
    if base == "tensor" and not _nests_under_limit(to_parse):
        return False, f"the tensor nests deeper than {_MAX_TENSOR_NEST} levels"
    # protobuf's modules are loaded only for a default to read (most specs have none)
    from opmarket.sdk._prototext import parse_proto_text

    proto = messages()["AttrValue"]()
    if not parse_proto_text(to_parse, proto):
        example = _DEFAULT_EXAMPLES.get(base, "")
        return False, f"not a valid {attr_type} value" + (f" (e.g. {example})" if example else "")
    return True, value_from_proto(attr_type, proto)


def parse_attr(spec: str, attrs: list[MutableAttr], errors: list[str]) -> None:
    """OpDefBuilder's FinalizeAttr: append the attr ``spec`` declares to ``attrs``."""
    attr = MutableAttr()
    attrs.append(attr)
    orig = spec

    def fail(msg: str) -> None:
        errors.append(f'Attr("{orig}"): {msg}')

    m = _ATTR_NAME.match(spec)
    if not m:
        fail("expected '<name>:' at the start (a name starts with a letter)")
        return
    attr.name = m.group(1)
    spec = spec[m.end() :]

    lm = _LIST_PREFIX.match(spec)
    is_list = lm is not None
    if lm:
        spec = spec[lm.end() :]

    typ = ""
    for word in _BASE_TYPE_PREFIXES:
        if spec.startswith(word):
            typ = word
            spec = spec[len(word) :]
            break
    else:
        if spec.startswith("any"):
            # TensorFlow consumes 'any' even though only internal ops may use it.
            spec = spec[3:]
        compound = next((w for w in _COMPOUND_PREFIXES if spec.startswith(w)), None)
        if compound is not None:
            spec = spec[len(compound) :]
            typ = "type"
            if compound not in COMPOUND_TYPES:
                fail(f"unknown type word {compound!r} (did you mean 'realnumbertype'?)")
                return
            attr.allowed_values = list(COMPOUND_TYPES[compound])
        elif spec.startswith("{"):
            spec = _strip_leading(spec[1:])
            attr.allowed_values = []
            if spec.startswith(('"', "'")):
                from opmarket.sdk._prototext import unescape_c  # it loads protobuf: rare

                typ = "string"
                while True:
                    got = _consume_quoted('"', spec) or _consume_quoted("'", spec)
                    if got is None:
                        fail(f"cannot read an allowed string at {spec!r}")
                        return
                    escaped, spec = got
                    unescaped = unescape_c(escaped)
                    if unescaped is None:
                        fail(f"bad escape sequence in allowed string {escaped!r}")
                        return
                    attr.allowed_values.append(unescaped.decode("utf-8", "surrogateescape"))
                    if spec.startswith(","):
                        spec = _strip_leading(spec[1:])
                        if spec.startswith("}"):
                            spec = spec[1:]
                            break
                    else:
                        if not spec.startswith("}"):
                            fail(f"expected ',' or '}}' after an allowed string, found {spec!r}")
                            return
                        spec = spec[1:]
                        break
            else:
                typ = "type"
                while True:
                    tm = _ATTR_TYPE.match(spec)
                    if not tm:
                        fail(f"cannot read a type name at {spec!r}")
                        return
                    word = tm.group(1)
                    spec = spec[tm.end() :]
                    if word in COMPOUND_TYPES:
                        attr.allowed_values.extend(COMPOUND_TYPES[word])
                    else:
                        dt = dtype_from_spec_name(word)
                        if dt is None:
                            hint = (
                                " (inside {...} TensorFlow reads only letters and digits, so "
                                "names with '_' such as float8_e5m2 cannot be listed there)"
                                if spec.startswith("_")
                                else ""
                            )
                            fail(f"unknown type {word!r} in the allowed list{hint}")
                            return
                        attr.allowed_values.append(dt)
                    if spec.startswith(","):
                        spec = _strip_leading(spec[1:])
                        if spec.startswith("}"):
                            spec = spec[1:]
                            break
                    else:
                        if not spec.startswith("}"):
                            fail(f"expected ',' or '}}' after a type, found {spec!r}")
                            return
                        spec = spec[1:]
                        break
        else:
            fail(
                f"cannot read a type at {spec!r}: expected string, int, float, bool, type, "
                "shape, tensor, func, list(...), a {...} set or numbertype/realnumbertype/"
                "quantizedtype"
            )
            return
    spec = _strip_leading(spec)

    if is_list:
        if not spec.startswith(")"):
            fail(f"expected ')' to close 'list(', found {spec!r}")
            return
        spec = _strip_leading(spec[1:])
        attr.type = f"list({typ})"
    else:
        attr.type = typ

    if (is_list or typ == "int") and spec.startswith(">="):
        spec = spec[2:]
        nm = _NUMBER.match(spec)
        value = int(nm.group(1)) if nm else None
        if nm is None or value is None or not _INT64_MIN <= value <= _INT64_MAX:
            fail(f"expected an integer minimum after '>=', found {spec!r}")
            return
        spec = spec[nm.end() :]
        attr.has_minimum = True
        attr.minimum = value

    if spec.startswith("="):
        spec = _strip_leading(spec[1:])
        ok, value = parse_attr_default(attr.type, spec)
        if not ok:
            fail(f"cannot read default value {spec!r} as {attr.type}: {value}")
            return
        attr.default = value
    elif spec:
        fail(f"unexpected {spec!r} at the end")


def parse_input_or_output(
    spec: str,
    is_output: bool,
    op: _OpUnderConstruction,
    errors: list[str],
) -> None:
    """OpDefBuilder's FinalizeInputOrOutput: append the argument ``spec`` declares."""
    arg = MutableArg()
    (op.outputs if is_output else op.inputs).append(arg)
    orig = spec
    kind = "Output" if is_output else "Input"

    def fail(msg: str) -> None:
        errors.append(f'{kind}("{orig}"): {msg}')

    m = _ARG_NAME.match(spec)
    if not m:
        fail("expected '<name>:' at the start (names are lower_case: a-z, 0-9, _)")
        return
    arg.name = m.group(1)
    spec = spec[m.end() :]

    rm = _REF_OPEN.match(spec)
    if rm:
        arg.is_ref = True
        spec = spec[rm.end() :]

    fm = _NAME_OR_TYPE.match(spec)
    if not fm:
        fail(f"expected a type or an attr name at {spec!r}")
        return
    spec = spec[fm.end() :]
    type_or_attr = fm.group(1)
    tm = _TIMES_TYPE.match(spec)
    if tm:
        arg.number_attr = type_or_attr
        type_or_attr = tm.group(1)
        spec = spec[tm.end() :]
    dt = dtype_from_spec_name(type_or_attr)
    if dt is not None:
        arg.type = dt
    else:
        attr = op.find_attr(type_or_attr)
        if attr is None:
            fail(f"{type_or_attr!r} is neither a dtype nor an attr of this op")
            return
        if attr.type == "type":
            arg.type_attr = type_or_attr
        elif attr.type == "list(type)":
            arg.type_list_attr = type_or_attr
        else:
            fail(
                f"attr {type_or_attr!r} has type {attr.type}; an argument's type must come "
                "from a 'type' or 'list(type)' attr"
            )
            return

    if arg.is_ref:
        cm = _REF_CLOSE.match(spec)
        if not cm:
            fail(f"expected ')' to close 'Ref(', found {spec!r}")
            return
        spec = spec[cm.end() :]

    if spec:
        fail(f"unexpected {spec!r} at the end")
        return

    # A list length attr, and a list(type) attr, default to a minimum of 1.
    if arg.number_attr:
        number = op.find_attr(arg.number_attr)
        if number is not None and not number.has_minimum:
            number.has_minimum = True
            number.minimum = 1
    elif arg.type_list_attr:
        tl = op.find_attr(arg.type_list_attr)
        if tl is not None and tl.type == "list(type)" and not tl.has_minimum:
            tl.has_minimum = True
            tl.minimum = 1

    # Ops that take or make a resource handle directly touch state.
    if arg.type == DType.RESOURCE:
        op.is_stateful = True


def parse_control_output(name: str, op: _OpUnderConstruction, errors: list[str]) -> None:
    """OpDefBuilder's FinalizeControlOutput: the leading name is what counts."""
    m = _CONTROL_NAME.match(name)
    if not m:
        errors.append(f'ControlOutput("{name}"): expected a name starting with a letter')
    op.control_outputs.append(m.group(0) if m else "")


def _doc_name(line: str) -> tuple[str, str] | None:
    m = _DOC_NAME.match(line)
    return (m.group(1), line[m.end() :]) if m else None


def parse_doc(text: str, op: _OpUnderConstruction, errors: list[str]) -> None:
    """OpDefBuilder's FinalizeDoc: summary, description, then ``name: text`` per arg or attr."""
    lines = [line.rstrip(_SPACE) for line in text.split("\n")]
    i = 0
    while i < len(lines) and not lines[i]:
        i += 1
    if i < len(lines):
        op.summary = lines[i]
        i += 1
    while i < len(lines) and not lines[i]:
        i += 1
    start = i
    while i < len(lines) and _doc_name(lines[i]) is None:
        i += 1
    end = i
    while start < end and not lines[end - 1]:
        end -= 1
    op.description = "\n".join(lines[start:end])

    while i < len(lines):
        named = _doc_name(lines[i])
        assert named is not None
        name, first = named
        description = [first]
        i += 1
        while i < len(lines) and _doc_name(lines[i]) is None:
            description.append(lines[i])
            i += 1
        while description and not description[-1]:
            description.pop()
        indents = [len(d) - len(d.lstrip(" ")) for d in description[1:] if d]
        if indents:
            cut = min(indents)
            description = [description[0]] + [d[cut:] if d else d for d in description[1:]]
        complete = "\n".join(description)
        target: MutableArg | MutableAttr | None = (
            next((a for a in op.inputs if a.name == name), None)
            or next((a for a in op.outputs if a.name == name), None)
            or op.find_attr(name)
        )
        if target is None:
            errors.append(f"Doc(): {name!r} names no input, output or attr of this op")
            return
        target.description = complete


@dataclass
class _OpUnderConstruction:
    name: str
    attrs: list[MutableAttr] = field(default_factory=list)
    inputs: list[MutableArg] = field(default_factory=list)
    outputs: list[MutableArg] = field(default_factory=list)
    control_outputs: list[str] = field(default_factory=list)
    summary: str = ""
    description: str = ""
    is_stateful: bool = False

    def find_attr(self, name: str) -> MutableAttr | None:
        return next((a for a in self.attrs if a.name == name), None)


def _quote(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def format_attr(attr: AttrDef) -> str:
    """An AttrDef as the spec string that declares it."""
    if attr.allowed_values is not None and attr.base_type == "type":
        typ = "{" + ", ".join(d.spec_name for d in attr.allowed_values) + "}"
    elif attr.allowed_values is not None and attr.base_type == "string":
        typ = "{" + ", ".join(_quote(s) for s in attr.allowed_values) + "}"
    else:
        typ = attr.base_type
    text = f"{attr.name}: " + (f"list({typ})" if attr.is_list else typ)
    if attr.has_minimum:
        text += f" >= {attr.minimum}"
    if attr.default is not None:
        text += " = " + format_value(attr.type, attr.default)
    return text
