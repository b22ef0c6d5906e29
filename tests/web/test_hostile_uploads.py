"""The hostile-upload campaign, replayed against a real ``opmarket serve`` on 127.0.0.1.

Each test is one attack: those that broke the marketplace (a huge header stalling everyone,
a published version that changed, zip alias entries, invalid names, tags and versions, an
oversized search, wrong RECORD hashes, racing uploads, an inverted Range) and those that
held (zip bombs, traversal, symlinks, lying metadata, bad or missing tokens, another owner's
project, truncated uploads, bad HTTP). The server here validates nothing (no worker), so an
accepted file stays pending: what is tested is what the upload and HTTP layers decide.
"""

from __future__ import annotations

import base64
import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

import pytest

from opmarket.cli._demo import upload_wheel

from .conftest import Backend, Market, start_market
from .plugins import handmade_wheel, record_line

pytestmark = pytest.mark.slow

MiB = 1024 * 1024
HEAD_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
MAX_UPLOAD = 4 * MiB


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory, database: Backend) -> Iterator[Market]:
    """A market with short timeouts and a small upload limit, and no validation worker."""
    yield from start_market(
        tmp_path_factory.mktemp("hostile"),
        validation_workers=0,
        database_url=database.new_url("hostile"),
        flags=(
            "--upload-wait",
            "0",
            "--header-timeout",
            str(HEAD_TIMEOUT_S),
            "--body-timeout",
            str(BODY_TIMEOUT_S),
            "--max-upload-bytes",
            str(MAX_UPLOAD),
        ),
    )


def _address(market: Market) -> tuple[str, int]:
    host, port = market.url.removeprefix("http://").split(":")
    return host, int(port)


def _reply(sock: socket.socket, timeout: float) -> bytes:
    """The server's response (head and Content-Length bytes of body), or what came before
    it closed the connection or ``timeout`` passed."""
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
            head, sep, body = out.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                None,
            )
            if sep and length is not None and len(body) >= length:
                break
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def _auth(market: Market, user: str) -> str:
    return base64.b64encode(f"__token__:{market.tokens[user]}".encode()).decode()


