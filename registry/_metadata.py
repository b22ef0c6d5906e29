"""Distribution metadata, read one way: ``importlib.metadata`` over a ``.dist-info`` (or
``.egg-info``) folder, on disk or inside a wheel (a ``zipfile.Path``). Discovery, compat's
wheel and distribution sources and the marketplace's wheel checks all read names, versions and
``opmarket`` entry points through these functions, and order versions with
:func:`version_key`."""

from __future__ import annotations

import email.parser
import importlib.metadata
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.version import InvalidVersion, Version

from opmarket.sdk._hookspecs import PROJECT

__all__ = [
    "ENTRY_POINT_GROUP",
    "distribution_at",
    "name_and_version",
    "parse_entry_points",
    "parse_version",
    "plugin_entry_points",
    "version_key",
    "wheel_distribution",
]

#: The entry point group plugins declare themselves in (pluggy's project name too).
ENTRY_POINT_GROUP = PROJECT


def distribution_at(
    folder: str | os.PathLike[str] | zipfile.Path,
) -> importlib.metadata.Distribution:
    """The distribution whose metadata folder is ``folder`` (a path, or a folder in a zip)."""
    return importlib.metadata.PathDistribution(
        folder if isinstance(folder, zipfile.Path) else Path(folder)
    )


def wheel_distribution(wheel: zipfile.ZipFile) -> importlib.metadata.Distribution | None:
    """The distribution a wheel's ``.dist-info`` folder describes; None when the archive has
    no top-level ``*.dist-info/METADATA``."""
    folders = sorted(
        name.partition("/")[0]
        for name in wheel.namelist()
        if name.endswith(".dist-info/METADATA") and name.count("/") == 1
    )
    return distribution_at(zipfile.Path(wheel, folders[0] + "/")) if folders else None


def name_and_version(dist: importlib.metadata.Distribution) -> tuple[str, str]:
    """``Name`` and ``Version`` as the metadata spells them ("" where missing); raises
    UnicodeDecodeError for metadata that is not UTF-8."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if not text:
        return "", ""
    # The header alone, as importlib.metadata's ``metadata`` parses it, without the body (a
    # long description can be most of the file).
    meta = email.parser.HeaderParser().parsestr(text.partition("\n\n")[0])
    return meta.get("Name") or "", meta.get("Version") or ""


def parse_version(text: str) -> Version | None:
    """``text`` as a PEP 440 version, or None when it is not one."""
    try:
        return Version(text)
    except InvalidVersion:
        return None


def version_key(text: str) -> tuple[int, Version | str]:
    """The sort key of a version string: PEP 440 order, with strings that are not PEP 440
    versions first, among themselves by text (so the newest valid version sorts last)."""
    version = parse_version(text)
    return (0, text) if version is None else (1, version)


def plugin_entry_points(dist: importlib.metadata.Distribution) -> list[tuple[str, str]]:
    """The (name, value) pairs of the distribution's ``opmarket`` entry points (extras, as in
    ``module [extra]``, do not change what is loaded and are dropped); raises
    UnicodeDecodeError for an ``entry_points.txt`` that is not UTF-8."""
    return [
        (ep.name, ep.value.partition("[")[0].strip())
        for ep in dist.entry_points.select(group=ENTRY_POINT_GROUP)
    ]


class _TextDistribution(importlib.metadata.Distribution):
    """A distribution made of metadata texts held in memory."""

    def __init__(self, files: Mapping[str, str]) -> None:
        self._files = dict(files)

    def read_text(self, filename: str) -> str | None:
        return self._files.get(filename)

    def locate_file(self, path: str | os.PathLike[str]) -> Path:
        return Path(path)


def parse_entry_points(text: str) -> list[tuple[str, str]]:
    """The ``opmarket`` (name, value) pairs of an ``entry_points.txt`` text, read as
    ``importlib.metadata`` reads installed distributions."""
    return plugin_entry_points(_TextDistribution({"entry_points.txt": text}))
