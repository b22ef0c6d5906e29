"""The simple pages' answers byte for byte, header by header, as pip and uv read them:
served from memory in front of the routes (a page kept) or by the routes (a request with a
query string always goes to them), they are the same bytes, with the headers they always
had: Vary, Cache-Control, an ETag of the body, Content-Length, Content-Type; a 304 for a
current copy; and a name that is not listed answers the same error each time."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import http.client
import json
from collections.abc import Iterator
from pathlib import Path
from types import FrameType, ModuleType, TracebackType
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI
from sqlalchemy import String
from starlette.routing import BaseRoute, Match
from starlette.types import Message

from opmarket.web._app import create_app
from opmarket.web._settings import Settings
from opmarket.web.catalog._models import File, FileStatus, Project, Release, User
from opmarket.web.routes._cache import NAME_MOST

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


@pytest.fixture
def app(tmp_path: Path) -> Iterator[FastAPI]:
    """The marketplace in this process (its page cache can be looked at), no validation
    worker, on a catalog of one project with one validated file, ``opm-kept``; the change
    log is read at the first request and not again during a test."""
    served = create_app(
        Settings(data_dir=tmp_path / "market", validation_workers=0, index_cache_ttl_s=3600)
    )
    db = served.state.opmarket.db
    with db.transaction() as session:
        session.add(User(name="u"))
        session.flush()
        project = Project(name="opm-kept", normalized="opm-kept", owner_id=1, serial=1)
        session.add(project)
        session.flush()
        release = Release(project_id=project.id, version="1.0")
        session.add(release)
        session.flush()
        session.add(
            File(
                release_id=release.id,
                filename="opm_kept-1.0-py3-none-any.whl",
                sha256="0" * 64,
                size=1,
                metadata_sha256="1" * 64,
                uploader_id=1,
                status=FileStatus.VALIDATED,
            )
        )
    yield served
    db.dispose()


async def _call(app: FastAPI, path: str, accept: str = "") -> Answer:
    """A GET through the whole app (its middleware, then its routes): status, headers as
    sent, body."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    where, _, query = path.partition("?")
    headers = [(b"host", b"127.0.0.1")] + ([(b"accept", accept.encode())] if accept else [])
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": where,
        "raw_path": where.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 80),
    }
    await app(scope, receive, send)
    start, body = sent[0], b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], [(k.decode(), v.decode()) for k, v in start["headers"]], body


def _holds(kept: object, *kinds: type) -> bool:
    """Whether anything ``kept`` refers to, directly or not, is one of ``kinds`` (classes
    and modules are not followed: they are not what it keeps)."""
    seen: set[int] = set()
    todo = [kept]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, ModuleType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, kinds):
            return True
        todo.extend(gc.get_referents(obj))
    return False


def test_a_name_not_listed_is_kept_as_plain_data_and_a_made_up_long_name_not_at_all(
    app: FastAPI,
) -> None:
    """What is kept for a "not found" is its status, code, message and headers: never the
    exception raised for it, whose traceback holds every frame of the request (its rows,
    the request and its scope). A name longer than any project's is answered each time and
    never kept: made-up names must not grow the memory of the process."""
    long_name = "opm-" + "x" * 5000

    async def asked() -> list[Answer]:
        paths = ["/simple/opm-none/"] * 3 + [f"/simple/{long_name}/"] * 3
        return [await _call(app, path) for path in paths]

    answers = asyncio.run(asked())
    pages = app.state.opmarket.pages
    kept = pages.get_missing("opm-none")
    assert kept is not None
    assert not _holds(kept, BaseException, TracebackType, FrameType)
    assert answers[0] == answers[1] == answers[2] and answers[0][0] == 404
    assert answers[3] == answers[4] == answers[5]
    status, _, body = answers[3]
    assert status == 404 and long_name in json.loads(body)["error"]["message"]
    assert len(long_name) > NAME_MOST and pages.get_missing(long_name) is None
    column = Project.__table__.c.normalized.type  # the limit follows the catalog's column
    assert isinstance(column, String) and column.length == NAME_MOST


def _serves_simple(route: BaseRoute) -> bool:
    """Whether ``route`` answers a GET of /simple/ or of a project's page."""
    for path in ("/simple/", "/simple/opm-kept/"):
        scope = {"type": "http", "method": "GET", "path": path, "root_path": ""}
        if route.matches(scope)[0] != Match.NONE:
            return True
    return False


def test_kept_answers_are_sent_in_front_of_the_routes(app: FastAPI) -> None:
    """A kept page and a kept "not found" are answered by the middleware, without the
    routes: once they are kept the /simple/ routes are taken out of the app, and the same
    bytes still come back; a page not kept then finds no route."""
    asked = [
        (path, accept)
        for path in ("/simple/", "/simple/opm-kept/", "/simple/OPM_Kept/", "/simple/opm-none/")
        for accept in ("", PIP_ACCEPT)
    ]

    async def answers() -> tuple[list[Answer], list[Answer], Answer, Answer]:
        rendered = [await _call(app, path, accept) for path, accept in asked]
        app.router.routes[:] = [r for r in app.router.routes if not _serves_simple(r)]
        kept = [await _call(app, path, accept) for path, accept in asked]
        return (
            rendered,
            kept,
            await _call(app, "/simple/opm-other/"),
            await _call(app, "/simple/opm-kept/?from=route"),
        )

    rendered, kept, not_kept, routed = asyncio.run(answers())
    assert kept == rendered
    assert [status for status, _, _ in kept] == [200] * 6 + [404] * 2
    assert b"opm_kept-1.0-py3-none-any.whl" in kept[2][2]
    assert json.loads(kept[-1][2])["error"]["message"] == "no project 'opm-none'"
    for status, _, body in (not_kept, routed):  # no route left to render them
        assert status == 404 and json.loads(body)["error"]["message"] == "Not Found"
