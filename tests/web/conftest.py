"""The web suite's fixtures: test plugin wheels (built once per run), the database each
market runs on (SQLite, and a real PostgreSQL server started here: see ``database``) and a
real ``opmarket serve`` on 127.0.0.1, stopped at the end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .plugins import build_plugin, handmade_wheel
from .postgres import PostgresServer, pg_bin, running_postgres
from .sandbox_required import pytest_runtest_makereport  # noqa: F401  (a hook: see there)

BIN = Path(sys.executable).parent
OPMARKET = str(BIN / "opmarket")


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without pip's or opmarket's settings from outside the test."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "OPMARKET_", "UV_", "TWINE_"))
    }
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    env.update(extra)
    return env


#: Web test modules whose tests run on SQLite only, and why; every other test that uses
#: ``database`` (through ``market``, ``uploaded``, ...) runs on SQLite and on PostgreSQL.
#: What these read from the database, test_catalog and test_simple check on both; twice
#: they would add minutes to CI (Chromium; virtual environments and installs).
SQLITE_ONLY: dict[str, str] = {
    "test_browser": "Chromium renders the catalog's HTML, the same from either database",
    "test_install": "pip and uv install from /simple/, whose queries test_simple runs on both",
}


@dataclass(frozen=True)
class Backend:
    """A database kind for markets: SQLite in each data folder, or a PostgreSQL server
    shared by the session with a new database per market."""

    name: str
    server: PostgresServer | None = None

    def new_url(self, label: str) -> str:
        """A fresh database's URL ("" for SQLite: the data folder's default)."""
        return "" if self.server is None else self.server.new_database(label)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the session; skips when Debian's postgresql is missing."""
    bin_dir = pg_bin()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL is not installed (pg_ctl and initdb: Debian package postgresql, "
            "which scripts/setup installs when run as root)"
        )
    pytest.importorskip("psycopg", reason="the PostgreSQL driver psycopg (postgres extra)")
    with running_postgres(bin_dir) as server:
        yield server


@pytest.fixture(scope="session")
def database(request: pytest.FixtureRequest) -> Backend:
    """The database under test, parametrized by pytest_generate_tests below."""
    if request.param == "postgresql":
        return Backend("postgresql", request.getfixturevalue("postgres"))
    return Backend("sqlite")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "database" in metafunc.fixturenames:
        module = metafunc.module.__name__.rpartition(".")[2]
        kinds = ["sqlite"] if module in SQLITE_ONLY else ["sqlite", "postgresql"]
        metafunc.parametrize("database", kinds, indirect=True, scope="session")


@dataclass
class Wheels:
    double_1_0: Path
    double_1_1: Path
    double_breaking: Path  # 1.2.0 drops int32: breaking, needs 2.0.0
    double_for_bob: Path  # 1.5.0
    double_uv: Path  # 1.6.0, published with uv
    wrong: Path  # a kernel that disagrees with its reference
    bomb: Path
    traversal: Path
    symlink: Path


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    d = tmp_path_factory.mktemp("wheels")
    odd = d / "handmade"
    odd.mkdir()
    (odd / "bomb").mkdir()
    (odd / "traversal").mkdir()
    (odd / "symlink").mkdir()
    return Wheels(
        double_1_0=build_plugin(d, "opm-double", "1.0.0", op_name="Test>Double"),
        double_1_1=build_plugin(d, "opm-double", "1.1.0", op_name="Test>Double"),
        double_breaking=build_plugin(
            d, "opm-double", "1.2.0", op_name="Test>Double", types=("float",)
        ),
        double_for_bob=build_plugin(d, "opm-double", "1.5.0", op_name="Test>Double"),
        double_uv=build_plugin(d, "opm-double", "1.6.0", op_name="Test>Double"),
        wrong=build_plugin(
            d, "opm-wrong", "1.0.0", op_name="Test>Wrong", factor=2, kernel_factor=3
        ),
        bomb=handmade_wheel(
            odd / "bomb", "opm-bomb", "1.0.0", {"opm_bomb/zeros.bin": b"\0" * (64 * 1024 * 1024)}
        ),
        traversal=handmade_wheel(
            odd / "traversal", "opm-evil", "1.0.0", {"../../evil.py": b"print('escaped')\n"}
        ),
        symlink=handmade_wheel(odd / "symlink", "opm-link", "1.0.0", {}, symlink="/etc/passwd"),
    )


@dataclass
class Market:
    """A running ``opmarket serve`` and what the tests need to talk to it."""

    url: str
    data: Path
    proc: subprocess.Popen[bytes]
    tokens: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # OPMARKET_DATABASE_URL, if any

    def get(
        self, path: str, headers: dict[str, str] | None = None
    ) -> tuple[int, dict[str, str], bytes]:
        request = urllib.request.Request(self.url + path, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=30) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def json(self, path: str) -> Any:
        status, _, body = self.get(path)
        assert status == 200, (path, status, body)
        return json.loads(body)

    def blobs(self) -> set[str]:
        return {p.name for p in (self.data / "files").rglob("*") if p.is_file()}

    def wait_for(self, project: str, filename: str, timeout: float = 90) -> dict[str, Any]:
        """The file's catalog entry once validation decided (validated or rejected)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, _, body = self.get(f"/api/packages/{project}")
            if status == 200:
                for f in json.loads(body)["files"]:
                    if f["filename"] == filename and f["status"] != "pending":
                        return dict(f)
            time.sleep(0.2)
        raise AssertionError(f"{filename} was not validated within {timeout} s")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [OPMARKET, *args, "--data", str(self.data)],
            capture_output=True,
            text=True,
            env=clean_env(**self.env),
            check=False,
        )


#: The line in which ``opmarket serve`` says where it listens, the port it bound included.
SERVING = re.compile(r"^opmarket: serving .+ on (http://\S+?)/$")


@dataclass
class Served:
    """An ``opmarket serve`` process, the URL it said it serves, and the thread that copies
    its output on into a log."""

    proc: subprocess.Popen[bytes]
    url: str
    copier: threading.Thread

    def stop(self, timeout: float = 15) -> None:
        """Terminate it (killed when it takes longer than ``timeout``), its output all copied."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.copier.join(timeout)  # bounded: a child it left may hold the pipe open


