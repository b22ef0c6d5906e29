"""The simple pages' answers byte for byte, header by header, as pip and uv read them:
served from memory in front of the routes (a page kept) or by the routes (a request with a
query string always goes to them), they are the same bytes, with the headers they always
had: Vary, Cache-Control, an ETag of the body, Content-Length, Content-Type; a 304 for a
current copy; and a name that is not listed answers the same error each time."""

from __future__ import annotations

import hashlib
import http.client
import json
from urllib.parse import urlsplit

import pytest

from .conftest import Market

JSON = "application/vnd.pypi.simple.v1+json"
HTML_V1 = "application/vnd.pypi.simple.v1+html"
PIP_ACCEPT = f"{JSON}, {HTML_V1}; q=0.1, text/html; q=0.01"

Answer = tuple[int, list[tuple[str, str]], bytes]


def _raw(market: Market, path: str, headers: dict[str, str] | None = None) -> Answer:
    """Status, headers in the order sent (less uvicorn's Date and Server) and body."""
    where = urlsplit(market.url)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        sent = [(k.lower(), v) for k, v in response.getheaders()]
        return response.status, [h for h in sent if h[0] not in ("date", "server")], body
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("accept", "content_type"),
    [
        ("", "text/html; charset=utf-8"),
        ("text/html", "text/html; charset=utf-8"),
        (HTML_V1, HTML_V1),
        (PIP_ACCEPT, JSON),
    ],
)
@pytest.mark.parametrize("path", ["/simple/opm-double/", "/simple/"])
def test_kept_and_rendered_answers_are_the_same_bytes(
    uploaded: Market, path: str, accept: str, content_type: str
) -> None:
    asked = {"Accept": accept} if accept else {}
    first = _raw(uploaded, path, asked)
    kept = _raw(uploaded, path, asked)  # served from memory
    routed = _raw(uploaded, path + "?from=route", asked)  # through the route
    assert first == kept == routed
    status, headers, body = kept
    etag = f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'
    assert status == 200 and body
    assert headers == [
        ("vary", "Accept"),
        ("cache-control", "max-age=60"),
        ("etag", etag),
        ("content-length", str(len(body))),
        ("content-type", content_type),
    ]
    current = {**asked, "If-None-Match": etag}
    not_modified = _raw(uploaded, path, current)
    assert not_modified == _raw(uploaded, path + "?from=route", current)
    assert not_modified == (
        304,
        [("vary", "Accept"), ("cache-control", "max-age=60"), ("etag", etag)],
        b"",
    )


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/simple/opm-never-uploaded/", "no project 'opm-never-uploaded'"),
        ("/simple/OPM_Never.Uploaded/", "no project 'opm-never-uploaded'"),
    ],
)
def test_a_name_not_listed_answers_the_same_error_each_time(
    uploaded: Market, path: str, message: str
) -> None:
    answers = [_raw(uploaded, path) for _ in range(3)] + [_raw(uploaded, path + "?x=1")]
    assert all(a == answers[0] for a in answers)
    status, headers, body = answers[0]
    assert status == 404 and ("content-type", "application/json") in headers
    assert json.loads(body) == {"error": {"status": 404, "code": "not-found", "message": message}}
