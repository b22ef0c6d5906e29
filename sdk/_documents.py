"""Reading and writing op-set files in any supported format, detected from the content."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from opmarket.sdk._canonical import (
    FORMAT,
    HISTORY_FORMAT,
    Document,
    decode_document,
    decode_history,
    encode_opset,
)
from opmarket.sdk._errors import DocumentError, InvalidOpDefError, Problem
from opmarket.sdk._opdef import OpDef
from opmarket.sdk._opset import KernelDef, OpSet
from opmarket.sdk._specjson import (
    NotExpressibleError,
    decode_spec_document,
    looks_like_spec_document,
    op_to_spec,
)
from opmarket.sdk._validate import opdef_problems

__all__ = [
    "OutputFormat",
    "opset_from_json",
    "opset_to_json",
    "parse_document",
    "read_document",
    "read_opset",
    "render_document",
]

OutputFormat = Literal["json", "tf-pbtxt", "spec"]


def _problems_of(ops: Iterable[OpDef], source: str) -> list[Problem]:
    out: list[Problem] = []
    for op in ops:
        out.extend(
            Problem(
                message, op=op.name, field=f"{kind} {name!r}" if kind != "op" else "", source=source
            )
            for kind, name, message in opdef_problems(op)
        )
    return out


def parse_document(text: str, source: str = "<text>") -> Document:
    """Read canonical JSON, spec-form JSON, an opmarket history or TensorFlow text format
    from ``text`` (``Document.format`` says which: json, spec, history, tf-pbtxt).

    Raises DocumentError when the text is none of them; problems with the ops it holds are
    collected in ``Document.problems``.
    """
    try:
        return _parse_document(text, source)
    except RecursionError:
        raise DocumentError(source, "nested too deeply to read") from None


def _parse_document(text: str, source: str) -> Document:
    stripped = text.lstrip()
    if not stripped:
        raise DocumentError(
            source, "empty file: expected op-set JSON, spec-form JSON or TensorFlow text format"
        )
    if stripped.startswith(("{", "[")):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DocumentError(source, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
        if isinstance(obj, dict) and obj.get("format") == FORMAT:
            doc = decode_document(obj, source)
            doc.problems.extend(_problems_of(doc.ops, source))
            return doc
        if isinstance(obj, dict) and obj.get("format") == HISTORY_FORMAT:
            doc = decode_history(obj, source)
            for release in doc.releases:
                doc.problems.extend(_problems_of(release.ops, source))
            return doc
        if looks_like_spec_document(obj):
            assert isinstance(obj, dict)
            ops, problems = decode_spec_document(obj, source)
            return Document(source, OpSet(tuple(ops)), "spec", problems)
        raise DocumentError(
            source,
            'JSON, but neither an opmarket op-set ("format": "opmarket.opset") nor a '
            'spec-form document ({"ops": [{"name": ..., "inputs": ["x: T"], ...}]})',
        )
    from opmarket.sdk._textformat import opdefs_from_pbtxt  # protobuf: loaded for a pbtxt only

    ops = opdefs_from_pbtxt(text, source)
    return Document(source, OpSet(tuple(ops)), "tf-pbtxt", _problems_of(ops, source))


def read_document(path: str | Path) -> Document:
    """Read an op-set file of any supported format (see parse_document)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DocumentError(str(path), "no such file") from None
    except IsADirectoryError:
        raise DocumentError(str(path), "is a directory, not an op-set file") from None
    except UnicodeDecodeError:
        raise DocumentError(str(path), "not UTF-8 text") from None
    except OSError as exc:
        raise DocumentError(str(path), exc.strerror or str(exc)) from None
    return parse_document(text, str(path))


def read_opset(path: str | Path) -> OpSet:
    """One release's op-set from a file; raises InvalidOpDefError listing every problem."""
    return _as_opset(read_document(path))


def _as_opset(doc: Document) -> OpSet:
    if doc.format == "history":
        raise DocumentError(
            doc.source, "this is an op history (several releases); name one release's op-set"
        )
    problems = list(doc.problems)
    seen: set[str] = set()
    for op in doc.ops:
        if op.name in seen:
            problems.append(Problem("defined more than once", op=op.name, source=doc.source))
        seen.add(op.name)
    if problems:
        raise InvalidOpDefError(problems)
    return doc.opset


def opset_to_json(opset: OpSet) -> str:
    """The canonical JSON text of ``opset`` (deterministic: same op-set, same bytes)."""
    return encode_opset(opset.ops, opset.kernels, name=opset.name, version=opset.version)


def opset_from_json(text: str, source: str = "<json>") -> OpSet:
    """An op-set from canonical JSON text; raises DocumentError or InvalidOpDefError."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(source, f"invalid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise DocumentError(source, f'not an opmarket op-set (no "format": "{FORMAT}")')
    doc = decode_document(obj, source)
    doc.problems.extend(_problems_of(doc.ops, source))
    return _as_opset(doc)


def render_document(
    ops: Iterable[OpDef],
    fmt: OutputFormat,
    kernels: Iterable[KernelDef] = (),
    *,
    name: str = "",
    version: str = "",
    source: str = "<ops>",
    notes: list[str] | None = None,
) -> str:
    """``ops`` in format ``fmt``; raises InvalidOpDefError when an op cannot be written in it.

    What a format leaves out (full types in spec form) is appended to ``notes``.
    """
    ops = list(ops)
    if fmt == "json":
        return encode_opset(ops, kernels, name=name, version=version)
    if fmt == "tf-pbtxt":
        from opmarket.sdk._textformat import opdefs_to_pbtxt  # protobuf: loaded for a pbtxt only

        return opdefs_to_pbtxt(ops)
    specs, problems = [], []
    for op in ops:
        try:
            spec, dropped = op_to_spec(op)
            specs.append(spec)
            if notes is not None:
                notes.extend(dropped)
        except NotExpressibleError as exc:
            problems.append(Problem(str(exc).partition(": ")[2], op=op.name, source=source))
    if problems:
        raise InvalidOpDefError(problems)
    return json.dumps({"ops": specs}, indent=2, ensure_ascii=False) + "\n"
