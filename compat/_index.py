"""Op-sets from a package index: ``name==version`` fetched through the simple repository API
(opmarket._index, the one client of that API), checked against the index's sha256, then read
as a wheel. What may be read, how much and for how long is opmarket._fetch's rule."""

from __future__ import annotations

import tempfile
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from opmarket._fetch import Fetcher, FetchError, printable
from opmarket._index import IndexFile, IndexPageError, project_files
from opmarket.compat._dists import opset_from_wheel
from opmarket.compat._sources import PINNED
from opmarket.sdk import DocumentError, OpSet

__all__ = ["opset_from_index"]


def _index_files(fetcher: Fetcher, index_url: str, project: str, label: str) -> list[IndexFile]:
    """Every file of ``project`` on the index (opmarket._index), errors as DocumentError."""
    try:
        return project_files(index_url, project, fetcher)
    except IndexPageError as exc:
        raise DocumentError(label, str(exc)) from None
    except FetchError as exc:
        base = index_url.rstrip("/")
        hint = ""
        if exc.status == 404 and not base.endswith("/simple"):  # the index's site, not its API
            hint = f" (is --index-url the simple API? it mostly ends in /simple/: {base}/simple/)"
        raise DocumentError(label, f"{exc}{hint}") from None


def opset_from_index(requirement: str, index_url: str, *, fetcher: Fetcher | None = None) -> OpSet:
    """Fetch the wheel of ``name==version`` from a simple-API index and read its op-set.

    ``fetcher`` carries the deadline of every request of one command (default: a new one);
    the wheel is written to a temporary file as it arrives, up to the cap on files.
    """
    m = PINNED.match(requirement)
    if m is None:
        raise DocumentError(requirement, "expected NAME==VERSION")
    project = canonicalize_name(m.group(1))
    try:
        wanted = Version(m.group(2))
    except InvalidVersion:
        raise DocumentError(requirement, f"{m.group(2)!r} is not a valid version") from None
    if fetcher is None:
        fetcher = new_fetcher()
    candidates = []
    for file in _index_files(fetcher, index_url, project, requirement):
        try:
            name, version, *_ = parse_wheel_filename(file.filename)
        except InvalidWheelFilename:
            continue
        if name == project and version == wanted:
            candidates.append((file.filename, file.url, file.sha256))
    if not candidates:
        raise DocumentError(requirement, f"no wheel of {project} {wanted} on {index_url}")
    filename, url, digest = sorted(candidates, key=lambda c: "none-any" not in c[0])[0]
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp, filename)
        try:
            with target.open("wb") as out:
                got = fetcher.download(url, out)
        except FetchError as exc:
            raise DocumentError(requirement, f"download failed: {exc}") from None
        if digest and got != digest:
            raise DocumentError(
                requirement, f"{printable(filename)}: sha256 does not match the index"
            )
        return opset_from_wheel(target)


def new_fetcher() -> Fetcher:
    """A Fetcher for one command (its deadline starts now); DocumentError naming
    ``$OPMARKET_INDEX_TIMEOUT`` when that is not a number of seconds."""
    try:
        return Fetcher()
    except FetchError as exc:
        raise DocumentError(exc.url, exc.reason) from None
