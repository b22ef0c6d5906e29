"""Finding plugins fast: a scan of the installed distributions' entry points, cached on disk.

importlib.metadata re-reads every distribution on each ``entry_points()`` call, which costs
tens of milliseconds among thousands of installed distributions, in every process. This
scan lists the ``*.dist-info`` / ``*.egg-info`` folders of the ``sys.path`` directories,
reads only ``entry_points.txt`` (and a plugin's METADATA header), imports nothing, and keeps
the result in a cache file that is reused while no scanned directory changed.

Staleness: installing, upgrading or uninstalling a distribution adds or removes a folder in
its directory, which changes the directory's modification time; the cache records every
scanned directory's time, each plugin's ``entry_points.txt`` time, and the times of every
``.egg-info`` folder and its ``entry_points.txt`` (``setup.py develop`` rewrites those in
place), and is used only when they are all unchanged. A path modified within the last
``RACY_NS`` when it was scanned is not cached, so that a change later in the same clock
tick cannot hide behind an unchanged time (git's racy-index rule).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from opmarket.registry._metadata import (
    ENTRY_POINT_GROUP,
    distribution_at,
    name_and_version,
    parse_entry_points,
)
from opmarket.sdk._files import cache_dir, write_atomic
from opmarket.sdk._hookspecs import PROJECT

__all__ = [
    "CACHE_FORMAT",
    "ENTRY_POINT_GROUP",
    "MAX_CACHE_FILES",
    "RACY_NS",
    "EntryPointRecord",
    "Scan",
    "normalize_name",
    "parse_entry_points",
    "scan",
]

#: Bumped whenever what the cache file holds changes.
CACHE_FORMAT = 2
#: Directory times this close to the scan are not trusted (filesystem time granularity).
RACY_NS = 2_000_000_000
#: Cache files kept, the most recently written.
MAX_CACHE_FILES = 32

_SECTION = re.compile(r"^\s*\[\s*" + re.escape(PROJECT) + r"\s*\]\s*$", re.MULTILINE)
_NORMALIZE = re.compile(r"[-_.]+")


@dataclass(frozen=True, slots=True)
class EntryPointRecord:
    """One entry point of the group ``opmarket``: enough to load it or find its manifest."""

    name: str
    value: str  # "module" or "module:attr"
    distribution: str  # as its METADATA spells it
    version: str
    metadata_dir: str  # the .dist-info / .egg-info folder

    @property
    def module(self) -> str:
        return self.value.partition(":")[0].strip()

    @property
    def attr(self) -> str:
        return self.value.partition(":")[2].strip()

    def to_json(self) -> list[str]:
        return [self.name, self.value, self.distribution, self.version, self.metadata_dir]


@dataclass(frozen=True, slots=True)
class Scan:
    """The entry points found, how many distributions were looked at, and whether the
    answer came from the cache."""

    entries: tuple[EntryPointRecord, ...]
    distributions: int
    from_cache: bool


def _mtime(path: str) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except OSError:
        return None


def _search_path(paths: Sequence[str] | None) -> list[str]:
    # As importlib.metadata's path finder: "" is the current directory (if it still exists).
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = ""
    return [
        p or cwd
        for p in (sys.path if paths is None else paths)
        if isinstance(p, str) and (p or cwd)
    ]


def normalize_name(name: str) -> str:
    """A distribution name as importlib.metadata compares them (``-``, ``_``, ``.`` alike)."""
    return _NORMALIZE.sub("_", name).lower()


def _from_folder_name(folder: str) -> tuple[str, str]:
    stem = os.path.basename(folder).rsplit(".", 1)[0]
    name, _, version = stem.partition("-")
    return name, version.partition("-")[0]


def _scan_dirs(dirs: Iterable[str]) -> tuple[list[EntryPointRecord], int, list[str]]:
    """The entry points, the number of distributions looked at, and the paths (besides the
    directories) whose times the cache must check: each plugin's ``entry_points.txt``, and
    every ``.egg-info`` folder with its ``entry_points.txt`` (``setup.py develop`` rewrites
    those in place, where installers always replace a ``.dist-info`` folder whole)."""
    records: list[EntryPointRecord] = []
    watched: list[str] = []
    seen: set[str] = set()
    count = 0
    for d in dirs:
        try:
            with os.scandir(d) as it:
                names = [e.name for e in it if e.name.endswith((".dist-info", ".egg-info"))]
        except OSError:  # missing, a file (zip), unreadable: nothing of ours there
            continue
        for folder_name in sorted(names):
            count += 1
            folder = os.path.join(d, folder_name)
            key = normalize_name(_from_folder_name(folder)[0])
            if key in seen:  # shadowed by an earlier directory, as importlib.metadata does
                continue
            seen.add(key)
            entry_points = os.path.join(folder, "entry_points.txt")
            if folder_name.endswith(".egg-info"):
                watched += [folder, entry_points]
            try:
                with open(entry_points, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                continue
            if not _SECTION.search(text):
                continue
            pairs = parse_entry_points(text)  # the text read above, as importlib.metadata reads it
            if not pairs:
                continue
            try:
                dist, version = name_and_version(distribution_at(folder))
            except (OSError, UnicodeDecodeError):
                dist = version = ""  # an unreadable METADATA: the folder's name says
            if not dist:
                dist, version = _from_folder_name(folder)
            records.extend(EntryPointRecord(n, v, dist, version, folder) for n, v in pairs)
            if not folder_name.endswith(".egg-info"):
                watched.append(entry_points)
    return records, count, watched


def _cache_file(dirs: Sequence[str]) -> Path:
    digest = hashlib.sha256("\0".join([sys.version, *dirs]).encode()).hexdigest()[:20]
    return cache_dir() / f"entry-points-{digest}.json"


def _stamps(paths: Iterable[str]) -> list[list[object]]:
    return [[p, _mtime(p)] for p in paths]


def _load_cache(file: Path, dirs: Sequence[str]) -> Scan | None:
    """The cached scan; None when the file is missing, stale, or malformed in any way (a
    later scan then rewrites it)."""
    try:
        data = json.loads(file.read_bytes())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("format") != CACHE_FORMAT
        or (data.get("dirs") != list(dirs))
    ):
        return None
    stamps, entries, count = data.get("stamps"), data.get("entries"), data.get("distributions")
    if not (isinstance(stamps, list) and isinstance(entries, list) and type(count) is int):
        return None
    for stamp in stamps:
        if not (isinstance(stamp, list) and len(stamp) == 2 and isinstance(stamp[0], str)):
            return None
        try:
            if _mtime(stamp[0]) != stamp[1]:
                return None
        except ValueError:  # a path os.stat refuses (a NUL in it)
            return None
    if not all(
        isinstance(e, list) and len(e) == 5 and all(isinstance(x, str) for x in e) for e in entries
    ):
        return None
    return Scan(tuple(EntryPointRecord(*e) for e in entries), count, from_cache=True)


def _store_cache(file: Path, dirs: Sequence[str], result: Scan, stamps: list[list[object]]) -> None:
    data = {
        "format": CACHE_FORMAT,
        "dirs": list(dirs),
        "stamps": stamps,
        "distributions": result.distributions,
        "entries": [e.to_json() for e in result.entries],
    }
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        # Readers see the old file or the new one, never half of one.
        write_atomic(file, json.dumps(data, separators=(",", ":")))
        _prune(file.parent)
    except OSError:
        pass  # an unwritable cache only makes the next scan slower


def _prune(folder: Path) -> None:
    """Keep the ``MAX_CACHE_FILES`` newest cache files (one per distinct ``sys.path``, and
    ``python -c`` puts the working directory on it)."""
    files = sorted(folder.glob("entry-points-*.json"), key=lambda f: f.stat().st_mtime_ns)
    for old in files[:-MAX_CACHE_FILES]:
        old.unlink(missing_ok=True)


def scan(paths: Sequence[str] | None = None, *, use_cache: bool = True) -> Scan:
    """The entry points of group ``opmarket`` of the distributions on ``paths`` (default
    ``sys.path``), from the cache when nothing changed since it was written."""
    dirs = _search_path(paths)
    file = _cache_file(dirs)
    if use_cache:
        cached = _load_cache(file, dirs)
        if cached is not None:
            return cached
    started = time.time_ns()
    before = _stamps(dirs)
    records, count, watched = _scan_dirs(dirs)
    result = Scan(tuple(records), count, from_cache=False)
    stamps = _stamps([*dirs, *watched])
    racy = any(isinstance(t, int) and t >= started - RACY_NS for _, t in stamps)
    changed = stamps[: len(before)] != before  # something moved while we looked
    if use_cache and not racy and not changed:
        _store_cache(file, dirs, result, stamps)
    return result
