"""Where op-sets come from: files (canonical JSON, spec-form JSON, TensorFlow text format),
wheels, installed distributions and ``name==version`` from a package index.

A plugin distribution declares entry points in group ``opmarket``; the package of each entry
point's module ships ``opmarket.opset.json`` (canonical op-set JSON, kernels included) beside
its ``__init__.py``. Wheels are read with zipfile and never installed.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from importlib.metadata import Distribution
from pathlib import Path
from typing import TypeVar

from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from opmarket.registry import (
    ENTRY_POINT_GROUP,
    MANIFEST,
    find_manifest,
    manifest_locations,
)
from opmarket.registry._metadata import name_and_version, plugin_entry_points, wheel_distribution
from opmarket.sdk import (
    DocumentError,
    InvalidOpDef,
    KernelDef,
    OpDef,
    OpSet,
    Problem,
    opset_from_json,
    read_document,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "MANIFEST",
    "Source",
    "load_source",
    "latest_versions",
    "opset_from_dist",
    "opset_from_index",
    "opset_from_wheel",
]

T = TypeVar("T")


@dataclass(frozen=True)
class Source:
    """One release's op-set and what is known about it."""

    label: str  # what the user named: a path, a distribution, ``name==version``
    opset: OpSet
    kernels_known: bool
    problems: tuple[Problem, ...] = field(default=())  # invalid op definitions it holds

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


def _merge(opsets: Iterable[OpSet], name: str, version: str) -> OpSet:
    ops: list[OpDef] = []
    kernels: list[KernelDef] = []
    for s in opsets:
        ops.extend(s.ops)
        kernels.extend(s.kernels)
    return OpSet(tuple(latest_versions(ops)), tuple(kernels), name=name, version=version)


def _from_file(path: Path, label: str) -> Source:
    if path.suffix == ".whl":
        return Source(label, opset_from_wheel(path), kernels_known=True)
    doc = read_document(path)
    if doc.format == "history":
        if not doc.releases:
            raise DocumentError(label, "history has no releases")
        if doc.problems:
            raise InvalidOpDef(doc.problems)
        return Source(label, doc.releases[-1], kernels_known=True)
    ops = latest_versions(doc.ops)
    opset = OpSet(tuple(ops), tuple(doc.kernels), name=doc.name, version=doc.version)
    return Source(label, opset, kernels_known=bool(doc.kernels), problems=tuple(doc.problems))


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
    return Source(label, opset, kernels_known=bool(kernels), problems=tuple(problems))


# ---------------------------------------------------------------- wheels


def _member_text(zf: zipfile.ZipFile, member: str, label: str) -> str:
    try:
        return zf.read(member).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{label}!{member}", f"not UTF-8 text ({exc.reason} at byte "
                                                 f"{exc.start})") from None


def _utf8(label: str, dist: Distribution, member: str, read: Callable[[Distribution], T]) -> T:
    """``read(dist)``, with metadata ``member`` that is not UTF-8 a DocumentError naming it."""
    try:
        return read(dist)
    except UnicodeDecodeError as exc:
        raise DocumentError(f"{label}!{member}", f"not UTF-8 text ({exc.reason} at byte "
                                                 f"{exc.start})") from None


def opset_from_wheel(path: str | Path) -> OpSet:
    """The op-set a wheel ships, read from the archive without installing it."""
    label = str(path)
    try:
        name, version, *_ = parse_wheel_filename(Path(path).name)
    except InvalidWheelFilename as exc:
        raise DocumentError(label, f"not a wheel file name: {exc}") from None
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            dist = wheel_distribution(zf)
            if dist is None:
                raise DocumentError(label, "no .dist-info/METADATA in the wheel")
            meta_name, meta_version = _utf8(label, dist, "METADATA", name_and_version)
            entries = _utf8(label, dist, "entry_points.txt", plugin_entry_points)
            if not entries:
                raise DocumentError(
                    label, f"declares no entry point in group {ENTRY_POINT_GROUP!r}; "
                    "not an opmarket plugin"
                )
            opsets = []
            for _, value in entries:
                # Where discovery looks once the wheel is installed: a wheel's root is what
                # lands in site-packages.
                manifest = next((str(rel) for rel in manifest_locations(value)
                                 if str(rel) in names), None)
                if manifest is None:
                    module = value.partition(":")[0].strip()
                    raise DocumentError(
                        label, f"entry point module {module!r} has no {MANIFEST} in its package"
                    )
                text = _member_text(zf, manifest, label)
                opsets.append(opset_from_json(text, source=f"{label}!{manifest}"))
    except zipfile.BadZipFile:
        raise DocumentError(label, "not a zip archive (a broken wheel?)") from None
    except OSError as exc:
        raise DocumentError(label, exc.strerror or str(exc)) from None
    dist_name = meta_name or str(name)
    dist_version = meta_version or str(version)
    return _merge(opsets, str(canonicalize_name(dist_name)), dist_version)


# ---------------------------------------------------------------- installed distributions


