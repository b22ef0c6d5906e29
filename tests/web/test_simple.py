"""The simple repository API as clients read it: negotiation, PEP 691 JSON with PEP 700
fields, PEP 503 HTML with PEP 658/714 metadata and PEP 592 yanking, Range downloads."""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request
import zipfile
from io import BytesIO
from typing import Any

import pytest

from .conftest import Market, Wheels

JSON = "application/vnd.pypi.simple.v1+json"
HTML_V1 = "application/vnd.pypi.simple.v1+html"
PIP_ACCEPT = f"{JSON}, {HTML_V1}; q=0.1, text/html; q=0.01"


@pytest.mark.slow
@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (PIP_ACCEPT, JSON),
        (f"{JSON};q=0.2, {HTML_V1};q=0.9", HTML_V1),
        ("text/html,application/xhtml+xml,*/*;q=0.8", "text/html"),
        ("", "text/html"),
        ("application/vnd.pypi.simple.latest+json", JSON),
    ],
)
def test_accept_negotiation_with_q_values(uploaded: Market, accept: str, expected: str) -> None:
    status, headers, _ = uploaded.get("/simple/opm-double/", {"Accept": accept} if accept else {})
    assert status == 200
    assert headers["content-type"].split(";")[0] == expected
    assert headers["vary"] == "Accept"


def test_conditional_requests_answer_304(uploaded: Market) -> None:
    _, headers, _ = uploaded.get("/simple/opm-double/", {"Accept": JSON})
    _, html_headers, _ = uploaded.get("/simple/opm-double/")
    assert headers["etag"] != html_headers["etag"]
    status, again, body = uploaded.get(
        "/simple/opm-double/", {"Accept": JSON, "If-None-Match": headers["etag"]}
    )
    assert (status, body, again["etag"]) == (304, b"", headers["etag"])
    status, _, body = uploaded.get("/simple/opm-double/", {"If-None-Match": headers["etag"]})
    assert status == 200 and body  # the HTML page has another tag


def test_nothing_acceptable_is_406_in_the_error_shape(uploaded: Market) -> None:
    status, _, body = uploaded.get("/simple/opm-double/", {"Accept": "image/png"})
    assert status == 406
    assert json.loads(body)["error"]["code"] == "not-acceptable"


def test_json_project_page(uploaded: Market, wheels: Wheels) -> None:
    status, _, body = uploaded.get("/simple/OPM_Double/", {"Accept": JSON})  # not normalized
    assert status == 200
    page = json.loads(body)
    assert page["meta"]["api-version"] == "1.1"
    assert page["name"] == "opm-double"
    assert "1.0.0" in page["versions"]
    (entry,) = [f for f in page["files"] if f["filename"] == wheels.double_1_0.name]
    data = wheels.double_1_0.read_bytes()
    assert entry["hashes"] == {"sha256": hashlib.sha256(data).hexdigest()}
    assert entry["size"] == len(data)
    assert entry["requires-python"] == ">=3.11"
    assert entry["upload-time"].endswith("Z")
    assert entry["yanked"] is False
    assert "dist-info-metadata" not in entry  # PEP 714: old pips choke on it in JSON
    # PEP 658: the metadata file sits beside the file, and its hash is advertised.
    status, _, metadata = uploaded.get(entry["url"] + ".metadata")
    assert status == 200
    with zipfile.ZipFile(BytesIO(data)) as zf:
        assert metadata == zf.read("opm_double-1.0.0.dist-info/METADATA")
    assert entry["core-metadata"] == {"sha256": hashlib.sha256(metadata).hexdigest()}


def test_html_project_page_and_index(uploaded: Market, wheels: Wheels) -> None:
    _, _headers, body = uploaded.get("/simple/opm-double/")
    page = body.decode()
    assert '<meta name="pypi:repository-version" content="1.1">' in page
    sha = hashlib.sha256(wheels.double_1_0.read_bytes()).hexdigest()
    assert f"#sha256={sha}" in page
    assert 'data-requires-python="&gt;=3.11"' in page
    assert 'data-core-metadata="sha256=' in page and 'data-dist-info-metadata="sha256=' in page
    index = uploaded.get("/simple/", {"Accept": JSON})
    assert {"name": "opm-double"} in json.loads(index[2])["projects"]


