"""Second hostile campaign, against a real ``opmarket serve`` on 127.0.0.1: what uploads may
hold while their bodies arrive and their verdicts are awaited (database connections, upload
slots, time), and names and form fields that once reached a header or the database.

The crowded market has a pool of two database connections and reads the catalog's change
log on every request (``INDEX_CACHE_TTL_S=0``): a request that holds a connection while it
waits shows at once as other clients' 500s.
"""

from __future__ import annotations

import base64
import hashlib
import json
import select
import signal
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from .conftest import Backend, Market, start_market
from .plugins import handmade_wheel
from .postgres import PostgresServer

pytestmark = pytest.mark.slow

MAX_UPLOADS = 3
MAX_PER_TOKEN = 2
BODY_DEADLINE_S = 2.0


@pytest.fixture(scope="module")
def crowded(tmp_path_factory: pytest.TempPathFactory, database: Backend) -> Iterator[Market]:
    """Two pooled connections, no overflow, the change log read on every request; uploads
    wait up to 600 s for a verdict no worker gives."""
    yield from start_market(
        tmp_path_factory.mktemp("crowded"),
        validation_workers=0,
        database_url=database.new_url("crowded"),
        flags=("--upload-wait", "600"),
        env={
            "OPMARKET_DATABASE_POOL_SIZE": "2",
            "OPMARKET_DATABASE_POOL_OVERFLOW": "0",
            "OPMARKET_INDEX_CACHE_TTL_S": "0",
        },
    )


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory, database: Backend) -> Iterator[Market]:
    """Small upload caps, and an upstream index."""
    yield from start_market(
        tmp_path_factory.mktemp("strict"),
        validation_workers=0,
        database_url=database.new_url("strict"),
        flags=(
            "--upload-wait",
            "0",
            "--max-uploads",
            str(MAX_UPLOADS),
            "--max-uploads-per-token",
            str(MAX_PER_TOKEN),
            "--upstream",
            "http://127.0.0.1:9/simple/",
        ),
    )


@pytest.fixture(scope="module")
def hurried(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    """A short deadline for a whole body, and a long wait allowed for each part of it."""
    yield from start_market(
        tmp_path_factory.mktemp("hurried"),
        validation_workers=0,
        flags=("--body-deadline", str(BODY_DEADLINE_S), "--body-timeout", "60"),
    )


def _address(market: Market) -> tuple[str, int]:
    host, port = market.url.removeprefix("http://").split(":")
    return host, int(port)


def _reply(sock: socket.socket, timeout: float) -> bytes:
    """What the server sent until it closed the connection, the head and body were in, or
    ``timeout`` passed."""
    sock.settimeout(timeout)
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
            head, sep, body = out.partition(b"\r\n\r\n")
            lengths = [
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ]
            if sep and lengths and len(body) >= lengths[0]:
                break
    except (TimeoutError, ConnectionResetError):
        pass
    return out


def _status(reply: bytes) -> int:
    return int(reply.split(b" ", 2)[1]) if reply.startswith(b"HTTP/1.1 ") else 0


def _upload_request(market: Market, user: str, wheel: Path, filename: str = "") -> bytes:
    """A whole upload as twine sends it, as bytes (head and body)."""
    data = wheel.read_bytes()
    fields = {
        ":action": "file_upload",
        "protocol_version": "1",
        "filetype": "bdist_wheel",
        "sha256_digest": hashlib.sha256(data).hexdigest(),
    }
    boundary = uuid.uuid4().hex
    body = (
        b"".join(
            f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
            for k, v in fields.items()
        )
        + f'--{boundary}\r\nContent-Disposition: form-data; name="content"; '.encode()
        + b'filename="'
        + (filename or wheel.name).encode("latin-1")
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + data
        + f"\r\n--{boundary}--\r\n".encode()
    )
    token = base64.b64encode(f"__token__:{market.tokens[user]}".encode()).decode()
    head = (
        f"POST /legacy/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
        f"Authorization: Basic {token}\r\n\r\n"
    )
    return head.encode() + body


class Trickle:
    """Uploads whose bodies arrive a byte at a time, one byte per socket every 0.1 s, for
    as long as the block runs (a slow link, or an attacker)."""

    def __init__(self, market: Market, requests: list[bytes]) -> None:
        self.socks: list[socket.socket] = []
        self.rest: list[bytes] = []
        for request in requests:
            sock = socket.create_connection(_address(market))
            cut = request.index(b"\r\n\r\n") + 10  # the head and a few bytes of the body
            sock.sendall(request[:cut])
            self.socks.append(sock)
            self.rest.append(request[cut:-1])  # never the last byte
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._send, daemon=True)

    def _send(self) -> None:
        while not self._stop.wait(0.1):
            for i, sock in enumerate(self.socks):
                if self.rest[i]:
                    try:
                        sock.sendall(self.rest[i][:1])
                    except OSError:  # the server answered and closed it
                        self.rest[i] = b""
                    self.rest[i] = self.rest[i][1:]

    def __enter__(self) -> Trickle:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for sock in self.socks:
            sock.close()


