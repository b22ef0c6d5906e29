"""A fast reader for OpList text (``ops.pbtxt``, TensorFlow's registry dumps, history files).

protobuf's text-format parser is pure Python and spends about a second on TensorFlow's
registry. This reader splits the text into one item per field (``name: value``, ``name {``,
``}``) with a single regex pass, and builds the model (OpDef, ArgDef, AttrDef) straight from
the items.
Attr values it does not know on sight (tensors, functions, placeholders) and full types are
filled into protobuf messages from the same items and converted by the usual converters.

It reads only the plain, common spelling of the format. Anything else (commas or semicolons
between fields, ``<>`` or ``[...]`` lists, adjacent strings, numbers as enum values, a field
given twice, an unknown field, a syntax error) makes it give up with None, and the caller reads
the text with protobuf's parser instead, which then decides, as it always did, what the text
means or what is wrong with it. So for any text, the result is what the protobuf path makes.
"""

from __future__ import annotations

import re
from typing import Any

from google.protobuf import text_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.text_encoding import CUnescape

from opmarket.sdk._attrproto import full_type_from_proto, tagged_from_proto
from opmarket.sdk._dtypes import DType
from opmarket.sdk._opdef import ArgDef, AttrDef, AttrType, Deprecation, OpDef
from opmarket.sdk._tfproto import FULL_TYPE_IDS, messages
from opmarket.sdk._values import FullType, TaggedValue, TensorShape, normalize_float

__all__ = ["attr_type_ok", "read_oplist", "value_for_attr"]

# One item per match: space and comments, then a field with a scalar value (group 1 the name;
# 2 a quoted string; 3 a bare token), a field that opens a message (1 and 4), a closing brace
# (5), or any other character (6), which sends the text to protobuf's parser; the end of the
# text, after space and comments, is an item with no group set.
_ITEM = re.compile(
    r"""\s*+(?:\#[^\n]*\s*+)*+
    (?:
        ([A-Za-z_][A-Za-z0-9_]*)[ \t]*
        (?:
            :[ \t]*(?:
                ("[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*')
              | ([A-Za-z0-9_.+-]+)
            )
          | :?[ \t]*(\{)
        )
      | (\})
      | (\S)
      | \Z
    )""",
    re.X,
)
# A whole token of protobuf's tokenizer: an identifier or a number.
_PB_TOKEN = re.compile(r"[a-zA-Z_][0-9a-zA-Z_+-]*|(?:[0-9+-]|\.[0-9])[0-9a-zA-Z_.+-]*")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")
_FLOAT32_MAX = 3.4028234663852886e38
_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)
_DTYPES = {dt.tf_name: dt for dt in DType}
_FLAGS = frozenset(
    (
        "is_commutative",
        "is_aggregate",
        "is_stateful",
        "allows_uninitialized_input",
        "is_distributed_communication",
    )
)
_OP_STRINGS = frozenset(("name", "summary", "description"))
_ARG_STRINGS = frozenset(("name", "description", "type_attr", "number_attr", "type_list_attr"))
_ATTR_STRINGS = frozenset(("name", "type", "description"))
_ATTR_VALUES = frozenset(("default_value", "allowed_values"))
# AttrValue fields read on sight, by attr base type; the order is tagged_from_proto's.
_LIST_FIELDS = (
    ("s", "string"),
    ("i", "int"),
    ("f", "float"),
    ("b", "bool"),
    ("type", "type"),
    ("shape", "shape"),
)
_SCALAR_BASE = {"s": "string", "i": "int", "f": "float", "b": "bool", "type": "type"}
_Item = tuple[str, str, str, str, str, str]


class _Slow(Exception):
    """The text is not in the plain spelling this reader knows: protobuf's parser decides."""


def attr_type_ok(t: str) -> bool:
    """Whether ``t`` is a type an attr value can be read as (``int``, ``list(shape)``...)."""
    base = AttrType.parse(t).base
    return base in ("string", "int", "float", "bool", "type", "shape", "tensor", "func")


def value_for_attr(attr_type: str, tagged: TaggedValue) -> Any:
    """The value of an attr of ``attr_type`` from what its AttrValue holds (``tagged``); what
    it holds, unchanged, when that is not an ``attr_type`` value (validation rejects it as
    TensorFlow's AttrValueHasType does)."""
    if tagged.type == attr_type:
        return tagged.value
    if attr_type.startswith("list(") and (
        tagged.type == "none" or (tagged.type.startswith("list(") and tagged.value == ())
    ):
        return ()  # an empty list of any kind (or nothing) is an empty list
    return tagged


