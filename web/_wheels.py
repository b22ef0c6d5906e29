"""What an uploaded wheel must be before anything is stored: checks as Warehouse makes them.

The archive is read, never extracted: file name against METADATA's name and version,
normalized names, zip safety (entry count, unpacked size, compression ratio, path traversal,
symlinks, duplicates) and the dist-info files a wheel must have.
"""

from __future__ import annotations

import hashlib
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path

from packaging.metadata import parse_email
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from opmarket.sdk import OpmarketError

__all__ = ["WheelInfo", "WheelLimits", "WheelProblem", "inspect_wheel"]

_MAX_METADATA = 4 * 1024 * 1024


class WheelProblem(OpmarketError, ValueError):
    """The file is not a wheel we accept; the message says why."""


@dataclass(frozen=True, slots=True)
class WheelLimits:
    """Zip-bomb limits on an upload: unpacked bytes, entry count, an entry's compression ratio."""

    max_unpacked_bytes: int = 1024 * 1024 * 1024
    max_entries: int = 20_000
    max_ratio: int = 200


@dataclass(frozen=True, slots=True)
class WheelInfo:
    """What :func:`inspect_wheel` read from an accepted wheel, METADATA included."""

    filename: str
    name: str  # as METADATA spells it
    normalized: str
    version: str  # normalized
    requires_python: str
    summary: str
    metadata: bytes  # the METADATA file, served as PEP 658 core metadata
    metadata_sha256: str


def _check_member(info: zipfile.ZipInfo, limits: WheelLimits) -> None:
    name = info.filename
    parts = name.split("/")
    if (name.startswith("/") or "\\" in name or "\x00" in name or ".." in parts
            or (len(name) > 1 and name[1] == ":")):
        raise WheelProblem(f"unsafe path in the archive: {name!r} (path traversal)")
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise WheelProblem(f"symbolic link in the archive: {name!r}")
    if info.file_size > 1024 * 1024 and info.file_size > limits.max_ratio * max(
            info.compress_size, 1):
        raise WheelProblem(
            f"{name!r} unpacks to {info.file_size} bytes from {info.compress_size} "
            f"(more than {limits.max_ratio}x): refused as a zip bomb"
        )


def inspect_wheel(path: Path, filename: str, limits: WheelLimits | None = None) -> WheelInfo:
    """Check the wheel at ``path`` uploaded as ``filename``; WheelProblem says what is wrong."""
    limits = limits or WheelLimits()
    if "/" in filename or "\\" in filename or not filename.endswith(".whl"):
        raise WheelProblem(f"{filename!r}: only wheels (.whl) are accepted")
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise WheelProblem(f"invalid wheel file name {filename!r}: {exc}") from None
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        raise WheelProblem(f"{filename}: not a zip archive") from None
    with zf:
        members = zf.infolist()
        if len(members) > limits.max_entries:
            raise WheelProblem(f"{filename}: {len(members)} entries, more than "
                               f"{limits.max_entries}")
        seen: set[str] = set()
        total = 0
        for info in members:
            _check_member(info, limits)
            if info.filename in seen:
                raise WheelProblem(f"{filename}: duplicate entry {info.filename!r}")
            seen.add(info.filename)
            total += info.file_size
        if total > limits.max_unpacked_bytes:
            raise WheelProblem(f"{filename}: unpacks to {total} bytes, more than "
                               f"{limits.max_unpacked_bytes}: refused as a zip bomb")
        dist_name, dist_version = filename.split("-")[:2]
        dist_info = f"{dist_name}-{dist_version}.dist-info"
        for required in ("METADATA", "WHEEL", "RECORD"):
            if f"{dist_info}/{required}" not in seen:
                raise WheelProblem(f"{filename}: {dist_info}/{required} is missing")
        meta_info = zf.getinfo(f"{dist_info}/METADATA")
        if meta_info.file_size > _MAX_METADATA:
            raise WheelProblem(f"{filename}: METADATA is larger than {_MAX_METADATA} bytes")
        try:
            metadata = zf.read(meta_info)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            raise WheelProblem(f"{filename}: METADATA cannot be read: {exc}") from None
    try:
        raw, _unparsed = parse_email(metadata)
    except ValueError as exc:
        raise WheelProblem(f"{filename}: METADATA is not readable: {exc}") from None
    meta_name, meta_version = raw.get("name"), raw.get("version")
    if not meta_name or not meta_version:
        raise WheelProblem(f"{filename}: METADATA lacks Name or Version")
    if canonicalize_name(meta_name) != name:
        raise WheelProblem(f"{filename}: the file name says {name!r}, METADATA says "
                           f"{meta_name!r}")
    try:
        if Version(meta_version) != version:
            raise WheelProblem(f"{filename}: the file name says version {version}, METADATA "
                               f"says {meta_version!r}")
    except InvalidVersion:
        raise WheelProblem(f"{filename}: METADATA's version {meta_version!r} is not a valid "
                           "version (PEP 440)") from None
    requires_python = raw.get("requires_python", "") or ""
    if requires_python:
        try:
            SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise WheelProblem(f"{filename}: Requires-Python {requires_python!r} is not a "
                               "valid specifier") from None
    return WheelInfo(
        filename=filename, name=meta_name, normalized=str(name), version=str(version),
        requires_python=requires_python, summary=raw.get("summary", "") or "",
        metadata=metadata, metadata_sha256=hashlib.sha256(metadata).hexdigest(),
    )  # fmt: skip
