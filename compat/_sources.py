"""Where op-sets come from: files (canonical JSON, spec-form JSON, TensorFlow text format, an
opmarket history; or PyTorch schema lists), folders of them, wheels and installed
distributions (``_dists``) and ``name==version`` from a package index (``_index``); each kind
is imported when it is used.

A plugin distribution declares entry points in group ``opmarket``; the package of each entry
point's module ships ``opmarket.opset.json`` (canonical op-set JSON, kernels included) beside
its ``__init__.py``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from packaging.version import Version

if TYPE_CHECKING:
    from opmarket._fetch import Fetcher

from opmarket.sdk import (
    DocumentError,
    InvalidOpDefError,
    KernelDef,
    OpDef,
    OpSet,
    Problem,
    read_document,
)

if TYPE_CHECKING:
    from opmarket.compat._torch_list import SchemaLine

__all__ = ["PINNED", "Source", "latest_versions", "load_source", "merge_opsets"]

#: ``name==version``: a release to find installed, or on an index.
PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^=\s]+)$")


def _dists() -> ModuleType:
    import opmarket.compat._dists as dists  # lazy: distribution metadata, zip files

    return dists


@dataclass(frozen=True)
class Source:
    """One release's op-set and what is known about it."""

    label: str  # what the user named: a path, a distribution, ``name==version``
    opset: OpSet
    kernels_known: bool
    problems: tuple[Problem, ...] = field(default=())  # invalid op definitions it holds
    #: A PyTorch schema list's lines (then the op-set is empty); None for op-sets.
    schemas: tuple[SchemaLine, ...] | None = None
    #: Whether opmarket.torch registers these ops (PyTorch's rules compare their schemas):
    #: true for plugin releases, false for TensorFlow's own registries (text format).
    torch: bool = False

    @property
    def version(self) -> str:
        """The release's version, ``""`` when not known."""
        return self.opset.version


def latest_versions(ops: Iterable[OpDef]) -> list[OpDef]:
    """The last definition of each op, in order of first appearance (history files repeat)."""
    out: dict[str, OpDef] = {}
    for op in ops:
        out[op.name] = op
    return list(out.values())


def merge_opsets(opsets: Iterable[OpSet], name: str, version: str) -> OpSet:
    """One release's op-set from the op-sets of its entry points (latest op versions)."""
    ops: list[OpDef] = []
    kernels: list[KernelDef] = []
    for s in opsets:
        ops.extend(s.ops)
        kernels.extend(s.kernels)
    return OpSet(tuple(latest_versions(ops)), tuple(kernels), name=name, version=version)


def _from_file(path: Path, label: str) -> Source:
    if path.suffix == ".whl":
        from opmarket.compat._dists import opset_from_wheel  # lazy: metadata, zipfile

        return Source(label, opset_from_wheel(path), kernels_known=True, torch=True)
    if path.suffix != ".json":
        schemas = _schema_list(path, label)
        if schemas is not None:
            return Source(label, OpSet(()), kernels_known=False, schemas=schemas)
    doc = read_document(path)
    if doc.format == "history":
        if not doc.releases:
            raise DocumentError(label, "history has no releases")
        if doc.problems:
            raise InvalidOpDefError(doc.problems)
        return Source(label, doc.releases[-1], kernels_known=True, torch=True)
    ops = latest_versions(doc.ops)
    opset = OpSet(tuple(ops), tuple(doc.kernels), name=doc.name, version=doc.version)
    return Source(
        label,
        opset,
        kernels_known=bool(doc.kernels),
        problems=tuple(doc.problems),
        torch=doc.format != "tf-pbtxt",
    )


def _schema_list(path: Path, label: str) -> tuple[SchemaLine, ...] | None:
    """The lines of a PyTorch schema list, or None when the file is not one."""
    from opmarket.compat import _torch_list as ts  # lazy: only for schema lists

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # read_document says what is wrong
    if not ts.looks_like_schema_list(text):
        return None
    return tuple(ts.schema_lines(text, label))


def _from_dir(path: Path, label: str) -> Source:
    files = sorted(p for p in path.iterdir() if p.suffix in (".pbtxt", ".json") and p.is_file())
    if not files:
        raise DocumentError(label, "a directory without .pbtxt or .json op files")
    ops: list[OpDef] = []
    kernels: list[KernelDef] = []
    problems: list[Problem] = []
    for f in files:
        doc = read_document(f)
        ops.extend(latest_versions(doc.ops))
        kernels.extend(doc.kernels)
        problems.extend(doc.problems)
    opset = OpSet(tuple(latest_versions(ops)), tuple(kernels))
    torch = not any(f.suffix == ".pbtxt" for f in files)
    return Source(label, opset, bool(kernels), tuple(problems), torch=torch)


def load_source(
    spec: str, *, index_url: str | None = None, fetcher: Fetcher | None = None
) -> Source:
    """An op-set from a path, an installed distribution's name, or ``name==version``
    (from ``index_url``, through ``fetcher`` when given: one deadline for a command).

    Raises DocumentError (or InvalidOpDefError) with the source and what is wrong.
    """
    path = Path(spec)
    try:
        if path.is_dir():
            return _from_dir(path, spec)
        if path.exists():
            return _from_file(path, spec)
        if PINNED.match(spec):
            if index_url is None:
                name, _, version = spec.partition("==")
                opset = _dists().opset_from_dist(name)
                if Version(opset.version) != Version(version):
                    raise DocumentError(
                        spec,
                        f"installed version is {opset.version}; pass --index-url to fetch another",
                    )
                return Source(spec, opset, kernels_known=True, torch=True)
            from opmarket.compat._index import opset_from_index  # lazy: an HTTP client

            opset = opset_from_index(spec, index_url, fetcher=fetcher)
            return Source(spec, opset, kernels_known=True, torch=True)
        if path.suffix or "/" in spec:
            raise DocumentError(spec, "no such file")
        return Source(spec, _dists().opset_from_dist(spec), kernels_known=True, torch=True)
    except InvalidOpDefError as exc:
        raise DocumentError(spec, str(exc).splitlines()[0] if str(exc) else "invalid op") from None