def _statuses(market: Market, paths: list[str], rounds: int) -> dict[str, set[int]]:
    """Each path fetched ``rounds`` times, eight at a time: the statuses seen per path."""
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda p: (p, market.get(p)[0]), paths * rounds))
    seen: dict[str, set[int]] = {}
    for path, status in got:
        seen.setdefault(path, set()).add(status)
    return seen


def _pending(market: Market, project: str) -> bool:
    status, _, body = market.get(f"/api/packages/{project}")
    return status == 200 and bool(json.loads(body)["files"])


def _eventually(check: Callable[[], bool], what: str) -> None:
    for _ in range(600):
        if check():
            return
        threading.Event().wait(0.1)
    raise AssertionError(what)


# --- 2. uploads held a database connection for their whole request -------------------------


def test_slow_and_waiting_uploads_hold_no_database_connection(
    crowded: Market, tmp_path: Path
) -> None:
    waiting = [handmade_wheel(tmp_path, f"crowd-wait-{i}", "1.0", {}) for i in range(3)]
    slow = [handmade_wheel(tmp_path, f"crowd-slow-{i}", "1.0", {}) for i in range(4)]
    # Three whole uploads, each waiting (600 s) for a verdict that nobody gives.
    waiters = [socket.create_connection(_address(crowded)) for _ in waiting]
    try:
        for sock, wheel in zip(waiters, waiting, strict=True):
            sock.sendall(_upload_request(crowded, "alice", wheel))
        for i in range(len(waiting)):
            _eventually(lambda i=i: _pending(crowded, f"crowd-wait-{i}"), "upload not accepted")
        # Four more whose bodies trickle in, while others read the index.
        requests = [_upload_request(crowded, "bob", wheel) for wheel in slow]
        with Trickle(crowded, requests):
            seen = _statuses(crowded, ["/simple/", "/api/packages", "/", "/simple/opm-x/"], 10)
    finally:
        for sock in waiters:
            sock.close()
    assert seen == {"/simple/": {200}, "/api/packages": {200}, "/": {200}, "/simple/opm-x/": {404}}


