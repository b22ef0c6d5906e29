"""PyTorch schema lists: text files with one schema a line and ``#`` comments, as ``str()``
of each entry of ``torch._C._jit_get_all_schemas()`` prints them. A line is read as far as
its name at first; the rest is parsed when it is compared with a different line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from opmarket.compat._torch_schema import Schema, parse_schema
from opmarket.sdk import DocumentError

__all__ = ["SchemaLine", "looks_like_schema_list", "schema_lines"]

_HEAD = re.compile(r"([A-Za-z_]\w*(?:::[A-Za-z_]\w*)?)(?:\.([A-Za-z_]\w*))?\s*\(.*\)\s*->\s*\S")


@dataclass(frozen=True, slots=True)
class SchemaLine:
    """One line of a schema list, read as far as its name: the rest is parsed when the
    line is compared with a different one (identical lines are compatible as they are)."""

    full_name: str  # "aten::qr.Q"
    text: str
    where: str  # "file:line", for errors

    def parse(self) -> Schema:
        """The schema; DocumentError naming the file and line when it is not one."""
        try:
            return parse_schema(self.text)
        except ValueError as exc:
            raise DocumentError(self.where, f"not a PyTorch schema: {exc}") from None


def _lines(text: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            yield number, stripped


def schema_lines(text: str, source: str) -> list[SchemaLine]:
    """The lines of a schema list (one schema a line, ``#`` comments); DocumentError naming
    the file and line of the first line that does not read ``NAME(ARGS) -> RETURNS``."""
    out: list[SchemaLine] = []
    for number, line in _lines(text):
        m = _HEAD.match(line)
        if m is None:
            raise DocumentError(
                f"{source}:{number}",
                "not a PyTorch schema (expected 'namespace::name(args) -> returns'): "
                f"{line[:80]!r}",
            )
        name, overload = m.groups()
        out.append(
            SchemaLine(f"{name}.{overload}" if overload else name, line, f"{source}:{number}")
        )
    return out


def looks_like_schema_list(text: str) -> bool:
    """True when the first line that is not blank or a comment reads like a schema."""
    for _, line in _lines(text):
        return re.match(r"[A-Za-z_]\w*::\w+(?:\.\w+)?\s*\(", line) is not None
    return False
