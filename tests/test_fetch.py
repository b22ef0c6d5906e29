"""opmarket._fetch, the one way opmarket's clients read an index: which links an index may
give, files read as pip reads a file: index, and what is shown of what an index says.
(The rules against a hostile server, through the real clients: test_hostile_index.py.)"""

from __future__ import annotations

import contextlib
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from opmarket._fetch import Fetcher, FetchError, join_link, printable

ESCAPE = "\x1b]0;owned\x07"  # sets the terminal's title when printed raw


@pytest.mark.parametrize(
    ("page", "href", "allowed"),
    [
        ("http://h/simple/p/", "../../files/p.whl", True),
        ("http://h/simple/p/", "https://cdn.example/p.whl", True),
        ("https://h/simple/p/", "FILE:///etc/shadow", False),
        ("http://h/simple/p/", "ftp://h/p.whl", False),
        ("http://h/simple/p/", "data:,x", False),
        # A file: index the user names may point to its files (and to the web).
        ("file:///srv/simple/p/", "../../files/p.whl", True),
        ("file:///srv/simple/p/", "http://h/p.whl", True),
    ],
)
def test_join_link_keeps_an_http_page_to_http(page: str, href: str, allowed: bool) -> None:
    if allowed:
        assert join_link(page, href).endswith("p.whl")
    else:
        with pytest.raises(FetchError, match="refused"):
            join_link(page, href)


def test_a_file_index_is_read_as_pip_reads_it(tmp_path: Path) -> None:
    project = tmp_path / "simple" / "p"
    project.mkdir(parents=True)
    (project / "index.html").write_text("<a href='p.whl'>p.whl</a>")
    page = Fetcher(5).get(project.as_uri() + "/")
    assert page.url.endswith("/simple/p/index.html") and b"p.whl" in page.body
    assert Fetcher(5).get(project.as_uri()).url == page.url  # with or without the slash
    with pytest.raises(FetchError, match="larger than 1 MiB"):
        Fetcher(5).get(Path("/dev/zero").as_uri(), limit=1024 * 1024)


def test_printable_escapes_what_a_terminal_would_act_on() -> None:
    assert printable(f"a{ESCAPE}b\u202ec\té") == r"a\x1b]0;owned\x07b\u202ec\té"


class _Server(http.server.BaseHTTPRequestHandler):
    stop: threading.Event

    def do_GET(self) -> None:
        with contextlib.suppress(OSError):  # the client hung up
            if self.path.startswith("/go/"):  # a redirect to the URL after /go/
                self.send_response(302)
                self.send_header("Location", self.path[4:])
                self.end_headers()
            elif self.path.startswith("/to/"):  # a redirect to the scheme after /to/
                self.send_response(302)
                self.send_header("Location", f"{self.path[4:]}://127.0.0.1/p.whl")
                self.end_headers()
            elif self.path == "/slow-head":  # the status line itself, a byte at a time
                for byte in b"HTTP/1.0 200 OK\r\n" * 1000:
                    if self.stop.wait(0.1):
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
            elif self.path == "/short":  # less than its Content-Length, then closed
                self.send_response(200)
                self.send_header("Content-Length", "100")
                self.end_headers()
                self.wfile.write(b"x" * 10)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    stop = threading.Event()
    handler = type("Handler", (_Server,), {"stop": stop})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    stop.set()
    httpd.shutdown()
    httpd.server_close()
    thread.join()


@pytest.mark.parametrize("scheme", ["file", "ftp", "data"])
def test_a_redirect_to_another_scheme_is_refused(server: str, scheme: str) -> None:
    with pytest.raises(FetchError, match=f"redirects to '{scheme}://.*': refused"):
        Fetcher(30).get(f"{server}/to/{scheme}")


def test_the_deadline_covers_headers_sent_a_byte_at_a_time(server: str) -> None:
    with pytest.raises(FetchError, match=r"no answer within 0\.5 s"):
        Fetcher(0.5).get(f"{server}/slow-head")


def test_a_body_shorter_than_its_length_is_an_error(server: str) -> None:
    with pytest.raises(FetchError, match="the connection closed before the body ended"):
        Fetcher(30).get(f"{server}/short")


@pytest.fixture
def unanswered() -> Iterator[tuple[str, int]]:
    """An address on 127.0.0.1 that never completes a connect: a listener that accepts
    nothing, its backlog filled, so the kernel drops further SYNs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(listener.getsockname())
        fillers.append(filler)
    yield listener.getsockname()
    for s in (*fillers, listener):
        s.close()


def test_no_address_is_tried_after_the_deadline(
    unanswered: tuple[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A host name with two addresses: the first never answers, the second would. Each
    # connect waits only until the deadline, and the second is not tried after it.
    second = socket.socket()
    second.bind(("127.0.0.1", 0))
    second.listen(8)
    addresses = [unanswered, second.getsockname()]
    monkeypatch.setattr(  # the resolver only: a name with two addresses is hard to get here
        socket,
        "getaddrinfo",
        lambda *args, **kw: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", a) for a in addresses],
    )
    try:
        with pytest.raises(FetchError, match=r"no answer within 0\.5 s"):
            Fetcher(0.5).get("http://two-addresses.test/simple/")
        second.setblocking(False)
        with pytest.raises(BlockingIOError):  # no connection waiting to be accepted
            second.accept()[0].close()
    finally:
        second.close()


def test_a_redirect_to_an_address_that_never_answers_ends_at_the_deadline(
    server: str, unanswered: tuple[str, int]
) -> None:
    host, port = unanswered
    with pytest.raises(FetchError, match=r"no answer within 0\.5 s"):
        Fetcher(0.5).get(f"{server}/go/http://{host}:{port}/p.whl")
