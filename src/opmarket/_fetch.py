"""Reading from a package index, which may be hostile: the one HTTP client of opmarket's
index clients (``opmarket install``, ``opmarket status``, ``compat-check --index-url``).

Three rules, each a :class:`FetchError` with a one-line message when broken:

- Scheme: a page read over http(s) may link only to http(s) URLs (:func:`join_link`), and
  redirects go only to http(s) URLs; a ``file:`` index the user names may link to files.
- Size: a page (a project page, a METADATA file) is read up to :data:`PAGE_LIMIT` bytes,
  an answer in JSON (a PEP 691 page, an API answer) up to :data:`JSON_LIMIT`, a
  downloaded file up to :data:`FILE_LIMIT`, streamed to disk.
- Time: everything one :class:`Fetcher` reads shares one deadline (:data:`DEFAULT_TIMEOUT_S`,
  or ``$OPMARKET_INDEX_TIMEOUT``). A socket timeout alone bounds each wait for a byte, not
  a body sent a byte every few seconds: at the deadline a timer shuts the socket down. Each
  connect (to each address a host name has, on each redirect) waits only until the
  deadline, and none starts after it; looking the host name up (DNS) is outside it.

Its own module at the facade, not in a layer's package, so that every client (registry,
compat, the CLI) imports the same rules; :mod:`opmarket._index` reads project pages with it.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from opmarket.sdk._errors import OpmarketError

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "FILE_LIMIT",
    "JSON_LIMIT",
    "MAX_TIMEOUT_S",
    "PAGE_LIMIT",
    "TIMEOUT_ENV",
    "FetchError",
    "Fetcher",
    "Page",
    "join_link",
    "printable",
]

MiB = 1024 * 1024
#: The most bytes read of a page: a project page, an API answer, a METADATA file.
PAGE_LIMIT = 64 * MiB
#: The most bytes read of an answer in JSON (a PEP 691 project page, a package API answer):
#: parsed, a JSON document takes up to some 25 times its size (``[{},{},...]``).
JSON_LIMIT = 16 * MiB
#: The most bytes downloaded of a file (a wheel), written to disk as it arrives.
FILE_LIMIT = 1024 * MiB
#: Seconds all of one command's requests to an index may take together.
DEFAULT_TIMEOUT_S = 60.0
#: The environment variable that sets that deadline, in seconds.
TIMEOUT_ENV = "OPMARKET_INDEX_TIMEOUT"
#: The longest deadline it may set (11 days): timers and sockets take no longer wait.
MAX_TIMEOUT_S = 1e6

_WEB = ("http", "https")
_CHUNK = 64 * 1024


class FetchError(OpmarketError, OSError):
    """An index could not be read within the rules: refused link, too large, past the
    deadline, unreachable, an HTTP error (``status``). The message is one line."""

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"{printable(url)}: {reason}")
        self.url, self.reason, self.status = url, reason, status


@dataclass(frozen=True, slots=True)
class Page:
    """A page as read: its URL after redirects, its media type (lower case, no
    parameters; ``text/html`` for a local file unless it ends in ``.json``) and body."""

    url: str
    content_type: str
    body: bytes | bytearray


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on (controls, escapes, anything
    not printable) written as a Python escape: ``\\x1b]0;owned\\x07`` stays text."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def join_link(page: str, href: str) -> str:
    """The absolute URL of link ``href`` on ``page``; FetchError when it has spaces or
    control characters, or when an http(s) page points to another scheme (``file:``)."""
    if any(c.isspace() or not c.isprintable() for c in href):
        raise FetchError(page, f"a link is not a URL: {href!r}")
    try:
        url = urllib.parse.urljoin(page, href)
        scheme = urllib.parse.urlsplit(url).scheme.lower()
    except ValueError as exc:  # an invalid IPv6 host, say
        raise FetchError(page, f"a link is not a URL: {href!r}: {exc}") from None
    allowed = _WEB if urllib.parse.urlsplit(page).scheme.lower() in _WEB else (*_WEB, "file")
    if scheme not in allowed:
        raise FetchError(
            page,
            f"links to {url!r}: refused, a page read over http(s) may link only to http(s) URLs",
        )
    return url


def timeout_from_env() -> float:
    """``$OPMARKET_INDEX_TIMEOUT`` in seconds, else :data:`DEFAULT_TIMEOUT_S`."""
    value = os.environ.get(TIMEOUT_ENV, "").strip()
    if not value:
        return DEFAULT_TIMEOUT_S
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 < seconds <= MAX_TIMEOUT_S:
        raise FetchError(
            f"${TIMEOUT_ENV}",
            f"{value!r} is not a number of seconds above 0 and at most {MAX_TIMEOUT_S:.0f}",
        )
    return seconds


class Fetcher:
    """One command's reading from an index: every :meth:`get` and :meth:`download` shares
    one deadline, ``timeout_s`` seconds from now (default: :func:`timeout_from_env`).
    For one thread at a time."""

    def __init__(self, timeout_s: float | None = None) -> None:
        self.timeout_s = timeout_from_env() if timeout_s is None else timeout_s
        self._deadline = time.monotonic() + self.timeout_s
        self._watch: _Watch | None = None
        connection = _connection_class(http.client.HTTPConnection, self)
        secure = _connection_class(http.client.HTTPSConnection, self)
        # No FileHandler, FTPHandler or DataHandler: file: URLs are read below, under the
        # same size cap, and nothing else is fetched.
        self._opener = urllib.request.OpenerDirector()
        for handler in (
            urllib.request.ProxyHandler(),
            _HTTPHandler(connection),
            _HTTPSHandler(secure),
            urllib.request.HTTPDefaultErrorHandler(),
            _RedirectHandler(),
            urllib.request.HTTPErrorProcessor(),
        ):
            self._opener.add_handler(handler)

    def get(self, url: str, *, accept: str = "*/*", limit: int = PAGE_LIMIT) -> Page:
        """The page at ``url`` (http, https or file), read whole up to ``limit`` bytes (up
        to :data:`JSON_LIMIT` when it is JSON)."""
        body = bytearray()  # grown in place: no list of chunks joined into a second copy
        final, kind = self._read(url, accept, limit, "a page", body.extend)
        return Page(final, kind, body)

    def download(self, url: str, out: IO[bytes], *, limit: int = FILE_LIMIT) -> str:
        """Write the file at ``url`` to ``out`` as it arrives, up to ``limit`` bytes; its
        sha256 (hex)."""
        digest = hashlib.sha256()

        def write(chunk: bytes) -> None:
            digest.update(chunk)
            out.write(chunk)

        self._read(url, "*/*", limit, "a file", write)
        return digest.hexdigest()

    # --- how -----------------------------------------------------------------------------

    def _read(
        self, url: str, accept: str, limit: int, what: str, sink: Callable[[bytes], None]
    ) -> tuple[str, str]:
        if any(c.isspace() or not c.isprintable() for c in url):
            raise FetchError(url, "not a URL: it has spaces or control characters")
        scheme = urllib.parse.urlsplit(url).scheme.lower()
        if scheme == "file":
            return self._read_file(url, limit, what, sink)
        if scheme not in _WEB:
            raise FetchError(url, "not an http(s) or file: URL")
        remaining = self._deadline - time.monotonic()
        if remaining <= 0:
            raise self._late(url)
        self._watch = watch = _Watch(remaining)
        try:
            request = urllib.request.Request(url, headers={"Accept": accept})
            try:
                response = self._opener.open(request, timeout=remaining)
            except urllib.error.HTTPError as exc:
                exc.close()
                if watch.expired:
                    raise self._late(url) from None
                raise FetchError(url, f"HTTP {exc.code} {exc.reason}", exc.code) from None
            with response:
                if what == "a page" and "json" in response.headers.get_content_type():
                    limit, what = min(limit, JSON_LIMIT), "a JSON answer"
                _check_length(url, response.headers.get("Content-Length"), limit, what)
                size = 0
                while chunk := response.read1(_CHUNK):
                    size += len(chunk)
                    if size > limit:
                        raise FetchError(url, _too_large(limit, what))
                    sink(chunk)
                if watch.expired:
                    raise self._late(url)
                if response.length:  # the server closed before its Content-Length
                    raise FetchError(url, "the connection closed before the body ended")
                kind = response.headers.get_content_type()
                return response.geturl(), kind
        except (OSError, http.client.HTTPException, ValueError) as exc:
            if isinstance(exc, FetchError):
                raise
            if watch.expired or isinstance(getattr(exc, "reason", None), _Late):
                raise self._late(url) from None
            if isinstance(exc, urllib.error.URLError):  # before an answer: no connection
                raise FetchError(url, f"cannot connect: {printable(str(exc.reason))}") from None
            raise FetchError(url, f"cannot read: {printable(str(exc))}") from None
        finally:
            watch.close()
            self._watch = None

    def _read_file(
        self, url: str, limit: int, what: str, sink: Callable[[bytes], None]
    ) -> tuple[str, str]:
        parts = urllib.parse.urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise FetchError(url, "a file: URL names no other host")
        path = urllib.request.url2pathname(parts.path)
        if what == "a page" and path.endswith(".json"):
            limit, what = min(limit, JSON_LIMIT), "a JSON answer"
        if os.path.isdir(path):  # as pip reads a file: index: the folder's index.html
            path = os.path.join(path, "index.html")
            url = urllib.parse.urlunsplit(
                parts._replace(path=parts.path.rstrip("/") + "/index.html")
            )
        try:
            with open(path, "rb") as f:
                size = 0
                while chunk := f.read(_CHUNK):
                    size += len(chunk)
                    if size > limit:
                        raise FetchError(url, _too_large(limit, what))
                    sink(chunk)
        except OSError as exc:
            if isinstance(exc, FetchError):
                raise
            raise FetchError(url, f"cannot read: {exc.strerror or exc}") from None
        return url, "application/json" if path.endswith(".json") else "text/html"

    def _late(self, url: str) -> FetchError:
        return FetchError(
            url,
            f"no answer within {self.timeout_s:g} s, the deadline of all requests to the "
            f"index (${TIMEOUT_ENV} sets it)",
        )

    def _connected(self, sock: socket.socket) -> None:
        if self._watch is not None:
            self._watch.add(sock)

    def _connect(
        self, address: tuple[str, int], timeout: object = None, source: object = None
    ) -> socket.socket:
        """As ``socket.create_connection``, but each address's attempt waits only until the
        deadline, and none is made after it (http.client's ``_create_connection``)."""
        host, port = address
        error: OSError | None = None
        for family, kind, proto, _, sockaddr in socket.getaddrinfo(
            host, port, 0, socket.SOCK_STREAM
        ):
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                raise _Late
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(remaining)
                if isinstance(source, tuple):
                    sock.bind(source)
                sock.connect(sockaddr)
            except TimeoutError:  # it waited until the deadline: no next address
                sock.close()
                raise _Late from None
            except OSError as exc:
                sock.close()
                error = exc
                continue
            return sock
        raise error or OSError(f"{host!r} has no address")


def _too_large(limit: int, what: str) -> str:
    return f"larger than {limit // MiB} MiB, the most opmarket reads of {what}"


def _check_length(url: str, declared: str | None, limit: int, what: str) -> None:
    if declared is not None and declared.strip().isdigit() and int(declared) > limit:
        raise FetchError(url, _too_large(limit, what))


class _Late(TimeoutError):
    """A connect that the deadline ended (urllib hands it back as a URLError's reason)."""


class _Watch:
    """Shuts every socket of one request down at the deadline: a blocked read returns."""

    def __init__(self, seconds: float) -> None:
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.expired = False
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def add(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.expired:
                _shutdown(sock)

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                _shutdown(sock)

    def close(self) -> None:
        self._timer.cancel()


def _shutdown(sock: socket.socket) -> None:
    # The plain socket's shutdown, also for TLS: the reader sees the end of the stream.
    with contextlib.suppress(OSError):  # already closed
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _connection_class(base: type[http.client.HTTPConnection], fetcher: Fetcher) -> Any:
    class Connection(base):  # type: ignore[valid-type, misc]  # a class made per Fetcher
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            # What http.client's connect calls: each attempt waits only until the deadline.
            self._create_connection = fetcher._connect

        def connect(self) -> None:
            super().connect()
            fetcher._connected(self.sock)  # the TLS socket, for HTTPS

    return Connection


class _HTTPHandler(urllib.request.HTTPHandler):
    def __init__(self, connection: Any) -> None:
        super().__init__()
        self._connection = connection

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _HTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self, connection: Any) -> None:
        super().__init__()
        self._connection = connection

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._connection, req)


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Redirects to http(s) only, with the same message whatever the scheme (urllib's own
    follows ftp: and answers an HTTP error for file:)."""

    def http_error_302(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
    ) -> Any:
        target = headers.get("location") or headers.get("uri") or ""
        if any(c.isspace() or not c.isprintable() for c in target):
            raise FetchError(req.full_url, f"redirects to {target!r}: not a URL")
        newurl = urllib.parse.urljoin(req.full_url, target)
        if urllib.parse.urlsplit(newurl).scheme.lower() not in _WEB:
            raise FetchError(
                req.full_url,
                f"redirects to {newurl!r}: refused, an index may redirect only to http(s) URLs",
            )
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302
