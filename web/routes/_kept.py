"""The simple pages' answers as they are kept in memory: each rendering of a page with its
ETag and the exact headers it is sent with, built once when the page is rendered, so a
request for a kept page costs no hashing and no header building, and the fast path in
front of the routes (:class:`~opmarket.web.routes._simple.KeptPages`) sends the very bytes
the route sends. A name that is not listed keeps its answer as plain data
(:class:`Refusal`), never the exception raised for it."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from starlette.responses import Response

from opmarket.web._errors import HTTPError, error_response
from opmarket.web.routes._negotiate import HTML

__all__ = ["Answer", "KeptResponse", "Refusal", "answer"]

Headers = list[tuple[bytes, bytes]]


@dataclass(frozen=True, slots=True)
class Answer:
    """One rendering of a page: its body, its ETag, and for each content type it is sent
    as, the raw headers of its 200 and of its 304 (the client's copy is current)."""

    body: bytes
    etag: str
    sent: dict[str, tuple[Headers, Headers]]

    def __len__(self) -> int:  # what it weighs in the page cache's budget
        return len(self.body)

    def response(self, content_type: str, if_none_match: str) -> KeptResponse:
        """The page as ``content_type`` (one it was built for), or 304 when
        ``if_none_match`` (the client's If-None-Match) names it."""
        full, bare = self.sent[content_type]
        if self.etag in if_none_match:
            return KeptResponse(304, bare, b"")
        return KeptResponse(200, full, self.body)


def answer(body: bytes, *content_types: str) -> Answer:
    """``body`` as the simple pages send it as each of ``content_types``: a strong ETag of
    the body (the HTML and JSON renderings differ), ``Vary: Accept`` and a minute's
    caching."""
    etag = f'"{hashlib.blake2b(body, digest_size=16).hexdigest()}"'
    headers = {"Vary": "Accept", "Cache-Control": "max-age=60", "ETag": etag}
    bare = Response(status_code=304, headers=headers).raw_headers
    sent = {}
    for content_type in content_types:
        media = f"{content_type}; charset=utf-8" if content_type == HTML else content_type
        sent[content_type] = (Response(body, media_type=media, headers=headers).raw_headers, bare)
    return Answer(body, etag, sent)


class KeptResponse(Response):
    """A response whose status, raw headers and body are given as they are sent (a copy of
    the headers: whoever adds one must not change the kept list)."""

    def __init__(self, status: int, headers: Headers, body: bytes) -> None:
        self.status_code = status
        self.raw_headers = list(headers)
        self.body = body
        self.background = None


@dataclass(frozen=True, slots=True)
class Refusal:
    """An error answer as kept (a name that is not listed: 404, or 307 to the upstream):
    its status, code, message and headers. Not the exception: one that was raised holds
    its traceback, and with it every frame of the request that raised it (its rows, the
    request and its scope); a new one is built for each answer."""

    status: int
    code: str
    message: str
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, error: HTTPError) -> Refusal:
        """The plain data of ``error`` (copies of its strings: nothing else is kept)."""
        return cls(error.status, error.code, error.message, tuple(error.headers.items()))

    def error(self) -> HTTPError:
        """A new exception for this answer, to raise."""
        return HTTPError(self.status, self.code, self.message, dict(self.headers))

    def response(self) -> Response:
        """The answer as the error handler sends it for :meth:`error`."""
        return error_response(self.status, self.code, self.message, dict(self.headers))
