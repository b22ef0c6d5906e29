"""The text parser TensorFlow uses for attr defaults in REGISTER_OP specs.

TensorFlow does not read ``Attr("x: int = 3")`` defaults with protobuf's own text-format
parser but with a smaller generated one, which differs at the edges: it rejects ``t`` for
true, hex integers and ``1.0f``; it requires ``:`` before scalars; it skips identifiers it
does not know (``i: 3 4`` reads as 3). Specs must mean the same here as there, so defaults
are read with this re-implementation of that parser over our protobuf descriptors.
"""

from __future__ import annotations

import re
from typing import Any, cast

from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor

__all__ = ["parse_proto_text", "unescape_c"]

_SPACE = " \t\n\v\f\r"
_IDENT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
_NUMERIC = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.+-")
_LETTER_DIGIT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ENUM = _IDENT | {"-"}
_SIGNED = re.compile(r"[+-]?[0-9]+")
_UNSIGNED = re.compile(r"\+?[0-9]+")
_HEX = "0123456789abcdefABCDEF"
_SIMPLE_ESCAPES = {
    "n": 10,
    "t": 9,
    "r": 13,
    "a": 7,
    "b": 8,
    "f": 12,
    "v": 11,
    "\\": 92,
    "'": 39,
    '"': 34,
    "?": 63,
}
_INT_RANGES = {
    FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}


class _Fail(Exception):
    pass


def _is_repeated(field: FieldDescriptor) -> bool:
    # protobuf 6+ has ``is_repeated``; older releases only ``label``.
    flag = getattr(field, "is_repeated", None)
    if flag is not None:
        return bool(flag)
    return bool(cast(Any, field).label == FieldDescriptor.LABEL_REPEATED)


def unescape_c(escaped: str) -> bytes | None:
    """C escapes (``\\n``, ``\\x41``, ``\\101``, ``\\u00e9``) to bytes; None when malformed."""
    out = bytearray()
    i, n = 0, len(escaped)
    while i < n:
        ch = escaped[i]
        if ch != "\\":
            out.extend(ch.encode("utf-8", "surrogateescape"))
            i += 1
            continue
        i += 1
        if i >= n:
            return None
        ch = escaped[i]
        if ch in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[ch])
            i += 1
        elif "0" <= ch <= "7":
            j = i
            while j < n and j < i + 3 and "0" <= escaped[j] <= "7":
                j += 1
            value = int(escaped[i:j], 8)
            if value > 0xFF:
                return None
            out.append(value)
            i = j
        elif ch in "xX":
            j = i + 1
            while j < n and escaped[j] in _HEX:
                j += 1
            if j == i + 1 or int(escaped[i + 1 : j], 16) > 0xFF:
                return None
            out.append(int(escaped[i + 1 : j], 16))
            i = j
        elif ch in "uU":
            width = 4 if ch == "u" else 8
            digits = escaped[i + 1 : i + 1 + width]
            if len(digits) != width or any(d not in _HEX for d in digits):
                return None
            cp = int(digits, 16)
            if cp > 0x10FFFF or 0xD800 <= cp <= 0xDFFF:
                return None
            out.extend(chr(cp).encode("utf-8"))
            i += 1 + width
        else:
            return None
    return bytes(out)