def start_serve(
    args: list[str], env: dict[str, str], log: Path | None = None, timeout: float = 60
) -> Served:
    """``opmarket serve --host 127.0.0.1 --port 0 ARGS``: the URL comes from the line in
    which it says the port it bound, so no port is chosen here (a free port picked here
    could be taken before the server binds it). Its output goes into ``log`` (or nowhere).
    A server that exits, or says nothing of where it serves within ``timeout`` seconds
    (then killed), fails with the tail of its output."""
    proc = subprocess.Popen(
        [OPMARKET, "serve", "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    assert proc.stdout is not None
    output = proc.stdout
    said: list[bytes] = []  # its output until it says where it serves
    url: list[str] = []
    settled = threading.Event()
    sink = open(log or os.devnull, "wb")  # noqa: SIM115  # closed by the copier at the end

    def copy() -> None:
        with sink, output:  # until the process and whatever it started close the pipe
            for line in output:
                sink.write(line)
                sink.flush()  # a failing test shows the log as far as it got
                if not settled.is_set():
                    said.append(line)
                    found = SERVING.match(line.decode(errors="replace").rstrip("\n"))
                    if found:
                        url.append(found.group(1))
                        settled.set()
        settled.set()  # its output ended without the line

    copier = threading.Thread(target=copy, daemon=True)
    copier.start()
    if settled.wait(timeout) and url:
        return Served(proc, url[0], copier)
    exited = settled.is_set()
    try:
        code = proc.wait(5 if exited else 0)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    copier.join(5)
    tail = b"".join(said).decode(errors="replace")[-3000:]
    why = f"exited with {code}" if exited else f"said nothing of where it serves in {timeout:g} s"
    raise AssertionError(f"opmarket serve {why}: {tail}")


def _wait_up(url: str, proc: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"opmarket serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/simple/", timeout=2):
                return
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    raise AssertionError("opmarket serve did not come up")


@pytest.fixture(scope="session")
def market(tmp_path_factory: pytest.TempPathFactory, database: Backend) -> Iterator[Market]:
    # Uploads wait for their verdict longer than a validation may take: twine's exit status
    # is the verdict's in every test.
    yield from start_market(
        tmp_path_factory.mktemp("market"),
        validation_workers=2,
        flags=("--upload-wait", "600"),
        database_url=database.new_url("market"),
    )


def start_market(
    data: Path,
    *,
    validation_workers: int,
    flags: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    database_url: str = "",
) -> Iterator[Market]:
    """A running ``opmarket serve`` on ``data`` (with more ``flags`` and ``env``; on
    ``database_url``, default SQLite in ``data``) with users alice and bob and their tokens;
    stopped when the generator is closed."""
    env = {**(env or {}), **({"OPMARKET_DATABASE_URL": database_url} if database_url else {})}
    tokens = users_with_tokens(data, clean_env(**env), ("alice", "bob"))
    args = ["--data", str(data), "--validation-workers", str(validation_workers), *flags]
    served = start_serve(args, clean_env(**env), data / "server.log")
    market = Market(served.url, data, served.proc, env=env)
    market.tokens.update(tokens)
    try:
        _wait_up(market.url, served.proc)
        yield market
    finally:
        served.stop()


# What `opmarket users add NAME` and `opmarket tokens create NAME` do (the same calls on the
# same state, read from --data and the environment as the CLI reads them), for several users
# in one process: four CLI processes took a few seconds of each market's start, and the CLI
# itself is tested in test_cli.py. Prints each user's token, one a line.
_USERS_WITH_TOKENS = """\
import sys
from pathlib import Path

from opmarket.cli._web import state_from
from opmarket.web._auth import add_user, create_token

state = state_from(Path(sys.argv[1]))
for name in sys.argv[2:]:
    with state.db.transaction() as session:
        add_user(session, name)
    with state.db.transaction() as session:
        print(create_token(session, name))
state.db.dispose()
"""


def users_with_tokens(data: Path, env: dict[str, str], names: tuple[str, ...]) -> dict[str, str]:
    """Add the users ``names`` to the market on ``data``; each one's new API token."""
    done = subprocess.run(
        [sys.executable, "-c", _USERS_WITH_TOKENS, str(data), *names],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return dict(zip(names, done.stdout.split(), strict=True))


def twine(market: Market, token: str, wheel: Path) -> subprocess.CompletedProcess[str]:
    """``twine upload`` of one wheel to the market with an API token."""
    return subprocess.run(
        [
            str(BIN / "twine"),
            "upload",
            "--non-interactive",
            "--disable-progress-bar",
            "--verbose",
            "--repository-url",
            f"{market.url}/legacy/",
            "-u",
            "__token__",
            "-p",
            token,
            str(wheel),
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="session")
def uploaded(market: Market, wheels: Wheels) -> Market:
    """The market with alice's opm-double 1.0.0, uploaded with twine and validated."""
    done = twine(market, market.tokens["alice"], wheels.double_1_0)
    assert done.returncode == 0, done.stdout + done.stderr
    entry = market.wait_for("opm-double", wheels.double_1_0.name)
    assert entry["status"] == "validated", entry["log"]
    return market