def _unquote(quoted: str) -> str:
    """A string field's value from its quoted token."""
    if "\\" in quoted:
        return CUnescape(quoted[1:-1]).decode("utf-8")
    return quoted[1:-1]


def _bool(token: str) -> bool:
    if token == "true":
        return True
    if token == "false":
        return False
    if not token or not _PB_TOKEN.fullmatch(token):
        raise _Slow
    return text_format.ParseBool(token)


def _int(token: str, bounds: tuple[int, int] = _INT64) -> int:
    if not token or not _DECIMAL.fullmatch(token):
        raise _Slow
    value = int(token)
    if not bounds[0] <= value <= bounds[1]:
        raise _Slow
    return value


def _fill(items: list[_Item], i: int, msg: Any, desc: Descriptor) -> int:
    """Fill ``msg`` from the items after its opening brace, as protobuf's Parse would; the
    index after its closing brace."""
    seen: set[str] = set()
    while True:
        name, quoted, bare, opened, closed, _ = items[i]
        i += 1
        if closed:
            return i
        field = desc.fields_by_name.get(name)
        if field is None:
            raise _Slow
        oneof = field.containing_oneof
        if oneof is not None and msg.WhichOneof(oneof.name) not in (None, name):
            raise _Slow
        repeated = _is_repeated(field)
        if not repeated:
            if name in seen:
                raise _Slow
            seen.add(name)
        sub_desc = field.message_type
        if sub_desc is not None:
            if not opened or sub_desc.GetOptions().map_entry:
                raise _Slow
            if repeated:
                sub = getattr(msg, name).add()
            else:
                sub = getattr(msg, name)
                sub.SetInParent()
            i = _fill(items, i, sub, sub_desc)
            continue
        if opened:
            raise _Slow
        value = _scalar(field, quoted, bare)
        if repeated:
            getattr(msg, name).append(value)
        else:
            setattr(msg, name, value)


def _oplist(items: list[_Item]) -> list[OpDef]:
    ops: list[OpDef] = []
    i, n = 0, len(items)
    while i < n:
        name, _, _, opened, closed, other = items[i]
        i += 1
        if name == "op" and opened:
            op, i = _opdef(items, i)
            ops.append(op)
        elif name or closed or other:
            raise _Slow
        else:
            break  # the end of the text: the only item with nothing set
    return ops


def _opdef(items: list[_Item], i: int) -> tuple[OpDef, int]:
    fields: dict[str, Any] = {}
    inputs: list[ArgDef] = []
    outputs: list[ArgDef] = []
    attrs: list[AttrDef] = []
    control: list[str] = []
    while True:
        name, quoted, bare, opened, closed, _ = items[i]
        i += 1
        if closed:
            break
        if opened:
            if name == "attr":
                attr, i = _attrdef(items, i)
                attrs.append(attr)
            elif name == "input_arg":
                arg, i = _argdef(items, i)
                inputs.append(arg)
            elif name == "output_arg":
                arg, i = _argdef(items, i)
                outputs.append(arg)
            elif name == "deprecation" and name not in fields:
                fields[name], i = _deprecation(items, i)
            else:
                raise _Slow
        elif name in fields:
            raise _Slow
        elif quoted and name in _OP_STRINGS:
            fields[name] = quoted[1:-1] if "\\" not in quoted else _unquote(quoted)
        elif bare and name in _FLAGS:
            fields[name] = _bool(bare)
        elif quoted and name == "control_output":
            control.append(_unquote(quoted))
        else:
            raise _Slow
    op = OpDef(
        inputs=tuple(inputs),
        outputs=tuple(outputs),
        attrs=tuple(attrs),
        control_outputs=tuple(control),
        **{"name": "", **fields},
    )
    return op, i


def _deprecation(items: list[_Item], i: int) -> tuple[Deprecation, int]:
    version: int | None = None
    explanation: str | None = None
    while True:
        name, quoted, bare, _, closed, _ = items[i]
        i += 1
        if closed:
            return Deprecation(version or 0, explanation or ""), i
        if name == "version" and version is None:
            version = _int(bare, _INT32)
        elif name == "explanation" and quoted and explanation is None:
            explanation = _unquote(quoted)
        else:
            raise _Slow