def opset_from_dist(name: str) -> OpSet:
    """The op-set of an installed distribution, found through its ``opmarket`` entry points.

    Plugin modules are not imported: the manifest is found as discovery finds it, in the
    folder the distribution is installed in, or beside the top-level package (editable
    installs).
    """
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        raise DocumentError(
            name, "no such file, and no installed distribution by that name"
        ) from None
    eps = plugin_entry_points(dist)
    if not eps:
        raise DocumentError(
            name, f"installed, but declares no entry point in group {ENTRY_POINT_GROUP!r}"
        )
    site = dist.locate_file("")
    opsets = []
    for _, value in eps:
        located = find_manifest(value, Path(str(site)))
        if located is None:
            module = value.partition(":")[0].strip()
            raise DocumentError(name, f"entry point module {module!r} ships no {MANIFEST}")
        try:
            text = located.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            raise DocumentError(str(located), f"not UTF-8 text ({exc.reason} at byte "
                                              f"{exc.start})") from None
        except OSError as exc:
            raise DocumentError(str(located), exc.strerror or str(exc)) from None
        opsets.append(opset_from_json(text, source=str(located)))
    return _merge(opsets, str(canonicalize_name(dist.metadata["Name"])), dist.version)


# ---------------------------------------------------------------- package index

_PINNED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^=\s]+)$")


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []  # (filename, href)
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self.links.append((data.strip(), self._href))
            self._href = None


def _index_files(index_url: str, project: str, label: str) -> list[tuple[str, str, str]]:
    """(filename, absolute url, sha256 or "") for every file of ``project`` on the index."""
    url = index_url.rstrip("/") + f"/{project}/"
    request = urllib.request.Request(
        url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
            ctype = response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        raise DocumentError(label, f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DocumentError(label, f"{url}: cannot connect ({exc})") from None
    out: list[tuple[str, str, str]] = []
    if "json" in ctype:
        try:
            data = json.loads(body)
            for f in data.get("files", []):
                out.append((
                    str(f["filename"]), urllib.parse.urljoin(url, str(f["url"])),
                    str((f.get("hashes") or {}).get("sha256", "")),
                ))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Not the simple API's JSON (PEP 691): a proxy's error page, a truncated body.
            raise DocumentError(label, f"{url}: unreadable index response ({type(exc).__name__}:"
                                       f" {exc})") from None
        return out
    parser = _Links()
    parser.feed(body.decode("utf-8", errors="replace"))
    for filename, href in parser.links:
        full = urllib.parse.urljoin(url, href)
        base, _, fragment = full.partition("#")
        digest = fragment[len("sha256="):] if fragment.startswith("sha256=") else ""
        out.append((filename or base.rsplit("/", 1)[-1], base, digest))
    return out


def opset_from_index(requirement: str, index_url: str) -> OpSet:
    """Fetch the wheel of ``name==version`` from a simple-API index and read its op-set."""
    m = _PINNED.match(requirement)
    if m is None:
        raise DocumentError(requirement, "expected NAME==VERSION")
    project = canonicalize_name(m.group(1))
    try:
        wanted = Version(m.group(2))
    except InvalidVersion:
        raise DocumentError(requirement, f"{m.group(2)!r} is not a valid version") from None
    candidates = []
    for filename, url, digest in _index_files(index_url, project, requirement):
        try:
            name, version, *_ = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if name == project and version == wanted:
            candidates.append((filename, url, digest))
    if not candidates:
        raise DocumentError(requirement, f"no wheel of {project} {wanted} on {index_url}")
    filename, url, digest = sorted(candidates, key=lambda c: "none-any" not in c[0])[0]
    try:
        with urllib.request.urlopen(url, timeout=60) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise DocumentError(requirement, f"{url}: download failed ({exc})") from None
    if digest and hashlib.sha256(data).hexdigest() != digest:
        raise DocumentError(requirement, f"{filename}: sha256 does not match the index")
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp, filename)
        target.write_bytes(data)
        return opset_from_wheel(target)


# ---------------------------------------------------------------- dispatch


def load_source(spec: str, *, index_url: str | None = None) -> Source:
    """An op-set from a path, an installed distribution's name, or ``name==version``.

    Raises DocumentError (or InvalidOpDef) with the source and what is wrong.
    """
    path = Path(spec)
    try:
        if path.is_dir():
            return _from_dir(path, spec)
        if path.exists():
            return _from_file(path, spec)
        if _PINNED.match(spec):
            if index_url is None:
                name, _, version = spec.partition("==")
                opset = opset_from_dist(name)
                if Version(opset.version) != Version(version):
                    raise DocumentError(
                        spec, f"installed version is {opset.version}; pass --index-url to "
                        "fetch another"
                    )
                return Source(spec, opset, kernels_known=True)
            return Source(spec, opset_from_index(spec, index_url), kernels_known=True)
        if path.suffix or "/" in spec:
            raise DocumentError(spec, "no such file")
        return Source(spec, opset_from_dist(spec), kernels_known=True)
    except InvalidOpDef as exc:
        raise DocumentError(spec, str(exc).splitlines()[0] if str(exc) else "invalid op") from None
