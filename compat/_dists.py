"""Op-sets of distributions: a wheel (read with zipfile, never installed) or an installed
distribution (its ``opmarket`` entry points' manifests, found as discovery finds them)."""

from __future__ import annotations

import importlib.metadata
import zipfile
from collections.abc import Callable
from importlib.metadata import Distribution
from pathlib import Path
from typing import TypeVar

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from opmarket.compat._sources import merge_opsets
from opmarket.registry._discovery import ENTRY_POINT_GROUP
from opmarket.registry._manifest import MANIFEST, find_manifest, manifest_locations
from opmarket.registry._metadata import name_and_version, plugin_entry_points, wheel_distribution
from opmarket.registry._wheelzip import UNREADABLE, BadWheel, describe, open_wheel
from opmarket.sdk import DocumentError, OpSet, opset_from_json

__all__ = ["ENTRY_POINT_GROUP", "MANIFEST", "opset_from_dist", "opset_from_wheel"]

T = TypeVar("T")

#: The most bytes read of one member of a wheel that opmarket reads (its METADATA, entry
#: points, a manifest): real ones are kilobytes. zipfile inflates no more than a member's
#: declared size, so checking that size bounds the memory a zip bomb can take.
MEMBER_LIMIT = 64 * 1024 * 1024


def _check_sizes(zf: zipfile.ZipFile, label: str) -> None:
    for info in zf.infolist():
        read = ".dist-info/" in info.filename or info.filename.endswith(MANIFEST)
        if read and info.file_size > MEMBER_LIMIT:
            raise DocumentError(
                f"{label}!{info.filename}",
                f"{info.file_size} bytes uncompressed, more than the {MEMBER_LIMIT // 2**20} "
                "MiB opmarket reads of a wheel's metadata or manifest",
            )


def _member_text(zf: zipfile.ZipFile, member: str, label: str) -> str:
    try:
        return zf.read(member).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{label}!{member}", f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def _utf8(label: str, dist: Distribution, member: str, read: Callable[[Distribution], T]) -> T:
    """``read(dist)``, with metadata ``member`` that is not UTF-8 a DocumentError naming it."""
    try:
        return read(dist)
    except UnicodeDecodeError as exc:
        raise DocumentError(
            f"{label}!{member}", f"not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None


def opset_from_wheel(path: str | Path) -> OpSet:
    """The op-set a wheel ships, read from the archive without installing it."""
    label = str(path)
    filename = Path(path).name
    parts = filename.removesuffix(".whl").split("-")
    if len(parts) == 7 or (len(parts) == 6 and not parts[2][:1].isdigit()):
        # A PEP 825 variant wheel: its last part is a variant label, not part of the tags.
        filename = "-".join(parts[:-1]) + ".whl"
    try:
        name, version, *_ = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise DocumentError(label, f"not a wheel file name: {exc}") from None
    try:
        with open_wheel(path) as zf:
            _check_sizes(zf, label)
            names = set(zf.namelist())
            dist = wheel_distribution(zf)
            if dist is None:
                raise DocumentError(label, "no .dist-info/METADATA in the wheel")
            meta_name, meta_version = _utf8(label, dist, "METADATA", name_and_version)
            entries = _utf8(label, dist, "entry_points.txt", plugin_entry_points)
            if not entries:
                raise DocumentError(
                    label,
                    f"declares no entry point in group {ENTRY_POINT_GROUP!r}; "
                    "not an opmarket plugin",
                )
            opsets = []
            for _, value in entries:
                # Where discovery looks once the wheel is installed: a wheel's root is what
                # lands in site-packages.
                manifest = next(
                    (str(rel) for rel in manifest_locations(value) if str(rel) in names), None
                )
                if manifest is None:
                    module = value.partition(":")[0].strip()
                    raise DocumentError(
                        label, f"entry point module {module!r} has no {MANIFEST} in its package"
                    )
                text = _member_text(zf, manifest, label)
                opsets.append(opset_from_json(text, source=f"{label}!{manifest}"))
    except DocumentError:
        raise
    except BadWheel as exc:
        raise DocumentError(label, str(exc)) from None
    except UNREADABLE as exc:  # a member zipfile cannot inflate, read through zipfile.Path
        raise DocumentError(label, f"cannot read the wheel: {describe(exc)}") from None
    dist_name = meta_name or str(name)
    dist_version = meta_version or str(version)
    return merge_opsets(opsets, str(canonicalize_name(dist_name)), dist_version)


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
            raise DocumentError(
                str(located), f"not UTF-8 text ({exc.reason} at byte {exc.start})"
            ) from None
        except OSError as exc:
            raise DocumentError(str(located), exc.strerror or str(exc)) from None
        opsets.append(opset_from_json(text, source=str(located)))
    return merge_opsets(opsets, str(canonicalize_name(dist.metadata["Name"])), dist.version)