def test_range_downloads(uploaded: Market, wheels: Wheels) -> None:
    data = wheels.double_1_0.read_bytes()
    url = json.loads(uploaded.get("/simple/opm-double/", {"Accept": JSON})[2])["files"][0]["url"]
    status, headers, whole = uploaded.get(url)
    assert status == 200 and whole == data and headers["accept-ranges"] == "bytes"
    etag = headers["etag"]
    status, headers, part = uploaded.get(url, {"Range": "bytes=10-19"})
    assert status == 206 and part == data[10:20]
    assert headers["content-range"] == f"bytes 10-19/{len(data)}"
    status, _, tail = uploaded.get(url, {"Range": "bytes=-22"})  # where a zip's directory ends
    assert status == 206 and tail == data[-22:]
    status, headers, _ = uploaded.get(url, {"Range": f"bytes={len(data)}-"})
    assert status == 416 and headers["content-range"] == f"bytes */{len(data)}"
    head = urllib.request.Request(uploaded.url + url, method="HEAD")
    with urllib.request.urlopen(head, timeout=30) as r:
        assert r.status == 200 and r.read() == b""
        assert r.headers["content-length"] == str(len(data))
    # If-Range: the range only while the file is the one the client has (its ETag).
    status, _, part = uploaded.get(url, {"Range": "bytes=0-3", "If-Range": etag})
    assert (status, part) == (206, data[:4])
    status, _, body = uploaded.get(url, {"Range": "bytes=0-3", "If-Range": '"other"'})
    assert (status, body) == (200, data)
    # RFC 9110: a Range that cannot be parsed is ignored, not an error.
    status, _, body = uploaded.get(url, {"Range": "bytes=5-3"})
    assert (status, body) == (200, data)


def project_json(market: Market, *, until: Any, timeout: float = 10) -> dict[str, Any]:
    """The JSON project page once ``until(page)`` holds: a change made by another process
    (the CLI) shows within the server's cache time (1 s)."""
    deadline = time.monotonic() + timeout
    while True:
        page: dict[str, Any] = json.loads(market.get("/simple/opm-double/", {"Accept": JSON})[2])
        if until(page) or time.monotonic() > deadline:
            return page
        time.sleep(0.1)


@pytest.mark.slow
def test_yanking_with_a_reason(uploaded: Market, wheels: Wheels) -> None:
    name = wheels.double_1_0.name

    def yanked(page: dict[str, Any]) -> object:
        return next(f["yanked"] for f in page["files"] if f["filename"] == name)

    done = uploaded.cli("yank", "opm-double", "1.0.0", "--reason", "broken <build>")
    assert done.returncode == 0, done.stderr
    try:
        page = project_json(uploaded, until=lambda p: yanked(p) is not False)
        assert yanked(page) == "broken <build>"
        html = uploaded.get("/simple/opm-double/")[2].decode()
        assert 'data-yanked="broken &lt;build&gt;"' in html
    finally:
        assert uploaded.cli("yank", "opm-double", "1.0.0", "--undo").returncode == 0
    page = project_json(uploaded, until=lambda p: yanked(p) is False)
    assert all(f["yanked"] is False for f in page["files"])


def test_unknown_project_is_404_json(uploaded: Market) -> None:
    status, _headers, body = uploaded.get("/simple/no-such-project/")
    assert status == 404
    assert json.loads(body)["error"]["status"] == 404


@pytest.mark.slow
def test_a_release_is_found_however_its_version_is_spelled(
    uploaded: Market, wheels: Wheels
) -> None:
    name = wheels.double_1_0.name  # version 1.0.0; PEP 440 says 1.0 is the same release

    def yanked(page: dict[str, Any]) -> object:
        return next(f["yanked"] for f in page["files"] if f["filename"] == name)

    done = uploaded.cli("yank", "opm-double", "1.0", "--reason", "spelled short")
    assert done.returncode == 0, done.stderr
    try:
        page = project_json(uploaded, until=lambda p: yanked(p) is not False)
        assert yanked(page) == "spelled short"
    finally:
        assert uploaded.cli("yank", "opm-double", "1.0", "--undo").returncode == 0
    assert yanked(project_json(uploaded, until=lambda p: yanked(p) is False)) is False
