"""Op-sets from a package index: ``name==version`` fetched through the simple repository API
(PEP 691 JSON, or PEP 503 HTML), checked against the index's sha256, then read as a wheel.
What may be read, how much and for how long is opmarket._fetch's rule, as for every client."""

from __future__ import annotations

import json
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from opmarket._fetch import Fetcher, FetchError, join_link, printable
from opmarket.compat._dists import opset_from_wheel
from opmarket.compat._sources import PINNED
from opmarket.sdk import DocumentError, OpSet

__all__ = ["opset_from_index"]


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


def _index_files(
    fetcher: Fetcher, index_url: str, project: str, label: str
) -> list[tuple[str, str, str]]:
    """(filename, absolute url, sha256 or "") for every file of ``project`` on the index."""
    url = index_url.rstrip("/") + f"/{project}/"
    try:
        page = fetcher.get(url, accept="application/vnd.pypi.simple.v1+json, text/html;q=0.1")
        if "json" in page.content_type:
            return _json_files(page.url, page.body, label)
        parser = _Links()
        parser.feed(page.body.decode("utf-8", errors="replace"))
        out: list[tuple[str, str, str]] = []
        for filename, href in parser.links:
            base, _, fragment = join_link(page.url, href).partition("#")
            digest = fragment[len("sha256=") :] if fragment.startswith("sha256=") else ""
            out.append((filename or base.rsplit("/", 1)[-1], base, digest))
        return out
    except FetchError as exc:
        base = index_url.rstrip("/")
        hint = ""
        if exc.status == 404 and not base.endswith("/simple"):  # the index's site, not its API
            hint = f" (is --index-url the simple API? it mostly ends in /simple/: {base}/simple/)"
        raise DocumentError(label, f"{exc}{hint}") from None


def _json_files(page: str, body: bytes | bytearray, label: str) -> list[tuple[str, str, str]]:
    try:
        data = json.loads(body)
        out = []
        for f in data["files"]:
            hashes = f.get("hashes") or {}
            digest = hashes.get("sha256", "") if isinstance(hashes, dict) else ""
            if not (isinstance(f["filename"], str) and isinstance(digest, str)):
                raise TypeError("a filename or sha256 that is not a string")
            out.append((f["filename"], join_link(page, str(f["url"])), digest))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        # Not the simple API's JSON (PEP 691): a proxy's error page, a truncated body.
        raise DocumentError(
            label, f"{page}: unreadable index response ({type(exc).__name__}: {exc})"
        ) from None
    return out


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
    for filename, url, digest in _index_files(fetcher, index_url, project, requirement):
        try:
            name, version, *_ = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            continue
        if name == project and version == wanted:
            candidates.append((filename, url, digest))
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