def _argdef(items: list[_Item], i: int) -> tuple[ArgDef, int]:
    fields: dict[str, Any] = {}
    while True:
        name, quoted, bare, opened, closed, _ = items[i]
        i += 1
        if closed:
            return ArgDef(**{"name": "", **fields}), i
        if name in fields:
            raise _Slow
        if quoted and name in _ARG_STRINGS:
            fields[name] = quoted[1:-1] if "\\" not in quoted else _unquote(quoted)
        elif bare and name == "type":
            fields[name] = _DTYPES[bare]
        elif bare and name == "is_ref":
            fields[name] = _bool(bare)
        elif opened and name == "experimental_full_type" and "full_type" not in fields:
            fields["full_type"], i = _full_type_or_message(items, i)
        else:
            raise _Slow


def _full_type_or_message(items: list[_Item], i: int) -> tuple[FullType, int]:
    try:
        return _full_type(items, i)
    except (_Slow, ValueError, KeyError):  # protobuf's rules decide, on a message
        proto = messages()["FullTypeDef"]()
        i = _fill(items, i, proto, proto.DESCRIPTOR)
        return full_type_from_proto(proto), i


def _full_type(items: list[_Item], i: int) -> tuple[FullType, int]:
    type_id: str | None = None
    args: list[FullType] = []
    s: str | None = None
    number: int | None = None
    while True:
        name, quoted, bare, opened, closed, _ = items[i]
        i += 1
        if closed:
            return FullType(type_id or "TFT_UNSET", tuple(args), s, number), i
        if opened and name == "args":
            arg, i = _full_type(items, i)
            args.append(arg)
        elif name == "type_id" and type_id is None and bare in FULL_TYPE_IDS:
            type_id = bare
        elif name == "s" and quoted and s is None and number is None:
            s = _unquote(quoted)
        elif name == "i" and s is None and number is None:
            number = _int(bare)
        else:
            raise _Slow


def _attrdef(items: list[_Item], i: int) -> tuple[AttrDef, int]:
    fields: dict[str, Any] = {}
    values: dict[str, TaggedValue] = {}
    while True:
        name, quoted, bare, opened, closed, _ = items[i]
        i += 1
        if closed:
            break
        if name in fields or name in values:
            raise _Slow
        if quoted and name in _ATTR_STRINGS:
            fields[name] = quoted[1:-1] if "\\" not in quoted else _unquote(quoted)
        elif opened and name in _ATTR_VALUES:
            values[name], i = _attr_value(items, i)
        elif bare and name == "has_minimum":
            fields[name] = _bool(bare)
        elif name == "minimum":
            fields[name] = _int(bare)
        else:
            raise _Slow
    attr_type = fields.get("type", "")
    if values and attr_type_ok(attr_type):
        if "default_value" in values:
            fields["default"] = value_for_attr(attr_type, values["default_value"])
        if "allowed_values" in values:
            list_type = attr_type if attr_type.startswith("list(") else f"list({attr_type})"
            fields["allowed_values"] = value_for_attr(list_type, values["allowed_values"])
    return AttrDef(**{"name": "", "type": "", **fields}), i


def _attr_value(items: list[_Item], i: int) -> tuple[TaggedValue, int]:
    try:
        return _plain_attr_value(items, i)
    except (_Slow, ValueError, KeyError):  # protobuf's rules decide, on a message
        proto = messages()["AttrValue"]()
        i = _fill(items, i, proto, proto.DESCRIPTOR)
        return tagged_from_proto(proto), i


def _plain_attr_value(items: list[_Item], i: int) -> tuple[TaggedValue, int]:
    """The common AttrValues: one scalar, a list of scalars or shapes, a shape, or nothing."""
    name, quoted, bare, opened, closed, _ = items[i]
    i += 1
    if closed:
        return TaggedValue("none", None), i
    if opened:
        if name == "list":
            tagged, i = _plain_list(items, i)
        elif name == "shape":
            shape, i = _shape(items, i)
            tagged = TaggedValue("shape", shape)
        else:
            raise _Slow
    else:
        base = _SCALAR_BASE[name]
        tagged = TaggedValue(base, _plain_scalar(base, quoted, bare))
    if not items[i][4]:  # a second field: protobuf's oneof or duplicate error
        raise _Slow
    return tagged, i + 1


