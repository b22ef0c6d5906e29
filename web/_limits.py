"""HTTP limits, so that one client cannot stall the others or fill the server's memory.

Two layers, because an ASGI app sees a request only once its head has been parsed:

- :class:`LimitedHttpToolsProtocol`, uvicorn's httptools protocol with limits on the request
  head: its size in bytes (request line and headers; httptools itself has none and buffers
  a 100 MiB header whole), its number of headers, and how long it may take to arrive. A
  head over a limit is answered 431 (408 when too slow) and the connection closed, before
  the parser has buffered more than the limit.
- :class:`BodyLimits`, an ASGI middleware: the body's size per route (uploads may be large,
  nothing else needs a body), how long the server waits for the next part of a body, and
  how long the whole body may take.

:class:`UploadSlots` caps the uploads a process receives and checks at once, in all and per
token, so that slow uploads cannot take every thread, file handle or scratch byte.

The limits are settings (``max_header_bytes``, ``max_headers``, ``header_timeout_s``,
``max_body_bytes``, ``body_timeout_s``, ``body_deadline_s``, ``max_upload_bytes``,
``max_uploads``, ``max_uploads_per_token``), set once per process by :func:`configure`.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from opmarket.web._errors import HTTPError, error_response

__all__ = ["BodyLimits", "HeadLimits", "LimitedHttpToolsProtocol", "UploadSlots", "configure"]

#: The form fields around an upload's file: what /legacy/ may add to max_upload_bytes.
FORM_OVERHEAD = 1024 * 1024
UPLOAD_PATHS = ("/legacy/", "/legacy")


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """Limits on a request's head: bytes, headers, seconds."""

    max_bytes: int = 64 * 1024
    max_headers: int = 100
    timeout_s: float = 10.0


