"""Op-sets from a package index: ``name==version`` fetched through the simple repository API
(PEP 691 JSON, or PEP 503 HTML), checked against the index's sha256, then read as a wheel."""

from __future__ import annotations

import hashlib
import json
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

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
        exc.close()  # its response: left open, it is a ResourceWarning when collected
        base = index_url.rstrip("/")
        hint = ""
        if exc.code == 404 and not base.endswith("/simple"):  # the index's site, not its API
            hint = f" (is --index-url the simple API? it mostly ends in /simple/: {base}/simple/)"
        raise DocumentError(label, f"{url}: HTTP {exc.code} {exc.reason}{hint}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise DocumentError(label, f"{url}: cannot connect ({exc})") from None
    out: list[tuple[str, str, str]] = []
    if "json" in ctype:
        try:
            data = json.loads(body)
            for f in data.get("files", []):
                out.append(
                    (
                        str(f["filename"]),
                        urllib.parse.urljoin(url, str(f["url"])),
                        str((f.get("hashes") or {}).get("sha256", "")),
                    )
                )
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # Not the simple API's JSON (PEP 691): a proxy's error page, a truncated body.
            raise DocumentError(
                label, f"{url}: unreadable index response ({type(exc).__name__}: {exc})"
            ) from None
        return out
    parser = _Links()
    parser.feed(body.decode("utf-8", errors="replace"))
    for filename, href in parser.links:
        full = urllib.parse.urljoin(url, href)
        base, _, fragment = full.partition("#")
        digest = fragment[len("sha256=") :] if fragment.startswith("sha256=") else ""
        out.append((filename or base.rsplit("/", 1)[-1], base, digest))
    return out


def opset_from_index(requirement: str, index_url: str) -> OpSet:
    """Fetch the wheel of ``name==version`` from a simple-API index and read its op-set."""
    m = PINNED.match(requirement)
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
