"""opmarket's index clients against a hostile index on 127.0.0.1: ``opmarket install``,
``opmarket status`` and ``compat-check --index-url``, run as their console scripts. A link to
another scheme, a body too large, a body sent a byte at a time, malformed JSON: each is one
line on stderr and exit code 2 (docs/cli.md, "Reading an index"); what the index says is
printed with its escape sequences shown, not obeyed."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import os
import random
import struct
import subprocess
import sys
import threading
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
PEP_691 = "application/vnd.pypi.simple.v1+json"
WHEEL = "opm_{}-1.0.0-py3-none-any.whl"
# A hostile body announces 3 GiB and, if read, sends at most 4 x the page cap, then closes:
# a client without a cap reads it all (and failed with MemoryError on the real 3 GiB).
HUGE = 3 * 1024**3
SENT_AT_MOST = 4 * 64 * 1024 * 1024  # the cap on pages: 64 MiB
ZEROS = bytes(1024 * 1024)
ESCAPE = "\x1b]0;owned\x07"  # sets the terminal's title when printed raw


def _simple_page(project: str, href: str) -> bytes:
    return f'<html><body><a href="{href}">{WHEEL.format(project)}</a></body></html>'.encode()


def _json_page(files: object) -> bytes:
    return json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode()


def _api(files: object) -> bytes:
    return json.dumps({"name": "x", "files": files}).encode()


class Hostile(http.server.BaseHTTPRequestHandler):
    """Each path a hostile answer; ``pages`` maps a path to (content type, body)."""

    pages: dict[str, tuple[str, bytes]]
    stop: threading.Event

    def do_GET(self) -> None:
        with contextlib.suppress(OSError):  # the client hung up, as one that stops reading does
            self._answer()

    def _answer(self) -> None:
        path = self.path
        kind = path.rsplit("/", 2)[-2] if path.endswith("/") else path.rsplit("/", 1)[-1]
        ctype = "text/html" if "html" in kind else PEP_691
        if "huge" in kind or "bigwheel-" in path:  # 3 GiB announced
            self._stream(HUGE, ctype)
        elif "endless" in kind:  # no length: the body ends when the server closes
            self._stream(None, ctype)
        elif "slow" in kind:  # one byte every 0.1 s until the client gives up
            self.send_response(200)
            self.send_header("Content-Type", PEP_691)
            self.send_header("Content-Length", "1000000")
            self.end_headers()
            while not self.stop.wait(0.1):
                self.wfile.write(b" ")
                self.wfile.flush()
        elif path in self.pages:
            ctype, body = self.pages[path]
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_error(404)

    def _stream(self, length: int | None, ctype: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        self.end_headers()
        for _ in range(SENT_AT_MOST // len(ZEROS)):
            self.wfile.write(ZEROS)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _wheel(path: Path) -> Path:
    """A real wheel, where a file: link points: a client that follows the link reads it."""
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("opm_link-1.0.0.dist-info/METADATA", "Name: opm-link\nVersion: 1.0.0\n")
    return path


_METADATA = "Name: opm-x\nVersion: 1.0.0\n" * 50


def _crafted(project: str, how: str) -> bytes:
    """A wheel whose METADATA zipfile cannot read, each as a crafted archive would break it:
    its central directory changed after the member was written."""
    name = WHEEL.format(project.removeprefix("opm-"))
    noise = random.Random(0).randbytes(8000)  # deflated as one stored block of raw bytes
    deflated = zlib.compressobj(wbits=-15)
    stream = deflated.compress(noise) + deflated.flush()
    data = {
        "method99": _METADATA.encode(),  # an unknown compression method: NotImplementedError
        "encrypted": _METADATA.encode(),  # flagged encrypted: RuntimeError (password)
        "badinflate": b"\xff" * 64,  # a reserved deflate block type: zlib.error
        # Half a stream, said to be longer than the archive: EOFError as the file ends.
        "cutinflate": stream[: len(stream) // 2],
    }[how]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr(f"{name.split('-')[0]}-1.0.0.dist-info/METADATA", data)
        info = z.infolist()[0]
        if how == "method99":
            info.compress_type = 99
        elif how == "encrypted":
            info.flag_bits |= 0x1
        else:
            info.compress_type = zipfile.ZIP_DEFLATED
            info.file_size = len(noise)
            if how == "cutinflate":
                info.compress_size = 1_000_000
    return buffer.getvalue()


def _many_entries(project: str, count: int) -> bytes:
    """A zip whose central directory lists ``count`` entries (all but the first pointing at
    its one member): zipfile makes a ZipInfo of each, some 270 bytes apiece."""
    meta = f"{project.replace('-', '_')}-1.0.0.dist-info/METADATA".encode()
    data = _METADATA.encode()
    crc = zlib.crc32(data)
    fixed = struct.pack("<HHHHHIII", 20, 0, 0, 0, 0x21, crc, len(data), len(data))
    local = b"PK\x03\x04" + fixed + struct.pack("<HH", len(meta), 0) + meta + data
    entries = []
    for i in range(count):
        name = meta if i == 0 else b"f%d" % i
        entries.append(
            b"PK\x01\x02"
            + struct.pack("<H", 20)
            + fixed
            + struct.pack("<HHHHHII", len(name), 0, 0, 0, 0, 0, 0)
            + name
        )
    directory = b"".join(entries)
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, len(directory), len(local), 0
    )
    return local + directory + end


CRAFTED = {
    "opm-method99": "NotImplementedError",
    "opm-encrypted": "RuntimeError",
    "opm-badinflate": "error",  # zlib.error
    "opm-cutinflate": "EOFError",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    canary = _wheel(tmp_path_factory.mktemp("local") / WHEEL.format("link"))
    pages = {
        "/simple/opm-link/": ("text/html", _simple_page("link", canary.as_uri())),
        "/simple/opm-jlink/": (
            PEP_691,
            _json_page([{"filename": WHEEL.format("jlink"), "url": canary.as_uri()}]),
        ),
        "/simple/opm-bigwheel/": (
            "text/html",
            _simple_page("bigwheel", "../../files/" + WHEEL.format("bigwheel")),
        ),
        # Malformed project pages (PEP 691) and package API answers (status).
        "/simple/opm-five/": (PEP_691, _json_page(5)),
        "/simple/opm-notext/": (PEP_691, _json_page([{"filename": 5, "url": "x.whl"}])),
        "/simple/opm-deep/": (PEP_691, b"[" * 100_000),
        "/simple/opm-ctl/": (
            "text/html",
            _simple_page("ctl", "../../files/\x01/" + WHEEL.format("ctl")).replace(
                b"<a ", b'<a data-core-metadata="true" '
            ),
        ),
        "/simple/opm-jctl/": (
            PEP_691,
            _json_page([{"filename": WHEEL.format("jctl"), "url": f"x\x1b/{WHEEL}"}]),
        ),
        "/api/packages/opm-five": ("application/json", _api(5)),
        "/api/packages/opm-nofilename": (
            "application/json",
            _api([{"version": "1.0.0", "status": "validated", "log": ""}]),
        ),
        "/api/packages/opm-notdict": ("application/json", _api(["opm_x-1.0.0.whl"])),
        "/api/packages/opm-deep": ("application/json", b"[" * 100_000),
        "/api/packages/opm-esc": (
            "application/json",
            _api(
                [
                    {
                        "filename": f"opm_esc-1.0.0-py3-none-any.whl{ESCAPE}",
                        "version": "1.0.0",
                        "status": "rejected",
                        "log": f"opm_esc: rejected\nconformance: {ESCAPE}differs",
                    }
                ]
            ),
        ),
    }
    for project in CRAFTED:
        wheel = WHEEL.format(project.removeprefix("opm-"))
        pages[f"/simple/{project}/"] = (
            "text/html",
            _simple_page(project[4:], f"../../files/{wheel}"),
        )
        pages[f"/files/{wheel}"] = ("application/octet-stream", _crafted(project, project[4:]))
    wheel = WHEEL.format("manyentries")
    pages["/simple/opm-manyentries/"] = (
        "text/html",
        _simple_page("manyentries", f"../../files/{wheel}"),
    )
    pages[f"/files/{wheel}"] = (
        "application/octet-stream",
        _many_entries("opm-manyentries", 300_000),
    )
    stop = threading.Event()
    handler = type("Handler", (Hostile,), {"pages": pages, "stop": stop})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join()


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """A console script as a user runs it; the timeout only stops a hung client."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "OPMARKET_"))}
    clean.update(PIP_CONFIG_FILE=os.devnull, **env)
    return subprocess.run(
        [str(BIN / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        check=False,
        env=clean,
        timeout=60,
    )


def install(index: str, project: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run("opmarket", "install", project, "--index-url", index, "--dry-run", **env)


def status(index: str, project: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run("opmarket", "status", f"{project}==1.0.0", "--index-url", index, **env)


def compat(index: str, project: str, **env: str) -> subprocess.CompletedProcess[str]:
    pinned = f"{project}==1.0.0"
    return run("compat-check", pinned, pinned, "--index-url", index, **env)


def one_error_line(done: subprocess.CompletedProcess[str], *parts: str) -> None:
    """Exit 2 and one line on stderr, naming the program and saying each of ``parts``."""
    assert done.returncode == 2, done.stdout + done.stderr
    prog = "compat-check" if "compat-check" in done.args[0] else "opmarket"
    assert done.stderr.startswith(f"{prog}: error: "), done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    for part in parts:
        assert part in done.stderr


CLIENTS = {"install": install, "status": status, "compat-check": compat}


@pytest.mark.parametrize("client", ["install", "compat-check"])
@pytest.mark.parametrize("project", ["opm-link", "opm-jlink"])
def test_a_file_link_from_an_http_index_is_refused(index: str, client: str, project: str) -> None:
    done = CLIENTS[client](index, project)
    one_error_line(
        done,
        f"{index}{project}/: links to 'file://",
        "refused, a page read over http(s) may link only to http(s) URLs",
    )


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("project", ["opm-huge", "opm-endless"])
def test_a_json_answer_larger_than_the_cap_is_refused(
    index: str, client: str, project: str
) -> None:
    # 16 MiB: parsed, JSON such as [{},{},...] takes some 25 times its size in memory.
    done = CLIENTS[client](index, project)
    one_error_line(done, project, "larger than 16 MiB, the most opmarket reads of a JSON answer")


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("project", ["opm-hugehtml", "opm-endlesshtml"])
def test_a_page_larger_than_the_cap_is_refused(index: str, client: str, project: str) -> None:
    done = CLIENTS[client](index, project)
    one_error_line(done, project, "larger than 64 MiB, the most opmarket reads of a page")


@pytest.mark.parametrize("client", ["install", "compat-check"])
def test_a_wheel_larger_than_the_cap_is_refused(index: str, client: str) -> None:
    done = CLIENTS[client](index, "opm-bigwheel")
    one_error_line(done, "larger than 1024 MiB, the most opmarket reads of a file")


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_body_sent_a_byte_at_a_time_ends_at_the_deadline(index: str, client: str) -> None:
    done = CLIENTS[client](index, "opm-slow", OPMARKET_INDEX_TIMEOUT="1")
    one_error_line(
        done,
        "opm-slow",
        "no answer within 1 s, the deadline of all requests to the index "
        "($OPMARKET_INDEX_TIMEOUT sets it)",
    )


@pytest.mark.parametrize("client", sorted(CLIENTS))
@pytest.mark.parametrize("value", ["soon", "1e300", "-1"])
def test_a_deadline_that_is_not_a_number_is_a_usage_error(
    index: str, client: str, value: str
) -> None:
    done = CLIENTS[client](index, "opm-link", OPMARKET_INDEX_TIMEOUT=value)
    one_error_line(
        done,
        f"$OPMARKET_INDEX_TIMEOUT: '{value}' is not a number of seconds above 0 and at most "
        "1000000",
    )


@pytest.mark.parametrize(
    ("project", "says"),
    [
        ("opm-five", "not a PEP 691 project page: no list of 'files'"),
        ("opm-notext", "files[0] is not an object with 'filename' and 'url' strings"),
        ("opm-deep", "not a PEP 691 project page: RecursionError"),
        ("opm-ctl", r"a link is not a URL: '../../files/\x01/opm_ctl"),
        ("opm-jctl", r"a link is not a URL: 'x\x1b/opm_"),
    ],
)
def test_install_on_a_malformed_project_page(index: str, project: str, says: str) -> None:
    one_error_line(install(index, project), says)


@pytest.mark.parametrize(
    ("project", "says"),
    [
        ("opm-five", "not the package API's JSON: no list of 'files'"),
        ("opm-nofilename", "files[0] is not an object with 'filename', 'version', 'status'"),
        ("opm-notdict", "files[0] is not an object with 'filename', 'version', 'status'"),
        ("opm-deep", "not the package API's JSON: RecursionError"),
    ],
)
def test_status_on_a_malformed_answer(index: str, project: str, says: str) -> None:
    one_error_line(status(index, project), says)


def test_status_shows_escape_sequences_instead_of_sending_them(index: str) -> None:
    done = status(index, "opm-esc")
    assert done.returncode == 1, done.stderr  # rejected
    assert "\x1b" not in done.stdout and "\x07" not in done.stdout
    assert done.stdout == (
        r"opm_esc-1.0.0-py3-none-any.whl\x1b]0;owned\x07: rejected"
        "\n"
        r"  conformance: \x1b]0;owned\x07differs"
        "\n"
    )


@pytest.mark.parametrize("client", ["install", "compat-check"])
@pytest.mark.parametrize("project", sorted(CRAFTED))
def test_a_wheel_zipfile_cannot_read_is_one_line(index: str, client: str, project: str) -> None:
    done = CLIENTS[client](index, project)
    one_error_line(done, WHEEL.format(project[4:]), CRAFTED[project])


@pytest.mark.parametrize("client", ["install", "compat-check"])
def test_a_wheel_with_a_huge_central_directory_is_refused(index: str, client: str) -> None:
    # 300000 entries in 12 MiB: refused from the end record, before a ZipInfo is made.
    done = CLIENTS[client](index, "opm-manyentries")
    one_error_line(done, "bytes, more than the 8 MiB opmarket reads of a wheel")