def test_an_upload_whose_client_left_holds_no_wait_and_the_server_stops(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """An upload waits (600 s here) for a verdict nobody gives; its client leaves. The wait
    ends with the connection, so a server asked to stop (SIGTERM) stops: before, it held
    every such wait to its end and had to be killed."""
    gen = start_market(
        tmp_path_factory.mktemp("left"), validation_workers=0, flags=("--upload-wait", "600")
    )
    market = next(gen)
    try:
        wheel = handmade_wheel(tmp_path, "left-behind", "1.0", {})
        with socket.create_connection(_address(market)) as sock:
            sock.sendall(_upload_request(market, "alice", wheel))
            _eventually(lambda: _pending(market, "left-behind"), "upload not accepted")
        market.proc.terminate()
        # uvicorn stops, then ends by the signal it caught: far less than the 600 s the
        # upload would wait
        assert market.proc.wait(120) in (0, -signal.SIGTERM)
    finally:
        gen.close()


def test_a_kept_simple_page_is_served_while_the_database_is_away(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.new_database("kept")
    name = url.rpartition("/")[2]
    admin = create_engine(postgres.url("postgres"), isolation_level="AUTOCOMMIT")
    env = {"OPMARKET_INDEX_CACHE_TTL_S": "0"}  # the change log read on every request
    try:
        for market in start_market(tmp_path / "m", validation_workers=0, database_url=url, env=env):
            assert market.get("/simple/")[0] == 200  # rendered, and kept
            with admin.connect() as conn:  # the database goes away: no connection works
                conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS false'))
                conn.execute(
                    text(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
                    ),
                    {"n": name},
                )
            assert market.get("/simple/")[0] == 200
            with admin.connect() as conn:
                conn.execute(text(f'ALTER DATABASE "{name}" WITH ALLOW_CONNECTIONS true'))
            assert market.get("/simple/")[0] == 200
    finally:
        admin.dispose()


# --- 2. caps on uploads at once, and a deadline for a whole body ---------------------------


def _answered(trickle: Trickle) -> list[tuple[int, bytes]]:
    """The uploads of ``trickle`` answered so far, once one is (the rest are still being
    received): (index, answer)."""
    readable, _, _ = select.select(trickle.socks, [], [], 60)
    readable, _, _ = select.select(trickle.socks, [], [], 0)  # any others, at that moment
    return [(trickle.socks.index(s), _reply(s, 10)) for s in readable]


def _refusal(answered: list[tuple[int, bytes]], status: int, code: str) -> None:
    assert [_status(reply) for _, reply in answered] == [status], answered
    reply = answered[0][1]
    assert b"\r\nretry-after: 10\r\n" in reply.lower()
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == code


def test_uploads_over_the_caps_are_429_and_503_with_retry_after(
    strict: Market, tmp_path: Path
) -> None:
    wheels = [handmade_wheel(tmp_path, f"capped-{i}", "1.0", {}) for i in range(5)]
    # Whichever order they are taken in, one of three uploads with one token is refused.
    alice = [_upload_request(strict, "alice", w) for w in wheels[:3]]
    with Trickle(strict, alice) as first:
        _refusal(_answered(first), 429, "too-many-uploads")
        # Two of alice's hold their slots: one of two more (another token's) is refused.
        bob = [_upload_request(strict, "bob", w) for w in wheels[3:]]
        with Trickle(strict, bob) as second:
            _refusal(_answered(second), 503, "busy")
    assert strict.get("/simple/")[0] == 200


def test_a_body_that_trickles_past_the_deadline_is_408(hurried: Market, tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "deadline", "1.0", {})
    # Each byte comes well within the 60 s allowed between parts; the whole never does.
    with Trickle(hurried, [_upload_request(hurried, "alice", wheel)]) as trickle:
        reply = _reply(trickle.socks[0], 60)
    assert _status(reply) == 408, reply[:200]
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "body-deadline"
    assert hurried.get("/simple/")[0] == 200


# --- 13. names that are not project names never reach a redirect -----------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/simple/foo%0d%0aSet-Cookie:%20x=1/",
        "/simple/%C4%B1nvalid-%C3%A9/",  # a dotless i, an e with an acute accent
        "/simple/foo%0a/",
        "/simple/-foo/",
    ],
)
def test_an_invalid_project_name_is_404_before_any_redirect(strict: Market, path: str) -> None:
    head = _get_head(strict, path)
    assert head.startswith(b"http/1.1 404 "), head
    assert b"set-cookie" not in head
    assert b"location" not in head


def test_a_valid_unknown_name_still_goes_upstream(strict: Market) -> None:
    head = _get_head(strict, "/simple/Some.Project_x/")
    assert head.startswith(b"http/1.1 307 "), head
    assert b"\r\nlocation: http://127.0.0.1:9/simple/some-project-x/\r\n" in head


def _get_head(market: Market, path: str) -> bytes:
    """The head of the answer to GET ``path``, sent as it is (not followed), lower case."""
    with socket.create_connection(_address(market)) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        return _reply(sock, 10).partition(b"\r\n\r\n")[0].lower()


# --- 14. a NUL in the upload form ----------------------------------------------------------


def test_a_nul_in_the_uploaded_file_name_is_400(strict: Market, tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "nul-name", "1.0", {})
    with socket.create_connection(_address(strict)) as sock:
        sock.sendall(_upload_request(strict, "bob", wheel, "nul_name-1.0\0-py3-none-any.whl"))
        reply = _reply(sock, 30)
    assert _status(reply) == 400, reply[:300]
    assert json.loads(reply.partition(b"\r\n\r\n")[2])["error"]["code"] == "bad-form"
    assert strict.get("/simple/")[0] == 200
