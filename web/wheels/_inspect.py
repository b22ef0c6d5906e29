"""What an uploaded wheel must be before anything is stored: checks as Warehouse makes them.

The archive is read, never extracted: the file name (a valid PEP 508 name in ASCII, a PEP 440
version without a local part, plain compatibility tags) against METADATA, which
``packaging.metadata`` parses and validates; zip safety (entry count, unpacked size,
compression ratio, path traversal, symlinks, entries that name one path twice such as
``pkg/./x.py`` beside ``pkg/x.py``); the dist-info files a wheel must have; and RECORD, whose
hashes and sizes must be those of the archive's entries.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import re
import stat
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from packaging.metadata import InvalidMetadata, Metadata, parse_email
from packaging.utils import InvalidWheelFilename, canonicalize_name
from packaging.version import Version

from opmarket.sdk import OpmarketError
from opmarket.web.wheels._filename import WheelName
from opmarket.web.wheels._variants import VariantError, read_variant_metadata

__all__ = ["WheelError", "WheelInfo", "WheelLimits", "WheelProblem", "inspect_wheel"]

_MAX_METADATA = 4 * 1024 * 1024
_MAX_RECORD = 16 * 1024 * 1024
_CHUNK = 1024 * 1024
# PEP 508 names, ASCII only: re.ASCII, or IGNORECASE lets the Kelvin sign match "k".
_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE | re.ASCII)
_TAG = re.compile(r"^[a-z0-9_]+$", re.ASCII)  # one part of a tag triple, as packaging lowers it
_SIGNATURES = ("RECORD.jws", "RECORD.p7s")
_RECORD_HASHES = ("sha256", "sha384", "sha512", "blake2b", "sha3_256", "sha3_384", "sha3_512")


class WheelError(OpmarketError, ValueError):
    """The file is not a wheel we accept; the message says why."""


#: The name before 0.2 (deprecated): an alias of :class:`WheelError`.
WheelProblem = WheelError


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
    wheel: WheelName  # the file name, parsed once (its variant label included)
    variant: dict[str, Any] | None = None  # a PEP 825 variant wheel's variant.json


def _alias_key(name: str) -> str:
    """The path an installer writes ``name`` to, as a case-insensitive file system sees it."""
    return unicodedata.normalize("NFC", name.rstrip("/")).casefold()


def _check_member(info: zipfile.ZipInfo, limits: WheelLimits) -> None:
    name = info.filename
    parts = name.rstrip("/").split("/")
    if (
        name.startswith("/")
        or "\\" in name
        or "\x00" in name
        or ".." in parts
        or (len(name) > 1 and name[1] == ":")
    ):
        raise WheelError(f"unsafe path in the archive: {name!r} (path traversal)")
    if any(part in ("", ".") for part in parts):
        raise WheelError(
            f"non-canonical path in the archive: {name!r} (an alias of another "
            "path: empty or '.' parts)"
        )
    mode = info.external_attr >> 16
    if stat.S_ISLNK(mode):
        raise WheelError(f"symbolic link in the archive: {name!r}")
    if info.file_size > 1024 * 1024 and info.file_size > limits.max_ratio * max(
        info.compress_size, 1
    ):
        raise WheelError(
            f"{name!r} unpacks to {info.file_size} bytes from {info.compress_size} "
            f"(more than {limits.max_ratio}x): refused as a zip bomb"
        )


def _check_filename(filename: str) -> WheelName:
    """The file name's parts (normalized name, version, tags, variant label); WheelError
    listing every problem with it."""
    if "/" in filename or "\\" in filename or not filename.endswith(".whl"):
        raise WheelError(f"{filename!r}: only wheels (.whl) are accepted")
    try:  # a PEP 825 variant label is checked here, the rest as any wheel's name
        wheel = WheelName.parse(filename)
    except VariantError as exc:
        raise WheelError(str(exc)) from None
    except InvalidWheelFilename as exc:
        raise WheelError(f"invalid wheel file name {filename!r}: {exc}") from None
    version, tags = wheel.version, wheel.tags
    problems = []
    raw_name = wheel.parts[0]
    if not _NAME.match(raw_name):
        problems.append(
            f"the project name {raw_name!r} is not a valid name (PEP 508: ASCII "
            "letters, digits, '.', '_' and '-')"
        )
    if version.local is not None:
        problems.append(
            f"the version {str(version)!r} has a local part (+{version.local}); "
            "local versions are not accepted on upload"
        )
    for tag in sorted(tags, key=str):
        bad = [part for part in (tag.interpreter, tag.abi, tag.platform) if not _TAG.match(part)]
        if bad:
            problems.append(
                f"the tag {str(tag)!r} is not a valid compatibility tag "
                f"({', '.join(map(repr, bad))}: only letters, digits and '_')"
            )
    # As PyPI: a plain linux tag promises nothing about the glibc or libraries it needs.
    for platform in sorted({t.platform for t in tags if t.platform.startswith("linux_")}):
        problems.append(
            f"the platform tag {platform!r} is not accepted, as on PyPI: build the wheel with "
            "`opmarket build`, which repairs it to a manylinux tag (auditwheel)"
        )
    if problems:
        raise WheelError(f"invalid wheel file name {filename!r}: " + "; ".join(problems))
    return wheel


def _record_digest(algorithm: str, data: IO[bytes]) -> str:
    h = hashlib.new(algorithm)
    while chunk := data.read(_CHUNK):
        h.update(chunk)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode("ascii")


def _check_record(zf: zipfile.ZipFile, filename: str, record_name: str) -> None:
    """Every file of the archive is in RECORD with its hash and size, and RECORD names no
    file the archive lacks; WheelError listing the first problems found."""
    info = zf.getinfo(record_name)
    if info.file_size > _MAX_RECORD:
        raise WheelError(f"{filename}: RECORD is larger than {_MAX_RECORD} bytes")
    try:
        text = zf.read(info).decode("utf-8")
    except (zipfile.BadZipFile, UnicodeDecodeError, RuntimeError) as exc:
        raise WheelError(f"{filename}: RECORD cannot be read: {exc}") from None
    listed: dict[str, tuple[str, str]] = {}
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if len(row) != 3:
            raise WheelError(f"{filename}: RECORD row {row!r} does not have 3 fields")
        listed[row[0]] = (row[1], row[2])
    exempt = {record_name} | {f"{record_name.rsplit('/', 1)[0]}/{s}" for s in _SIGNATURES}
    problems: list[str] = []
    for member in zf.infolist():
        name = member.filename
        if member.is_dir() or name in exempt:
            continue
        entry = listed.pop(name, None)
        if entry is None:
            problems.append(f"{name!r} is not in RECORD")
            continue
        hash_field, size_field = entry
        algorithm, _, expected = hash_field.partition("=")
        if algorithm not in _RECORD_HASHES or not expected:
            problems.append(f"{name!r} has no usable hash in RECORD ({hash_field!r})")
            continue
        try:
            with zf.open(member) as data:
                actual = _record_digest(algorithm, data)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            problems.append(f"{name!r} cannot be read: {exc}")
            continue
        if actual != expected:
            problems.append(f"{name!r} does not match its {algorithm} in RECORD")
        elif size_field and size_field != str(member.file_size):
            problems.append(f"{name!r} is {member.file_size} bytes, RECORD says {size_field}")
    listed.pop(record_name, None)
    problems.extend(
        f"RECORD lists {name!r}, which the archive lacks" for name in listed if name not in exempt
    )
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise WheelError(
            f"{filename}: RECORD does not match the archive: " + "; ".join(problems[:5]) + more
        )


def _field_problem(exc: Exception) -> str:
    field = getattr(exc, "field", "")
    header = "-".join(p.capitalize() for p in field.replace("_", "-").split("-"))
    return f"{header}: {exc}" if header else str(exc)


def _read_metadata(metadata: bytes, filename: str, name: str, version: Version) -> Metadata:
    try:
        raw, _unparsed = parse_email(metadata)
    except ValueError as exc:
        raise WheelError(f"{filename}: METADATA is not readable: {exc}") from None
    if not raw.get("name") or not raw.get("version"):
        raise WheelError(f"{filename}: METADATA lacks Name or Version")
    try:
        meta = Metadata.from_raw(raw, validate=True)
    except ExceptionGroup as group:  # packaging collects every invalid field
        reasons = "; ".join(_field_problem(e) for e in group.exceptions)
        raise WheelError(f"{filename}: METADATA is not valid: {reasons}") from None
    except InvalidMetadata as exc:
        raise WheelError(f"{filename}: METADATA is not valid: {_field_problem(exc)}") from None
    if not _NAME.match(meta.name):
        raise WheelError(
            f"{filename}: METADATA's Name {meta.name!r} is not a valid name "
            "(PEP 508: ASCII letters, digits, '.', '_' and '-')"
        )
    if canonicalize_name(meta.name) != name:
        raise WheelError(f"{filename}: the file name says {name!r}, METADATA says {meta.name!r}")
    if meta.version != version:
        raise WheelError(
            f"{filename}: the file name says version {version}, METADATA says {raw['version']!r}"
        )
    return meta


def inspect_wheel(path: Path, filename: str, limits: WheelLimits | None = None) -> WheelInfo:
    """Check the wheel at ``path`` uploaded as ``filename``; WheelError says what is wrong."""
    limits = limits or WheelLimits()
    wheel = _check_filename(filename)
    name, version = str(wheel.name), wheel.version
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        raise WheelError(f"{filename}: not a zip archive") from None
    with zf:
        members = zf.infolist()
        if len(members) > limits.max_entries:
            raise WheelError(f"{filename}: {len(members)} entries, more than {limits.max_entries}")
        seen: dict[str, str] = {}
        total = 0
        for info in members:
            _check_member(info, limits)
            key = _alias_key(info.filename)
            if key in seen:
                raise WheelError(
                    f"{filename}: duplicate entry {info.filename!r} (the same "
                    f"path as {seen[key]!r})"
                )
            seen[key] = info.filename
            total += info.file_size
        if total > limits.max_unpacked_bytes:
            raise WheelError(
                f"{filename}: unpacks to {total} bytes, more than "
                f"{limits.max_unpacked_bytes}: refused as a zip bomb"
            )
        dist_info = wheel.dist_info
        names = set(seen.values())
        for required in ("METADATA", "WHEEL", "RECORD"):
            if f"{dist_info}/{required}" not in names:
                raise WheelError(f"{filename}: {dist_info}/{required} is missing")
        meta_info = zf.getinfo(f"{dist_info}/METADATA")
        if meta_info.file_size > _MAX_METADATA:
            raise WheelError(f"{filename}: METADATA is larger than {_MAX_METADATA} bytes")
        try:
            metadata = zf.read(meta_info)
        except (zipfile.BadZipFile, OSError, RuntimeError) as exc:
            raise WheelError(f"{filename}: METADATA cannot be read: {exc}") from None
        meta = _read_metadata(metadata, filename, name, version)
        _check_record(zf, filename, f"{dist_info}/RECORD")
        label = wheel.variant
        try:
            variant = None if label is None else read_variant_metadata(zf, dist_info, label)
        except VariantError as exc:
            raise WheelError(f"{filename}: {exc}") from None
    return WheelInfo(
        filename=filename,
        name=meta.name,
        normalized=name,
        version=str(version),
        requires_python=str(meta.requires_python or ""),
        summary=meta.summary or "",
        metadata=metadata,
        metadata_sha256=hashlib.sha256(metadata).hexdigest(),
        variant=variant,
        wheel=wheel,
    )
