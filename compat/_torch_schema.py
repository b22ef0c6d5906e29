"""PyTorch operator schemas as text: ``aten::add.Tensor(Tensor self, Tensor other, *,
Scalar alpha=1) -> Tensor``, read without torch.

The model is what PyTorch's FunctionSchemaParser builds (torch/csrc/jit/frontend/
function_schema_parser.cpp, schema_type_parser.cpp): each argument's *fake* type (the one
its compatibility checks compare: ``ScalarType``, ``Layout``, ``MemoryFormat`` and ``SymInt``
are ``int``, ``Dimname`` is ``str``), its fixed list size, its default as the typed value the
parser makes of it (``float x=1`` is the float 1.0, ``Scalar x=1`` the int 1), keyword-only
and alias annotations. Subtyping is ``Type::isSubtypeOfExt`` (aten/src/ATen/core/type.cpp)
for the types a schema can spell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from opmarket.compat._torch_types import (
    BASE_TYPES,
    Device,
    SchemaType,
    make_type,
    make_union,
)
from opmarket.registry._bounded import BoundedCache

__all__ = [
    "AliasInfo",
    "Argument",
    "Schema",
    "parse_schema",
]


@dataclass(frozen=True, slots=True)
class AliasInfo:
    """An alias annotation: ``(a)``, ``(a!)``, ``(a -> *)``, and those of list elements."""

    before: frozenset[str]
    after: frozenset[str]
    is_write: bool
    contained: tuple[AliasInfo, ...] = ()


@dataclass(frozen=True, slots=True)
class Argument:
    """One argument or return of a schema."""

    name: str
    type: SchemaType  # the fake type, which the checks compare
    text: str  # as written, for messages
    n: int | None = None  # ``int[2]``: 2
    has_default: bool = False
    default: object = None  # a typed value: see _value
    kwarg_only: bool = False
    alias: AliasInfo | None = None

    @property
    def is_out(self) -> bool:
        """A keyword-only argument written to (``*, Tensor(a!) out``)."""
        return self.kwarg_only and self.alias is not None and self.alias.is_write


@dataclass(frozen=True, slots=True)
class Schema:
    """One operator overload: ``aten::qr.Q(...) -> (...)``."""

    name: str  # "aten::qr"
    overload: str  # "Q", "" for the default overload
    arguments: tuple[Argument, ...]
    returns: tuple[Argument, ...]
    is_vararg: bool = False
    is_varret: bool = False
    text: str = field(default="", compare=False)

    @property
    def full_name(self) -> str:
        """``aten::qr.Q``, or ``aten::qr`` for the default overload."""
        return f"{self.name}.{self.overload}" if self.overload else self.name


# ---------------------------------------------------------------- lexer and parser

# One token a match: strings (quotes kept, so a string never equals punctuation or a name),
# numbers, names, punctuation; anything else is one character the parser refuses.
_TOKEN = re.compile(
    r"""\"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*'
    | (?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?j?
    | [A-Za-z_][A-Za-z0-9_]*
    | ->|\.\.\.|::|\S""",
    re.VERBOSE,
)
_PUNCT = frozenset("()[],*?!|=.:-") | {"->", "...", "::"}
_KIND = {c: "id" for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"}
_KIND.update({c: "num" for c in "0123456789"})
_KIND.update({'"': "str", "'": "str"})
_FIRST = {**_KIND, **{c: "p" for c in "()[],*?!|=:-"}}  # "." may start a number: see _kind
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}
_IDENT_CONSTANTS = {"float": 6, "complex": 9, "long": 4, "strided": 0, "Mean": 1}
_IDENT_CONSTANTS["contiguous_format"] = 0


def _kind(token: str) -> str:
    kind = _KIND.get(token[0])
    if kind is not None:
        return kind
    if token in _PUNCT:
        return "p"
    return "num" if token[0] == "." else "bad"  # ".5"


def _joined(tokens: list[str]) -> str:
    """Tokens as a schema prints them: ``Tensor(a!) self``, ``int[2] stride=1``."""
    if len(tokens) == 2:  # the common ``Tensor self``
        return f"{tokens[0]} {tokens[1]}"
    out: list[str] = []
    prev = ""
    for tok in tokens:
        if prev and (
            (tok[0] in _KIND and (prev[-1] in _KIND or prev in (")", "]", "?", "!")))
            or prev in (",", "->")
            or tok == "->"
        ):
            out.append(" ")
        out.append(tok)
        prev = tok
    return "".join(out)


_OPEN = frozenset("([")
_CLOSE = frozenset(")]")
# Arguments by their tokens (see _Parser.cached_argument).
_ARGUMENTS: BoundedCache[tuple[object, ...], Argument] = BoundedCache(100_000)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        vals: list[str] = _TOKEN.findall(text)
        kinds = [_FIRST.get(v[0]) or _kind(v) for v in vals]
        self.vals, self.kinds = vals, kinds
        if "bad" in kinds:
            self.i = kinds.index("bad")
            self.fail(f"unexpected character {vals[self.i]!r}", found=False)
        vals.append("")
        kinds.append("eof")
        self.i = 0
        self.next_id = 0

    # -- token helpers
    def at(self, text: str) -> bool:
        return self.vals[self.i] == text

    def eat(self, text: str) -> bool:
        if self.vals[self.i] == text:
            self.i += 1
            return True
        return False

    def expect(self, text: str) -> None:
        if self.vals[self.i] != text:
            self.fail(f"expected {text!r}")
        self.i += 1

    def ident(self) -> str:
        if self.kinds[self.i] != "id":
            self.fail("expected a name")
        self.i += 1
        return self.vals[self.i - 1]

    def fail(self, what: str, *, found: bool = True) -> None:
        starts = [m.start() for m in _TOKEN.finditer(self.text)] + [len(self.text)]
        where = f"{what} at column {starts[self.i] + 1}"
        t = self.vals[self.i]
        raise ValueError(where + (f", found {t!r}" if t else ", found the end") * found)

    # -- schema
    def schema(self) -> Schema:
        name = self.ident()
        if self.eat("::"):
            name += "::" + self.ident()
        overload = self.ident() if self.eat(".") else ""
        args, vararg = self.arguments()
        self.expect("->")
        returns, varret = self.returns()
        if self.kinds[self.i] != "eof":
            self.fail("expected the end of the schema")
        return Schema(name, overload, args, returns, vararg, varret, self.text.strip())

    def arguments(self) -> tuple[tuple[Argument, ...], bool]:
        self.expect("(")
        args: list[Argument] = []
        kwarg_only = vararg = False
        if not self.eat(")"):
            while True:
                if self.eat("*"):
                    kwarg_only = True
                elif self.eat("..."):
                    vararg = True
                else:
                    args.append(self.cached_argument(kwarg_only))
                if self.eat(")"):
                    break
                self.expect(",")
        return tuple(args), vararg

    def cached_argument(self, kwarg_only: bool) -> Argument:
        # A registry repeats its arguments ("Tensor self", "int dim", "bool keepdim=False")
        # thousands of times: each distinct one is parsed once.
        vals = self.vals
        depth = 0
        j = self.i
        while True:
            v = vals[j]
            if v in _OPEN:
                depth += 1
            elif v in _CLOSE:
                if not depth:
                    break
                depth -= 1
            elif (v == "," and not depth) or not v:
                break
            j += 1
        key = (*vals[self.i : j], kwarg_only)
        arg = _ARGUMENTS.data.get(key)
        if arg is not None:
            self.i = j
            return arg
        counter = self.next_id
        arg = self.argument(kwarg_only=kwarg_only, is_return=False)
        if self.i == j and self.next_id == counter:  # no "Tensor!": it numbers its alias set
            _ARGUMENTS.put(key, arg)
        return arg

    def returns(self) -> tuple[tuple[Argument, ...], bool]:
        if self.eat("..."):
            return (), True
        if self.eat("("):  # always the list of returns, as PyTorch reads it
            rets: list[Argument] = []
            varret = False
            if not self.eat(")"):
                while True:
                    if self.eat("..."):
                        varret = True
                    else:
                        rets.append(self.argument(kwarg_only=False, is_return=True))
                    if self.eat(")"):
                        break
                    self.expect(",")
            return tuple(rets), varret
        return (self.argument(kwarg_only=False, is_return=True),), False

    def argument(self, *, kwarg_only: bool, is_return: bool) -> Argument:
        start = self.i
        typ, alias = self.type_with_alias()
        n: int | None = None
        if self.vals[self.i] == "[" and self.kinds[self.i + 1] == "num":
            n = int(self.vals[self.i + 1])
            self.i += 2
            self.expect("]")
            typ = make_type("List", (typ,))
            alias = self._container(alias, self.alias_annotation())
            if self.eat("?"):
                typ = make_type("Optional", (typ,))
        name = ""
        has_default = False
        default: object = None
        if is_return:
            if self.kinds[self.i] == "id":
                name = self.ident()
        else:
            name = self.ident()
            if self.eat("="):
                has_default = True
                default = self.default(typ, n)
        text = _joined(self.vals[start : self.i])
        return Argument(name, typ, text, n, has_default, default, kwarg_only, alias)

    # -- types
    def _container(self, inner: AliasInfo | None, outer: AliasInfo | None) -> AliasInfo | None:
        if inner is None:
            return outer
        if outer is None:
            return AliasInfo(frozenset(), frozenset(), inner.is_write, (inner,))
        return AliasInfo(outer.before, outer.after, outer.is_write, (*outer.contained, inner))

    def type_with_alias(self) -> tuple[SchemaType, AliasInfo | None]:
        alias: AliasInfo | None = None
        kind, t = self.kinds[self.i], self.vals[self.i]
        if self.at("("):
            self.i += 1
            elems: list[SchemaType] = []
            if not self.eat(")"):
                while True:
                    elems.append(self.type_with_alias()[0])
                    if self.eat(")"):
                        break
                    self.expect(",")
            typ = make_type("Tuple", tuple(elems))
        elif kind == "id" and t in ("Future", "Await", "RRef"):
            self.i += 1
            self.expect("(")
            inner = self.type_with_alias()[0]
            self.expect(")")
            typ = make_type(t, (inner,))
        elif kind == "id" and t == "Tensor":
            self.i += 1
            typ = make_type("Tensor")
            alias = self.alias_annotation()
        elif kind == "id" and t == "Dict":
            self.i += 1
            self.expect("(")
            key = self.type_with_alias()[0]
            self.expect(",")
            value = self.type_with_alias()[0]
            self.expect(")")
            alias = self.alias_annotation()
            typ = make_type("Dict", (key, value))
        elif kind == "id" and t == "Union":
            self.i += 1
            self.expect("(")
            members = [self.type_with_alias()[0]]
            while not self.eat(")"):
                self.expect(",")
                members.append(self.type_with_alias()[0])
            alias = self.alias_annotation()
            typ = make_union(members)
        elif kind == "id" and t == "__torch__":
            parts = [self.ident()]
            while self.eat("."):
                parts.append(self.ident())
            if parts[1:3] != ["torch", "classes"] or len(parts) != 5:
                self.fail("expected a custom class __torch__.torch.classes.NAMESPACE.CLASS")
            typ = make_type("Class", name=".".join(parts))
        else:
            name = self.ident()
            base = BASE_TYPES.get(name)
            if base is not None:
                typ = make_type(base)
            elif name[:1].islower():
                # PyTorch reads other lower-case names as type variables, all equal
                typ = make_type("Var")
            else:
                self.i -= 1
                self.fail(f"unknown type {name!r}")
            alias = self.alias_annotation()
        while True:
            if self.vals[self.i] == "[" and self.vals[self.i + 1] == "]":
                self.i += 2
                typ = make_type("List", (typ,))
                alias = self._container(alias, self.alias_annotation())
            elif self.eat("?"):
                if typ.kind != "Optional":  # T?? is T?
                    typ = make_type("Optional", (typ,))
            else:
                return typ, alias

    def alias_annotation(self) -> AliasInfo | None:
        if self.eat("!"):
            name = f"${self.next_id}"
            self.next_id += 1
            return AliasInfo(frozenset({name}), frozenset(), True)
        if not self.eat("("):
            return None
        before = self._alias_sets()
        write = self.eat("!")
        after = self._alias_sets() if self.eat("->") else before
        self.expect(")")
        return AliasInfo(frozenset(before), frozenset(after), write)

    def _alias_sets(self) -> list[str]:
        sets: list[str] = []
        while True:
            if self.eat("*"):
                sets = ["*"]
            elif sets != ["*"]:
                sets.append(self.ident())
            if not self.eat("|"):
                return sets

    # -- defaults
    def default(self, typ: SchemaType, n: int | None) -> object:
        kind = typ.kind
        if kind in ("Tensor", "Generator"):
            return self._none_only()
        if kind in ("str", "Optional", "Scalar", "int", "bool", "float", "complex"):
            return self.constant(kind)
        if kind == "Device":
            if self.kinds[self.i] != "str":
                self.fail("expected a device string")
            self.i += 1
            return Device(_unquote(self.vals[self.i - 1]))
        if kind == "List":
            elem = typ.args[0].kind
            if self.kinds[self.i] == "id" and self.vals[self.i] not in ("True", "False"):
                return self._none_only()
            if n is not None and not self.at("["):
                value = self.constant(elem)
                return _as_list(elem, [value] * n)
            self.expect("[")
            items: list[object] = []
            if not self.eat("]"):
                while True:
                    items.append(self.constant(elem))
                    if self.eat("]"):
                        break
                    self.expect(",")
            return _as_list(elem, items)
        self.fail(f"a {typ} argument cannot have a default")
        return None  # unreachable

    def _none_only(self) -> object:
        if not self.eat("None"):
            self.fail("expected None")
        return None

    def constant(self, kind: str) -> object:
        tok_kind, t = self.kinds[self.i], self.vals[self.i]
        if tok_kind == "id":
            self.i += 1
            if t in ("True", "False"):
                return t == "True"
            if t == "None":
                return None
            if t in _IDENT_CONSTANTS:
                return _IDENT_CONSTANTS[t]
            self.i -= 1
            self.fail(f"unknown constant {t!r}")
        if tok_kind == "str":
            self.i += 1
            return _unquote(t)
        negative = self.eat("-")
        tok_kind, t = self.kinds[self.i], self.vals[self.i]
        if tok_kind != "num":
            self.fail("expected a value")
        self.i += 1
        text = ("-" if negative else "") + t
        if kind == "complex" or "j" in text:
            return complex(0, float(text[:-1] if text.endswith("j") else text))
        if kind == "float" or "." in text or "e" in text or "E" in text:
            return float(text)
        return int(text)


def _as_list(elem: str, items: list[object]) -> tuple[object, ...]:
    del elem  # each item was already read as the element type's value
    return tuple(items)


def _unquote(text: str) -> str:
    body = text[1:-1]
    if "\\" not in body:
        return body
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            out.append(_ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def parse_schema(text: str) -> Schema:
    """One schema from its text; ValueError saying where the text is wrong."""
    return _Parser(text).schema()