def _peak_rss_kib(market: Market) -> int:
    status = Path(f"/proc/{market.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


# --- 6. one unauthenticated client stalls everyone -----------------------------------------


def _flood_header(market: Market, total: int, give_up_s: float) -> tuple[int, float, bytes]:
    """Send a request whose one header is ``total`` bytes long; (bytes sent, seconds, reply)."""
    sock = socket.create_connection(_address(market))
    chunk = b"a" * 65536
    sent, start = 0, time.monotonic()
    try:
        sock.sendall(b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ")
        while sent < total and time.monotonic() - start < give_up_s:
            sock.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused: the server closed the connection
    reply = _reply(sock, 5)
    sock.close()
    return sent, time.monotonic() - start, reply


def test_a_100_mib_header_is_refused_fast_and_others_are_not_stalled(hostile: Market) -> None:
    peak_before = _peak_rss_kib(hostile)
    with ThreadPoolExecutor(4) as pool:
        floods = [pool.submit(_flood_header, hostile, 100 * MiB, 20) for _ in range(4)]
        latencies = []
        while True:  # once at least: the floods may all be refused before a first look
            start = time.monotonic()
            assert hostile.get("/simple/")[0] == 200
            latencies.append(time.monotonic() - start)
            if all(f.done() for f in floods):
                break
    for sent, seconds, reply in (f.result() for f in floods):
        assert seconds < 5, f"a {sent}-byte header held the connection {seconds:.1f} s"
        assert sent < 32 * MiB
        assert reply == b"" or reply.startswith(b"HTTP/1.1 431 "), reply[:100]
    assert max(latencies) < 1.0, f"other clients waited up to {max(latencies):.2f} s"
    grown = (_peak_rss_kib(hostile) - peak_before) / 1024
    assert grown < 64, f"four huge headers grew the server's memory by {grown:.0f} MiB"


@pytest.mark.parametrize(("size", "status"), [(60_000, 200), (70_000, 431)])
def test_the_head_limit_is_64_kib(hostile: Market, size: int, status: int) -> None:
    with socket.create_connection(_address(hostile)) as sock:
        sock.sendall(
            b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Long: " + b"a" * size + b"\r\n\r\n"
        )
        reply = _reply(sock, 10)
    assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:100]


def test_too_many_headers_are_431(hostile: Market) -> None:
    with socket.create_connection(_address(hostile)) as sock:
        headers = "".join(f"X-Header-{n}: {n}\r\n" for n in range(500))
        sock.sendall(f"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\n{headers}\r\n".encode())
        reply = _reply(sock, 10)
    assert reply.startswith(b"HTTP/1.1 431 ")
    assert json.loads(reply.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "too-many-headers"


@pytest.mark.parametrize("sent", [b"", b"GET /simple/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "])
def test_a_slow_request_head_is_408_after_the_timeout(hostile: Market, sent: bytes) -> None:
    with socket.create_connection(_address(hostile)) as sock:
        start = time.monotonic()
        sock.sendall(sent)
        reply = _reply(sock, 15)
        waited = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:100]
    assert HEAD_TIMEOUT_S * 0.5 < waited < HEAD_TIMEOUT_S + 4


def test_a_stalled_upload_body_is_408(hostile: Market) -> None:
    with socket.create_connection(_address(hostile)) as sock:
        sock.sendall(
            b"POST /legacy/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5000\r\n"
            b"Content-Type: multipart/form-data; boundary=zz\r\n"
            + f"Authorization: Basic {_auth(hostile, 'bob')}\r\n\r\n".encode()
            + b'--zz\r\nContent-Disposition: form-data; name=":action"\r\n\r\n'
        )
        start = time.monotonic()
        reply = _reply(sock, 15)
        waited = time.monotonic() - start
    assert reply.startswith(b"HTTP/1.1 408 "), reply[:100]
    assert waited < BODY_TIMEOUT_S + 4


@pytest.mark.parametrize(
    ("path", "length", "status"),
    [
        ("/api/packages", 10 * MiB, 413),  # no body expected here: the small limit
        ("/legacy/", 100 * MiB, 413),  # over --max-upload-bytes
    ],
)
def test_bodies_over_the_routes_limit_are_413_before_they_are_sent(
    hostile: Market, path: str, length: int, status: int
) -> None:
    with socket.create_connection(_address(hostile)) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {length}\r\n"
            f"Authorization: Basic {_auth(hostile, 'bob')}\r\n"
            "Content-Type: multipart/form-data; boundary=zz\r\n\r\n".encode()
        )
        reply = _reply(sock, 10)
    assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply[:100]


def test_garbage_instead_of_http_is_400_and_the_server_goes_on(hostile: Market) -> None:
    with socket.create_connection(_address(hostile)) as sock:
        sock.sendall(b"\x16\x03\x01 NOT HTTP AT ALL\r\n\r\n")
        assert _reply(sock, 10).startswith(b"HTTP/1.1 400 ")
    assert hostile.get("/simple/")[0] == 200


# --- 7. a published version can change -----------------------------------------------------


def _files(market: Market, project: str) -> list[str]:
    status, _, body = market.get(f"/api/packages/{quote(project)}")
    return [f["filename"] for f in json.loads(body)["files"]] if status == 200 else []