class _Scanner:
    __slots__ = ("pos", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip_space_and_comments(self) -> None:
        text, n = self.text, len(self.text)
        while True:
            while self.pos < n and text[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < n and text[self.pos] == "#":
                while self.pos < n and text[self.pos] != "\n":
                    self.pos += 1
            else:
                return

    def many(self, chars: frozenset[str]) -> str:
        start = self.pos
        text, n = self.text, len(self.text)
        while self.pos < n and text[self.pos] in chars:
            self.pos += 1
        if self.pos == start:
            raise _Fail
        return text[start : self.pos]

    def field_name(self) -> tuple[str, bool]:
        """A field name and whether a ``:`` followed it (scalars need one, messages not)."""
        ident = self.many(_IDENT)
        self.skip_space_and_comments()
        colon = self.peek() == ":"
        if colon:
            self.pos += 1
            self.skip_space_and_comments()
        return ident, colon

    def string_literal(self) -> bytes:
        quote = self.peek()
        if quote not in ("'", '"'):
            raise _Fail
        i = self.pos + 1
        text, n = self.text, len(self.text)
        while i < n and text[i] != quote:
            i += 2 if text[i] == "\\" else 1
        if i >= n:
            raise _Fail
        body = text[self.pos + 1 : i]
        self.pos = i + 1
        self.skip_space_and_comments()
        value = unescape_c(body)
        if value is None:
            raise _Fail
        return value


def _numeric(sc: _Scanner, field: FieldDescriptor) -> Any:
    token = sc.many(_NUMERIC)
    zeros = 0
    for ch in token:  # no numbers with several leading zeroes, as protobuf
        if ch == "0":
            zeros += 1
            if zeros > 1:
                raise _Fail
        elif ch != "-":
            break
    sc.skip_space_and_comments()
    cpp = field.cpp_type
    if cpp in (FieldDescriptor.CPPTYPE_FLOAT, FieldDescriptor.CPPTYPE_DOUBLE):
        try:
            value = float(token)
        except ValueError:
            raise _Fail from None
        return value
    pattern = (
        _UNSIGNED
        if cpp in (FieldDescriptor.CPPTYPE_UINT32, FieldDescriptor.CPPTYPE_UINT64)
        else _SIGNED
    )
    if not pattern.fullmatch(token):
        raise _Fail
    value_i = int(token)
    lo, hi = _INT_RANGES[cpp]
    if not lo <= value_i <= hi:
        raise _Fail
    return value_i


def _scalar(sc: _Scanner, field: FieldDescriptor, colon: bool) -> Any:
    if not colon:
        raise _Fail
    cpp = field.cpp_type
    if cpp == FieldDescriptor.CPPTYPE_STRING:
        raw = sc.string_literal()
        if field.type == FieldDescriptor.TYPE_BYTES:
            return raw
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Fail from None
    if cpp == FieldDescriptor.CPPTYPE_ENUM:
        token = sc.many(_ENUM)
        assert field.enum_type is not None
        named = field.enum_type.values_by_name.get(token)
        if named is not None:
            return named.number
        if not _SIGNED.fullmatch(token) or not -(2**31) <= int(token) < 2**31:
            raise _Fail
        return int(token)
    if cpp == FieldDescriptor.CPPTYPE_BOOL:
        token = sc.many(_LETTER_DIGIT)
        sc.skip_space_and_comments()
        if token in ("true", "True", "1"):
            return True
        if token in ("false", "False", "0"):
            return False
        raise _Fail
    return _numeric(sc, field)


def _submessage(sc: _Scanner, target: Any) -> None:
    opener = sc.peek()
    if opener not in ("{", "<"):
        raise _Fail
    sc.pos += 1
    sc.skip_space_and_comments()
    _fields(sc, target, target.DESCRIPTOR, nested=True, close="}" if opener == "{" else ">")


def _map_entry(sc: _Scanner, container: Any, entry: Descriptor) -> None:
    """One ``{ key: ... value { ... } }`` block of a map field."""
    opener = sc.peek()
    if opener not in ("{", "<"):
        raise _Fail
    sc.pos += 1
    close = "}" if opener == "{" else ">"
    key: Any = None
    value = None
    value_field = entry.fields_by_name["value"]
    while True:
        sc.skip_space_and_comments()
        if sc.peek() == close:
            sc.pos += 1
            sc.skip_space_and_comments()
            if key is None or value is None:
                raise _Fail
            container[key].CopyFrom(value)
            return
        ident, colon = sc.field_name()
        if ident == "key":
            key = _scalar(sc, entry.fields_by_name["key"], colon)
        elif ident == "value":
            assert value_field.message_type is not None
            value = message_factory.GetMessageClass(value_field.message_type)()
            _submessage(sc, value)


def _fields(sc: _Scanner, msg: Any, desc: Descriptor, nested: bool, close: str) -> None:
    seen: set[str] = set()
    while True:
        sc.skip_space_and_comments()
        if nested and sc.peek() == close:
            sc.pos += 1
            sc.skip_space_and_comments()
            return
        if not nested and sc.at_end():
            return
        ident, colon = sc.field_name()
        field = desc.fields_by_name.get(ident)
        if field is None:
            continue  # TensorFlow's parser skips names it does not know
        if _is_repeated(field):
            is_list = sc.peek() == "["
            is_map = field.message_type is not None and field.message_type.GetOptions().map_entry
            while True:
                if is_list:
                    sc.pos += 1
                    sc.skip_space_and_comments()
                container = getattr(msg, ident)
                if is_map:
                    assert field.message_type is not None
                    _map_entry(sc, container, field.message_type)
                elif field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
                    _submessage(sc, container.add())
                else:
                    container.append(_scalar(sc, field, colon))
                if not (is_list and sc.peek() == ","):
                    break
            if is_list:
                if sc.peek() != "]":
                    raise _Fail
                sc.pos += 1
            continue
        if field.containing_oneof is not None and msg.WhichOneof(field.containing_oneof.name):
            raise _Fail
        if ident in seen:
            raise _Fail
        seen.add(ident)
        if field.cpp_type == FieldDescriptor.CPPTYPE_MESSAGE:
            sub = getattr(msg, ident)
            sub.SetInParent()
            _submessage(sc, sub)
        else:
            setattr(msg, ident, _scalar(sc, field, colon))


def parse_proto_text(text: str, msg: Any) -> bool:
    """Parse ``text`` into ``msg`` as TensorFlow's generated parser does; False on failure."""
    msg.Clear()
    try:
        _fields(_Scanner(text), msg, msg.DESCRIPTOR, nested=False, close="")
    except (_Fail, ValueError, TypeError, RecursionError):
        return False
    return True