def _plain_list(items: list[_Item], i: int) -> tuple[TaggedValue, int]:
    values: dict[str, list[Any]] = {}
    while True:
        name, quoted, bare, opened, closed, _ = items[i]
        i += 1
        if closed:
            break
        if opened:
            if name != "shape":
                raise _Slow
            value, i = _shape(items, i)
        else:
            value = _plain_scalar(_SCALAR_BASE[name], quoted, bare)
        if name in values:
            values[name].append(value)
        else:
            values[name] = [value]
    for field, base in _LIST_FIELDS:
        if field in values:
            return TaggedValue(f"list({base})", tuple(values[field])), i
    return TaggedValue("list(int)", ()), i


def _shape(items: list[_Item], i: int) -> tuple[TensorShape, int]:
    sizes: list[int] = []
    names: list[str] = []
    unknown_rank: bool | None = None
    while True:
        name, _, bare, opened, closed, _ = items[i]
        i += 1
        if closed:
            break
        if opened and name == "dim":
            size, dim_name, i = _dim(items, i)
            sizes.append(size)
            names.append(dim_name)
        elif bare and name == "unknown_rank" and unknown_rank is None:
            unknown_rank = _bool(bare)
        else:
            raise _Slow
    if unknown_rank:
        return TensorShape(None), i
    return TensorShape(tuple(sizes), tuple(names) if any(names) else ()), i


def _dim(items: list[_Item], i: int) -> tuple[int, str, int]:
    size: int | None = None
    dim_name: str | None = None
    while True:
        name, quoted, bare, _, closed, _ = items[i]
        i += 1
        if closed:
            return size or 0, dim_name or "", i
        if name == "size" and size is None:
            size = _int(bare)
        elif name == "name" and quoted and dim_name is None:
            dim_name = _unquote(quoted)
        else:
            raise _Slow


def _plain_scalar(base: str, quoted: str, bare: str) -> Any:
    if base == "string":
        if not quoted:
            raise _Slow
        if "\\" in quoted:  # a bytes field, decoded as the attr converters decode it
            return CUnescape(quoted[1:-1]).decode("utf-8", "surrogateescape")
        return quoted[1:-1]
    if base == "type":
        return _DTYPES[bare]
    if base == "int":
        return _int(bare)
    if base == "bool":
        return _bool(bare)
    if not bare or not _FLOAT.fullmatch(bare):  # float
        raise _Slow
    value = float(bare)
    if abs(value) > _FLOAT32_MAX:  # protobuf's parser decides how it overflows
        raise _Slow
    return normalize_float(value)


def _is_repeated(field: FieldDescriptor) -> bool:
    flag = getattr(field, "is_repeated", None)  # protobuf 6+; older releases only ``label``
    if flag is not None:
        return bool(flag)
    return bool(getattr(field, "label", None) == FieldDescriptor.LABEL_REPEATED)


def _scalar(field: FieldDescriptor, quoted: str, bare: str) -> Any:
    """A scalar field's value, as protobuf's parser reads it."""
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        if not quoted:
            raise _Slow
        raw = CUnescape(quoted[1:-1])
        return raw if field.type == FieldDescriptor.TYPE_BYTES else raw.decode("utf-8")
    if not bare or not _PB_TOKEN.fullmatch(bare):
        raise _Slow
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        return text_format.ParseEnum(field, bare)
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        return text_format.ParseBool(bare)
    if cpp in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
        return text_format.ParseFloat(bare)
    signed = cpp in (FieldDescriptor.CPPTYPE_INT32, FieldDescriptor.CPPTYPE_INT64)
    long = cpp in (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)
    return text_format.ParseInteger(bare, is_signed=signed, is_long=long)


def read_oplist(text: str) -> list[OpDef] | None:
    """The ops of OpList ``text`` (``op { ... }`` repeated), or None when the text is not
    in the plain spelling this reader knows (then protobuf's parser must read it)."""
    try:
        return _oplist(_ITEM.findall(text))
    except (_Slow, LookupError, ValueError, TypeError, OverflowError, RecursionError):
        return None