def test_one_version_under_three_spellings_is_one_file(hostile: Market, tmp_path: Path) -> None:
    spellings = [("Hostile_Same", "1.0"), ("hostile_same", "1.0"), ("hostile_same", "1.0.0")]
    answers = []
    for n, (dist, version) in enumerate(spellings):
        folder = tmp_path / str(n)
        folder.mkdir()
        wheel = handmade_wheel(
            folder, dist, version, {"hostile_same/data.py": f"N = {n}\n".encode()}
        )
        answers.append(upload_wheel(hostile.url, hostile.tokens["alice"], wheel))
    assert answers[0][0] == 200, answers[0]
    for status, body in answers[1:]:
        assert status == 400 and "File already exists" in body, (status, body)
    assert _files(hostile, "hostile-same") == ["Hostile_Same-1.0-py3-none-any.whl"]


def test_the_same_bytes_under_another_name_are_refused(hostile: Market, tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "hostile-twin", "1.0", {})
    assert upload_wheel(hostile.url, hostile.tokens["alice"], wheel)[0] == 200
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    twin = renamed / "hostile_twin-1.0-1-py3-none-any.whl"  # a build tag: another file name
    shutil.copyfile(wheel, twin)
    status, body = upload_wheel(hostile.url, hostile.tokens["alice"], twin)
    assert status == 400 and "uploaded before as 'hostile_twin-1.0-py3-none-any.whl'" in body
    assert _files(hostile, "hostile-twin") == [wheel.name]


def test_concurrent_identical_uploads_of_a_new_file_all_get_200(
    hostile: Market, tmp_path: Path
) -> None:
    wheel = handmade_wheel(tmp_path, "hostile-race", "1.0", {"hostile_race/x.py": b"x = 1\n"})
    barrier = threading.Barrier(6)

    def upload() -> tuple[int, str]:
        barrier.wait()
        return upload_wheel(hostile.url, hostile.tokens["alice"], wheel)

    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda _: upload(), range(6)))
    assert [status for status, _ in answers] == [200] * 6, [b for s, b in answers if s != 200]
    assert _files(hostile, "hostile-race") == [wheel.name]


# --- 8 and the checks that held: refused, and nothing stored --------------------------------

_LYING = "Metadata-Version: 2.1\nName: somebody-else\nVersion: 1.0\n"


@pytest.mark.parametrize(
    ("dist", "version", "extra", "options", "why"),
    [
        (
            "hostile-alias",
            "1.0",
            {"hostile_alias/./__init__.py": b"import os\n"},
            {},
            "non-canonical path",
        ),
        (
            "hostile-\u0435vil",
            "1.0",
            {},
            {"filename": "hostile_\u0435vil-1.0-py3-none-any.whl"},
            "not a valid name",
        ),
        (
            "hostile-tag",
            "1.0",
            {},
            {"filename": "hostile_tag-1.0-py3-none-any<img onerror>.whl"},
            "not a valid compatibility tag",
        ),
        ("hostile-local", "1.0+evil", {}, {}, "local versions are not accepted"),
        (
            "hostile-record",
            "1.0",
            {},
            {"record": record_line("hostile_record/__init__.py", b"other bytes")},
            "RECORD does not match the archive",
        ),
        ("hostile-bomb", "1.0", {"hostile_bomb/zeros": b"\0" * (64 * MiB)}, {}, "zip bomb"),
        ("hostile-trav", "1.0", {"../../evil.py": b"print('escaped')\n"}, {}, "path traversal"),
        ("hostile-link", "1.0", {}, {"symlink": "/etc/passwd"}, "symbolic link"),
        ("hostile-lie", "1.0", {}, {"metadata": _LYING}, "METADATA says 'somebody-else'"),
    ],
)
def test_invalid_wheels_are_refused_and_nothing_is_stored(  # noqa: PLR0917  (one per column)
    hostile: Market,
    tmp_path: Path,
    dist: str,
    version: str,
    extra: dict[str, bytes],
    options: dict[str, str],
    why: str,
) -> None:
    wheel = handmade_wheel(tmp_path, dist, version, extra, **options)  # type: ignore[arg-type]
    before = hostile.blobs()
    status, body = upload_wheel(hostile.url, hostile.tokens["bob"], wheel)
    assert status == 400 and why in json.loads(body)["error"]["message"], body
    assert hostile.blobs() == before
    assert _files(hostile, dist) == []


