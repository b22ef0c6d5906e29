"""Op history: every release a plugin has published, as TensorFlow keeps ops_history_v2.

opmarket's history file is JSON: ``{"format": "opmarket.history", "format_version": 1,
"releases": [<canonical op-set>, ...]}``, oldest first. TensorFlow's ops_history files (an
OpList per op, every version oldest first; one file or a folder of them) are read too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from packaging.version import InvalidVersion, Version

from opmarket.sdk import (
    Document,
    DocumentError,
    InvalidOpDefError,
    OpDef,
    OpSet,
    opset_to_json,
    parse_document,
    read_document,
)
from opmarket.sdk._canonical import HISTORY_FORMAT, HISTORY_FORMAT_VERSION
from opmarket.sdk._files import write_atomic

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "add_release",
    "read_history",
    "releases_from_versions",
    "write_history",
]

FORMAT = HISTORY_FORMAT
FORMAT_VERSION = HISTORY_FORMAT_VERSION

Release = tuple[str, OpSet]


def _label(opset: OpSet, index: int) -> str:
    return opset.version or f"#{index + 1}"


def _labelled(doc: Document) -> list[Release]:
    """An opmarket history's releases with their labels; InvalidOpDefError for invalid ops."""
    if doc.problems:
        raise InvalidOpDefError(doc.problems)
    return [(_label(opset, i), opset) for i, opset in enumerate(doc.releases)]


def releases_from_versions(ops: Sequence[OpDef]) -> list[Release]:
    """TensorFlow's per-op version lists as releases: release ``i`` holds version ``i`` of
    each op, or its last version when it has fewer."""
    versions: dict[str, list[OpDef]] = {}
    for op in ops:
        versions.setdefault(op.name, []).append(op)
    depth = max((len(v) for v in versions.values()), default=0)
    return [
        (
            f"ops_history version {i + 1}",
            OpSet(tuple(v[min(i, len(v) - 1)] for v in versions.values())),
        )
        for i in range(depth)
    ]


def read_history(path: str | Path) -> list[Release]:
    """Every recorded release, oldest first, as (label, op-set).

    Reads an opmarket history file, a TensorFlow ops_history file or folder of them, or a
    single op-set file (one release).
    """
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.suffix == ".pbtxt" and f.is_file())
        if not files:
            raise DocumentError(str(path), "a directory without .pbtxt history files")
        ops = [op for f in files for op in read_document(f).ops]
        return releases_from_versions(ops)
    doc = read_document(p)
    if doc.format == "history":
        return _labelled(doc)
    if doc.format == "tf-pbtxt":
        return releases_from_versions(doc.ops)
    opset = doc.opset
    return [(_label(opset, 0), opset)]


def write_history(releases: Sequence[OpSet]) -> str:
    """The history file text for ``releases``, oldest first (deterministic)."""
    obj = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "releases": [json.loads(opset_to_json(r)) for r in releases],
    }
    return json.dumps(obj, indent=2, ensure_ascii=False) + "\n"


def _existing_history(p: Path) -> list[OpSet]:
    """The releases of the opmarket history file at ``p`` (none when it is missing or
    empty); DocumentError for any other file, which appending would overwrite."""
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as exc:
        raise DocumentError(str(p), f"unreadable: {exc}") from None
    if not text.strip():
        return []
    try:
        doc = parse_document(text, str(p))
    except DocumentError:
        doc = None
    if doc is None or doc.format != "history":
        raise DocumentError(
            str(p),
            "not an opmarket history file, so not appended to (it "
            "would be overwritten); name a new file or a history",
        )
    return [r for _, r in _labelled(doc)]


def add_release(path: str | Path, opset: OpSet) -> str:
    """Append ``opset`` to the history file at ``path`` (created when missing) and say what
    was done. A release with the same version replaces the recorded one. DocumentError for
    a release version that is not PEP 440 and for a file that is not a history."""
    p = Path(path)
    if opset.version:
        try:
            Version(opset.version)
        except InvalidVersion:
            raise DocumentError(
                str(path), f"release version {opset.version!r} is not a valid version (PEP 440)"
            ) from None
    releases = _existing_history(p)
    replaced = False
    if opset.version:
        for i, r in enumerate(releases):
            if r.version == opset.version:
                releases[i] = opset
                replaced = True
        if not replaced and releases and releases[-1].version:
            try:
                if Version(opset.version) < Version(releases[-1].version):
                    raise DocumentError(
                        str(path),
                        f"release {opset.version} is older than the last recorded one "
                        f"({releases[-1].version}); history is oldest first",
                    )
            except InvalidVersion:
                pass
    if not replaced:
        releases.append(opset)
    write_atomic(p, write_history(releases))  # never half a history
    what = "replaced" if replaced else "added"
    return f"{what} release {opset.version or len(releases)} in {path} ({len(releases)} releases)"
