"""Mutated pairs of real PyTorch schemas, and PyTorch's own verdicts on them.

Every schema is mutated by each rule's edge (arguments appended with and without defaults,
keyword-only, positional made keyword-only, renamed, reordered, types widened and narrowed,
defaults added, removed and changed, returns changed, alias annotations dropped or changed,
``out`` arguments removed, added or no longer written); each mutation gives two pairs,
(schema, mutant) and (mutant, schema). Used by tests/compat/test_torch_fidelity.py (a
seeded sample) and bench/torch_schemas.py (every pair).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from opmarket.compat._torch_check import compare_schemas
from opmarket.compat._torch_list import SchemaLine
from opmarket.compat._torch_schema import Argument, parse_schema

_ARG = re.compile(r"^(?P<type>.*\S)\s+(?P<name>[A-Za-z_]\w*)(?:=(?P<default>.*))?$")

# type text -> what a mutation puts in its place (widening, narrowing, neither)
_TYPES: dict[str, list[str]] = {
    "int": ["Scalar", "int?", "float", "SymInt", "bool"],
    "SymInt": ["int", "Scalar", "SymInt?"],
    "float": ["Scalar", "float?", "int"],
    "Scalar": ["int", "float", "Scalar?", "complex"],
    "bool": ["int", "bool?"],
    "Tensor": ["Tensor?", "Tensor[]"],
    "Tensor?": ["Tensor"],
    "int[]": ["int[]?", "SymInt[]", "int[2]"],
    "SymInt[]": ["int[]", "SymInt[]?", "SymInt[1]"],
    "int[1]": ["int[]", "int[2]", "int[1]?"],
    "int[2]": ["int[]", "int[3]"],
    "SymInt[2]": ["SymInt[]", "int[2]"],
    "str": ["str?", "Dimname"],
    "str?": ["str"],
    "ScalarType": ["int", "ScalarType?"],
    "ScalarType?": ["ScalarType", "int?", "Layout?"],
    "Tensor[]": ["Tensor?[]", "Tensor"],
    "Tensor?[]": ["Tensor[]"],
    "int?": ["int", "Scalar?", "SymInt?"],
    "float?": ["float", "Scalar?"],
    "Scalar?": ["Scalar", "int?"],
    "Layout?": ["int?"],
    "Device?": ["Device", "str?"],
    "Generator?": ["Generator"],
    "t": ["Any", "t?", "t1"],
    "Any": ["t"],
    "Dimname": ["str"],
    "int[]?": ["int[]", "int[1]?"],
    "int[1]?": ["int[]?", "int[1]"],
    "float[]": ["float[]?"],
    "float[]?": ["float[]"],
    "bool[]": ["bool[3]"],
    "bool[3]": ["bool[]"],
    "t[]": ["Any[]", "t?[]"],
    "(Tensor, Tensor)": ["(Tensor, Tensor?)", "Any"],
}

_DEFAULT_FOR = {
    "int": "0",
    "SymInt": "0",
    "float": "0.0",
    "bool": "False",
    "str": '"x"',
    "Scalar": "1",
    "int[]": "[0]",
    "ScalarType": "6",
}


def _split(arg: Argument) -> tuple[str, str, str | None] | None:
    m = _ARG.match(arg.text)
    if m is None:
        return None
    return m.group("type"), m.group("name"), m.group("default")


def _join(typ: str, name: str, default: str | None) -> str:
    return f"{typ} {name}" + (f"={default}" if default is not None else "")


def _changed_default(typ: str, default: str) -> list[str]:
    out = []
    if default in ("True", "False"):
        out.append("False" if default == "True" else "True")
    elif default == "None":
        out.append("0" if "int" in typ else '"x"' if "str" in typ else "")
    elif re.fullmatch(r"-?\d+", default):
        out += [str(int(default) + 1), default + ".0"]
    elif re.fullmatch(r"-?[\d.]+(e-?\d+)?", default):
        value = float(default)
        out += [repr(value + 0.5)]
        if value.is_integer():
            out.append(str(int(value)))  # 1.0 -> 1: the same value for a float
    elif default.startswith("["):
        out += ["[]", "[0, 0]"]
    elif default.startswith('"'):
        out.append('"opm"')
    return [d for d in out if d]


class _Schema:
    def __init__(self, text: str) -> None:
        s = parse_schema(text)
        self.name = s.full_name
        self.args = [(a.text, a.kwarg_only) for a in s.arguments]
        self.parsed = s.arguments
        self.vararg = s.is_vararg
        self.rets = [r.text for r in s.returns]
        self.varret = s.is_varret

    def text(
        self,
        args: list[tuple[str, bool]] | None = None,
        rets: list[str] | None = None,
    ) -> str:
        args = self.args if args is None else args
        rets = self.rets if rets is None else rets
        parts: list[str] = []
        star = False
        for text, kw in args:
            if kw and not star:
                parts.append("*")
                star = True
            parts.append(text)
        if self.vararg:
            parts.append("...")
        ret_parts = [*rets, *(["..."] if self.varret else [])]
        if len(ret_parts) == 1 and not self.varret and not ret_parts[0].startswith("("):
            ret = ret_parts[0]
        else:
            ret = f"({', '.join(ret_parts)})"
        return f"{self.name}({', '.join(parts)}) -> {ret}"


def mutants(text: str) -> Iterator[tuple[str, str]]:
    """(kind, mutated schema text) for every edge that applies to the schema."""
    s = _Schema(text)
    args = s.args
    first_out = next((i for i, a in enumerate(s.parsed) if a.is_out), len(args))
    kw_before = any(kw for _, kw in args[:first_out])

    def insert(at: int, item: tuple[str, bool]) -> str:
        return s.text([*args[:at], item, *args[at:]])

    yield "append-default", insert(first_out, ("int opm_new=0", kw_before))
    yield "append-no-default", insert(first_out, ("int opm_new", kw_before))
    yield "append-list-default", insert(first_out, ("int[] opm_new=[0]", kw_before))
    yield "append-optional-list", insert(first_out, ("int[]? opm_new=None", kw_before))
    yield "append-kwarg-last", s.text([*args, ("int opm_new=0", True)])
    yield "prepend-default", insert(0, ("int opm_new=0", False))
    positional = [i for i, (_, kw) in enumerate(args) if not kw]
    if positional:
        i = positional[-1]
        yield "make-kwarg-only", s.text([*args[:i], (args[i][0], True), *args[i + 1 :]])
    kwargs = [i for i, (_, kw) in enumerate(args) if kw and i < first_out]
    if kwargs:
        i = kwargs[0]
        yield "make-positional", s.text([*args[:i], (args[i][0], False), *args[i + 1 :]])
    if len(positional) >= 2:
        i, j = positional[0], positional[1]
        swapped = list(args)
        swapped[i], swapped[j] = args[j], args[i]
        yield "reorder", s.text(swapped)
    if args:
        yield "remove-last", s.text(args[:-1])
    for i, (_, kw) in enumerate(args):
        parts = _split(s.parsed[i])
        if parts is None:
            continue
        typ, name, default = parts

        def put(new: str, i: int = i, kw: bool = kw) -> str:
            return s.text([*args[:i], (new, kw), *args[i + 1 :]])

        if i in (0, len(args) - 1):
            yield "rename", put(_join(typ, name + "_x", default))
        for other in _TYPES.get(re.sub(r"\(.*?\)", "", typ), []):
            yield f"type {typ} -> {other}", put(_join(other, name, default))
        if default is None:
            base = typ.rstrip("?")
            value = "None" if typ.endswith("?") else _DEFAULT_FOR.get(base)
            if value is not None:
                yield "default-add", put(_join(typ, name, value))
        else:
            yield "default-remove", put(_join(typ, name, None))
            for other in _changed_default(typ, default):
                yield "default-change", put(_join(typ, name, other))
        if "(" in typ and typ.startswith("Tensor"):
            bare = re.sub(r"\(.*?\)", "", typ, count=1)
            yield "alias-drop", put(_join(bare, name, default))
            if "!" in typ:
                yield "alias-unwrite", put(_join(typ.replace("!", ""), name, default))
            else:
                yield "alias-write", put(_join(typ.replace(")", "!)", 1), name, default))
            yield "alias-rename", put(_join(re.sub(r"\((\w)", "(z", typ, count=1), name, default))
    if first_out < len(args):
        yield "out-remove", s.text(args[:first_out])
    yield "out-add", s.text([*args, ("Tensor(z!) opm_out", True)])
    rets = s.rets
    if rets:
        last = rets[-1]
        yield "return-optional", s.text(rets=[*rets[:-1], last + "?"])
        yield "return-rename", s.text(rets=[*rets[:-1], last + " opm_ret"])
        bare = re.sub(r"\(.*?\)", "", last, count=1) if last.startswith("Tensor(") else None
        if bare is not None and bare != last:
            yield "return-alias-drop", s.text(rets=[*rets[:-1], bare])
        if last.endswith("?"):
            yield "return-narrow", s.text(rets=[*rets[:-1], last[:-1]])
        if len(rets) > 1:
            yield "return-drop", s.text(rets=rets[:-1])
    yield "return-add", s.text(rets=[*rets, "Tensor"])


def pairs(texts: list[str]) -> Iterator[tuple[str, str, str]]:
    """(kind, old, new): every schema against each of its mutants, both ways."""
    for text in texts:
        for kind, mutant in mutants(text):
            if mutant != text:
                yield kind, text, mutant
                yield kind + " (reverse)", mutant, text


def torch_verdicts(torch: Any, old: str, new: str) -> tuple[bool, bool] | None:
    """PyTorch's (backward, forward) verdicts on the pair; None when torch cannot parse one.
    A backward check that raises (an out argument compared past the new schema's end) is
    a rejection."""
    try:
        o, n = torch._C.parse_schema(old), torch._C.parse_schema(new)
    except (RuntimeError, ValueError, IndexError):  # what torch raises for text it refuses
        return None
    try:
        backward = bool(n.is_backward_compatible_with(o))
    except IndexError:
        backward = False
    forward = bool(n.check_forward_compatible_with(o)[0])
    return backward, forward


def our_verdict(old: str, new: str, direction: str) -> bool:
    """True when compat-check finds nothing breaking for the pair in ``direction``."""
    found = compare_schemas(
        [SchemaLine("op", old, "old")], [SchemaLine("op", new, "new")], direction
    )
    return not any(f.severity == "breaking" for f in found)


def disagreements(
    torch: Any, cases: list[tuple[str, str, str]], progress: Callable[[int], None] | None = None
) -> tuple[dict[str, int], list[tuple[str, str, str, str, bool]]]:
    """Counts (pairs, parsed, skipped, bc/fc accepted and rejected) and every disagreement
    as (direction, kind, old, new, torch's verdict)."""
    counts = dict.fromkeys(
        ("pairs", "compared", "unparsable", "bc_ok", "bc_broken", "fc_ok", "fc_broken"), 0
    )
    wrong: list[tuple[str, str, str, str, bool]] = []
    for n, (kind, old, new) in enumerate(cases):
        counts["pairs"] += 1
        if progress is not None and n % 10000 == 0:
            progress(n)
        verdicts = torch_verdicts(torch, old, new)
        if verdicts is None:
            counts["unparsable"] += 1
            continue
        counts["compared"] += 1
        for direction, theirs in zip(("backward", "forward"), verdicts, strict=True):
            key = "bc" if direction == "backward" else "fc"
            counts[f"{key}_{'ok' if theirs else 'broken'}"] += 1
            if our_verdict(old, new, direction) != theirs:
                wrong.append((direction, kind, old, new, theirs))
    return counts, wrong
