"""A project's files on a package index: the one client of the simple repository API in
opmarket (``opmarket install``, ``compat-check --index-url``), reading through
:mod:`opmarket._fetch` (its deadline, size caps and link rules).

The project page is asked for as PEP 691 JSON, else read as PEP 503 HTML; each file keeps its
sha256 (PEP 503's URL fragment, PEP 691's ``hashes``), whether PEP 658/714 metadata is served
beside it and whether it is yanked (PEP 592). Errors are :class:`~opmarket._fetch.FetchError`
(the page could not be read) or :class:`IndexPageError` (it is no project page).
"""

from __future__ import annotations

import html.parser
import json
import urllib.parse
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from opmarket._fetch import Fetcher, join_link, printable
from opmarket.sdk._errors import OpmarketError

__all__ = ["JSON_TYPE", "IndexFile", "IndexPageError", "project_files"]

#: The media type of PEP 691's project pages.
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_NEEDED = ("filename", "url")  # what a PEP 691 file entry must have, as strings


class IndexPageError(OpmarketError, ValueError):
    """What the index answered is not a project page of the simple API (a proxy's error
    page, a truncated body): one line naming the page and what is wrong."""


@dataclass(frozen=True, slots=True)
class IndexFile:
    """One file of a project page: name, absolute URL (no fragment), its sha256 when the
    index gives one, whether PEP 658 metadata is served beside it (at URL + ``.metadata``)
    and whether it is yanked."""

    filename: str
    url: str
    sha256: str = ""
    metadata: bool = False
    yanked: bool = False


def project_files(index_url: str, name: str, fetcher: Fetcher) -> list[IndexFile]:
    """The files the index at ``index_url`` lists for project ``name``."""
    page = urllib.parse.urljoin(index_url.rstrip("/") + "/", canonicalize_name(name) + "/")
    fetched = fetcher.get(page, accept=f"{JSON_TYPE}, text/html;q=0.1")
    if fetched.content_type == JSON_TYPE:
        return _json_files(fetched.url, fetched.body)
    return _html_files(fetched.url, fetched.body)


def _json_files(page: str, body: bytes | bytearray) -> list[IndexFile]:
    def refused(why: str) -> IndexPageError:
        return IndexPageError(f"{printable(page)}: not a PEP 691 project page: {why}")

    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as exc:  # RecursionError: [[[[...]]]] nested deep
        raise refused(type(exc).__name__) from None
    entries = data.get("files") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise refused("no list of 'files'")
    files: list[IndexFile] = []
    for i, f in enumerate(entries):
        if not isinstance(f, dict) or not all(isinstance(f.get(k), str) for k in _NEEDED):
            raise refused(f"files[{i}] is not an object with 'filename' and 'url' strings")
        hashes = f.get("hashes")
        digest = hashes.get("sha256", "") if isinstance(hashes, dict) else ""
        if not isinstance(digest, str):
            raise refused(f"files[{i}]: its sha256 is not a string")
        meta = f.get("core-metadata", f.get("dist-info-metadata", False))
        url = urllib.parse.urldefrag(join_link(page, f["url"]))[0]
        files.append(IndexFile(f["filename"], url, digest, bool(meta), bool(f.get("yanked"))))
    return files


class _Links(html.parser.HTMLParser):
    """The anchors of a PEP 503 page: href and the PEP 658/714/592 attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.links.append(dict(attrs))


def _html_files(page: str, body: bytes | bytearray) -> list[IndexFile]:
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    files: list[IndexFile] = []
    for attrs in parser.links:
        # The name is the URL's last part (what a download gets), as PEP 503 says the text is.
        url, fragment = urllib.parse.urldefrag(join_link(page, attrs.get("href") or ""))
        digest = fragment.removeprefix("sha256=") if fragment.startswith("sha256=") else ""
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        meta = attrs.get("data-core-metadata") or attrs.get("data-dist-info-metadata")
        files.append(
            IndexFile(filename, url, digest, meta not in (None, "false"), "data-yanked" in attrs)
        )
    return files
