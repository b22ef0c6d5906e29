"""opmarket._fetch, the one way opmarket's clients read an index: which links an index may
give, files read as pip reads a file: index, and what is shown of what an index says.
(The rules against a hostile server, through the real clients: test_hostile_index.py.)"""

from __future__ import annotations

import contextlib
import http.server
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
            if self.path.startswith("/to/"):  # a redirect to the scheme after /to/
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