class _Refused(Exception):  # never leaves this module: it stops the parser
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's fast protocol (httptools), refusing request heads over :class:`HeadLimits`."""

    limits: ClassVar[HeadLimits] = HeadLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_bytes = 0
        self._header_count = 0
        self._in_head = True
        # When the head now arriving began (None between requests), and one timer per
        # connection that checks it: cheaper than a timer per request on keep-alive.
        self._head_since: float | None = None
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_since = self.loop.time()  # a client that connects and sends nothing
        self._check_head_later(self.limits.timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """Feed the parser; while a head is arriving, no more than the limit of it."""
        while data:
            if not self._in_head:
                self._feed(data)
                return
            if self._head_since is None:
                self._head_since = self.loop.time()
            room = self.limits.max_bytes - self._head_bytes
            if len(data) <= room:
                self._head_bytes += len(data)
                self._feed(data)
                return
            # More than the head may hold: feed what fits; the rest only if the head ended.
            self._head_bytes += room
            part, data = data[:room], data[room:]
            self._feed(part)
            if self.transport.is_closing():
                return
            if self._in_head:
                self._refuse(
                    _Refused(
                        431,
                        "header-too-large",
                        "the request line and headers "
                        f"are larger than {self.limits.max_bytes} bytes",
                    )
                )
                return

    def _feed(self, data: bytes) -> None:
        # uvicorn's data_received, except that a refusal raised by a callback is answered.
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            if isinstance(exc.__context__, _Refused):
                self._refuse(exc.__context__)
                return
            msg = "Invalid HTTP request received."
            self.logger.warning(msg)
            self.send_400_response(msg)

    def on_message_begin(self) -> None:
        """A new request: its headers are counted from none (its bytes already are)."""
        super().on_message_begin()
        self._in_head, self._header_count = True, 0

    def on_header(self, name: bytes, value: bytes) -> None:
        """One more header, refused past ``max_headers``."""
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            raise _Refused(
                431,
                "too-many-headers",
                f"the request has more than {self.limits.max_headers} headers",
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        """The head is in: no more head limits until the next request."""
        self._in_head, self._head_since = False, None
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        """The body is in; what comes next is the head of another request."""
        self._in_head, self._head_bytes, self._header_count = True, 0, 0
        super().on_message_complete()

    def _check_head_later(self, delay: float) -> None:
        self._head_timer = self.loop.call_later(delay, self._check_head)

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _check_head(self) -> None:
        self._head_timer = None
        if self.transport.is_closing():
            return
        since, timeout = self._head_since, self.limits.timeout_s
        busy = self.cycle is not None and not self.cycle.response_complete
        if since is None or busy or not self._in_head:
            self._check_head_later(timeout)  # between requests: check again later
            return
        late = self.loop.time() - since
        if late < timeout:
            self._check_head_later(timeout - late)
            return
        self._refuse(
            _Refused(
                408,
                "header-timeout",
                f"the request head did not arrive within {self.limits.timeout_s:g} s",
            )
        )

    def _refuse(self, refused: _Refused) -> None:
        """Answer with the error (JSON, as every error) and close the connection."""
        self._stop_head_timer()
        body = json.dumps(
            {"error": {"status": refused.status, "code": refused.code, "message": refused.message}}
        ).encode()
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[refused.status],
                    b"content-type: application/json\r\n",
                    b"content-length: ",
                    str(len(body)).encode(),
                    b"\r\n",
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()


class BodyLimits:
    """ASGI middleware: a URL with a NUL character (``%00``) is 400, as no name, version or
    filter has one and PostgreSQL refuses it in a string; a request body over its route's
    limit is 413, a body whose next part does not come within ``timeout_s``, or that is not
    all in within ``deadline_s`` of its first wait, is 408."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        max_upload_bytes: int,
        timeout_s: float,
        deadline_s: float = float("inf"),
    ) -> None:
        self.app = app
        self.max_bytes, self.max_upload_bytes = max_bytes, max_upload_bytes + FORM_OVERHEAD
        self.timeout_s, self.deadline_s = timeout_s, deadline_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and ("\0" in scope["path"] or b"%00" in scope["query_string"]):
            refusal = error_response(400, "bad-request", "the URL has a NUL character (%00)")
            await refusal(scope, receive, send)
            return
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD"):
            await self.app(scope, receive, send)  # the index's hot path: nothing to add
            return
        limit = self.max_upload_bytes if scope["path"] in UPLOAD_PATHS else self.max_bytes
        declared = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
        if declared.isdigit() and int(declared) > limit:
            refusal = error_response(
                413,
                "too-large",
                f"the request body is {int(declared)} bytes, more than the limit of {limit} here",
            )
            await refusal(scope, receive, send)
            return
        body = _LimitedBody(receive, limit, self.timeout_s, self.deadline_s)
        await self.app(scope, body, send)


class _LimitedBody:
    """``receive`` for an app, counting the body and timing each part of it and the whole."""

    def __init__(self, receive: Receive, limit: int, timeout_s: float, deadline_s: float) -> None:
        self.receive, self.limit, self.timeout_s = receive, limit, timeout_s
        self.deadline_s = deadline_s
        self.ends: float | None = None  # the loop's time when the whole body must be in
        self.received = 0
        self.done = False

    async def __call__(self) -> Message:
        if self.done:  # after the body: waiting for a disconnect may take as long as it takes
            return await self.receive()
        now = asyncio.get_running_loop().time()
        if self.ends is None:
            self.ends = now + self.deadline_s
        left = self.ends - now
        try:
            message = await asyncio.wait_for(self.receive(), min(self.timeout_s, max(left, 0)))
        except TimeoutError:
            if left <= self.timeout_s:
                raise HTTPError(
                    408,
                    "body-deadline",
                    f"the request body did not arrive within {self.deadline_s:g} s in all",
                ) from None
            raise HTTPError(
                408,
                "body-timeout",
                f"the next part of the request body did not arrive within {self.timeout_s:g} s",
            ) from None
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            self.done = not message.get("more_body", False)
            if self.received > self.limit:
                raise HTTPError(
                    413,
                    "too-large",
                    f"the request body is larger than the limit of {self.limit} bytes here",
                )
        else:
            self.done = True
        return message


#: What a refused upload is told to wait before it tries again, in seconds.
RETRY_AFTER_S = 10


class UploadSlots:
    """The uploads this process is receiving and checking, counted in all and per token;
    one over either cap is refused before its body is read (503 in all, 429 for one token,
    both with ``Retry-After``)."""

    def __init__(self, total: int, per_token: int) -> None:
        self.total, self.per_token = total, per_token
        self._in_all = 0
        self._by_token: dict[int, int] = {}
        self._lock = threading.Lock()

    @contextmanager
    def slot(self, token: int) -> Iterator[None]:
        """Hold one slot for an upload with ``token`` (its id) for the block."""
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        with self._lock:
            if self._by_token.get(token, 0) >= self.per_token:
                raise HTTPError(
                    429,
                    "too-many-uploads",
                    f"this token has {self.per_token} uploads in progress here, the most "
                    f"allowed at once; upload again in {RETRY_AFTER_S} s",
                    retry,
                )
            if self._in_all >= self.total:
                raise HTTPError(
                    503,
                    "busy",
                    f"the index is receiving {self.total} uploads, the most it takes at once; "
                    f"upload again in {RETRY_AFTER_S} s",
                    retry,
                )
            self._in_all += 1
            self._by_token[token] = self._by_token.get(token, 0) + 1
        try:
            yield
        finally:
            with self._lock:
                self._in_all -= 1
                left = self._by_token.pop(token) - 1
                if left:
                    self._by_token[token] = left


def configure(limits: HeadLimits) -> None:
    """Set this process's head limits (the protocol class holds them): the server's
    ``Settings.head_limits()``."""
    LimitedHttpToolsProtocol.limits = limits