@pytest.mark.parametrize(
    ("token", "status"),
    [
        (None, 401),  # no credentials
        ("opm-not-a-real-token", 403),
        ("bob", 403),  # alice's project
    ],
)
def test_uploads_without_the_right_to_are_refused(
    hostile: Market, tmp_path: Path, token: str | None, status: int
) -> None:
    owned = handmade_wheel(tmp_path, "hostile-owned", "1.0", {})
    assert upload_wheel(hostile.url, hostile.tokens["alice"], owned)[0] == 200
    newer = tmp_path / "newer"
    newer.mkdir()
    wheel = handmade_wheel(newer, "hostile-owned", "2.0", {})
    before = hostile.blobs()
    secret = "" if token is None else hostile.tokens.get(token, token)
    got, body = upload_wheel(hostile.url, secret, wheel) if secret else _anonymous(hostile, wheel)
    assert got == status, body
    assert hostile.blobs() == before
    assert _files(hostile, "hostile-owned") == [owned.name]


def test_a_token_for_another_project_is_403(hostile: Market, tmp_path: Path) -> None:
    made = hostile.cli("tokens", "create", "bob", "--project", "hostile-elsewhere")
    assert made.returncode == 0, made.stderr
    scoped = made.stdout.strip().splitlines()[-1]
    wheel = handmade_wheel(tmp_path, "hostile-scoped", "1.0", {})
    status, body = upload_wheel(hostile.url, scoped, wheel)
    assert status == 403 and "'hostile-elsewhere' only" in body, body
    assert _files(hostile, "hostile-scoped") == []


def _anonymous(market: Market, wheel: Path) -> tuple[int, str]:
    with socket.create_connection(_address(market)) as sock:
        sock.sendall(b"POST /legacy/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n")
        reply = _reply(sock, 10)
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"www-authenticate: Basic" in head
    return int(head.split()[1]), body.decode()


def test_a_truncated_upload_stores_nothing(hostile: Market, tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "hostile-cut", "1.0", {})
    data = wheel.read_bytes()
    before = hostile.blobs()
    with socket.create_connection(_address(hostile)) as sock:
        sock.sendall(
            f"POST /legacy/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(data) + 400}"
            f"\r\nAuthorization: Basic {_auth(hostile, 'bob')}\r\n"
            "Content-Type: multipart/form-data; boundary=zz\r\n\r\n"
            '--zz\r\nContent-Disposition: form-data; name="content"; '
            f'filename="{wheel.name}"\r\n\r\n'.encode()
            + data[: len(data) // 2]
        )
    # The client is gone; the server goes on serving and keeps nothing of it.
    assert hostile.get("/simple/")[0] == 200
    assert _files(hostile, "hostile-cut") == []
    assert hostile.blobs() == before


# --- 9. smaller ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/api/packages?q=", "/?q="])
def test_a_60000_character_search_is_400_not_500(hostile: Market, path: str) -> None:
    status, _, body = hostile.get(path + "a" * 60_000)
    assert status == 400, body[:200]
    assert hostile.get(path + "hostile")[0] == 200


def test_an_invalid_range_is_ignored_and_a_valid_one_served(uploaded: Market) -> None:
    files = uploaded.json("/api/packages/opm-double")["files"]
    entry = next(f for f in files if f["status"] == "validated")
    status, _, whole = uploaded.get(entry["url"])
    assert status == 200
    for ignored in ("bytes=5-3", "bytes=abc", "lines=1-2"):
        status, headers, body = uploaded.get(entry["url"], {"Range": ignored})
        assert (status, body) == (200, whole), ignored
        assert "content-range" not in {k.lower() for k in headers}
    status, _, part = uploaded.get(entry["url"], {"Range": "bytes=3-5"})
    assert (status, part) == (206, whole[3:6])
