"""Scale-out on one machine: two serving-only ``opmarket serve`` processes and two
``opmarket worker`` processes share one database and one file store; 50 uploads at once
(and some of them twice, to the other server) each end validated or rejected exactly once,
and every validated file shows on both servers' simple pages after its verdict, never
before, and no rejected one ever does. How soon is a matter of the machine's load: the page
caches check the catalog's change log every second (bench/index.py measures serving)."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import File, Job, Project, Release

from .conftest import (
    OPMARKET,
    Backend,
    Served,
    _wait_up,
    clean_env,
    start_serve,
    users_with_tokens,
)
from .plugins import handmade_wheel, manifest_for, plugin_source

UPLOADS = 50
WRONG = range(0, UPLOADS, 7)  # their kernel disagrees with its reference: rejected
# These are also uploaded to the other server at the same moment. None is in WRONG: the same
# bytes of a rejected file sent again ask for another validation by design, so a second
# upload that lands after a quick rejection would rightly queue a second job.
TWICE = range(1, 6)
# Serving only (the workers validate); uploads answer at once ("pending"): the test follows
# every verdict itself, from the database and the simple pages.
# One token sends all 55 at once: more than the default cap per token (8 per process).
SERVE_ONLY = (
    "--validation-workers",
    "0",
    "--upload-wait",
    "0",
    "--max-uploads-per-token",
    "64",
)


@pytest.fixture
def database_url(tmp_path: Path, database: Backend) -> str:
    """The shared catalog: SQLite in a file, or a new database on the session's PostgreSQL
    server (the ``database`` fixture runs this module on both)."""
    return database.new_url("topology") or f"sqlite:///{tmp_path / 'catalog.sqlite3'}"


@dataclass
class Topology:
    data: Path
    env: dict[str, str]
    servers: list[str]
    token: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)


@pytest.fixture
def topology(tmp_path: Path, database_url: str) -> Iterator[Topology]:
    data = tmp_path / "market"
    env = clean_env(OPMARKET_DATABASE_URL=database_url)
    token = users_with_tokens(data, env, ("alice",))["alice"]
    top = Topology(data, env, [], token)
    logs = []
    served: list[Served] = []
    try:
        for i in range(2):
            served.append(
                start_serve(["--data", str(data), *SERVE_ONLY], env, tmp_path / f"server{i}.log")
            )
            top.procs.append(served[-1].proc)
            top.servers.append(served[-1].url)
            _wait_up(top.servers[-1], top.procs[-1])
        for i in range(2):
            log = open(tmp_path / f"worker{i}.log", "wb")  # noqa: SIM115  # closed below
            logs.append(log)
            top.procs.append(
                subprocess.Popen(
                    [OPMARKET, "worker", "--data", str(data)],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                )
            )
        yield top
    finally:
        for proc in top.procs:
            proc.terminate()
        for proc in top.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
        for server in served:
            server.copier.join(15)  # its log written to the end (bounded: see Served.stop)
        # Shown by pytest only when the test failed: what each process said last.
        for path in sorted(tmp_path.glob("*.log")):
            tail = path.read_bytes()[-6000:].decode(errors="replace")
            print(f"--- {path.name} (last lines) ---\n{tail}")


def _wheels(folder: Path) -> list[Path]:
    """50 small plugin wheels, written with zipfile (building each would take minutes)."""
    out = []
    for i in range(UPLOADS):
        dist, package = f"opm-top-{i:02d}", f"opm_top_{i:02d}"
        source = plugin_source("Test>Top", 2, kernel_factor=3 if i in WRONG else None)
        module = folder / f"{package}.py"
        module.write_text(plugin_source("Test>Top", 2))
        info = f"{package}-1.0.0.dist-info"
        out.append(
            handmade_wheel(
                folder,
                dist,
                "1.0.0",
                {
                    f"{package}/__init__.py": source.encode(),
                    f"{package}/opmarket.opset.json": manifest_for(module, dist, "1.0.0").encode(),
                    f"{info}/entry_points.txt": f"[opmarket]\n{package} = {package}\n".encode(),
                },
            )
        )
    return out


def _listed(url: str) -> set[str]:
    with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=10) as r:
        return set(re.findall(r'href="[^"]*/simple/([^/"]+)/"', r.read().decode()))
    return set()


@pytest.mark.slow
def test_two_servers_and_two_workers_take_50_uploads_at_once(
    topology: Topology, database_url: str, tmp_path: Path
) -> None:
    from twine.package import PackageFile
    from twine.repository import Repository

    top = topology
    wheels = _wheels(tmp_path)
    first_seen: list[dict[str, datetime]] = [{}, {}]
    done = threading.Event()

    def watch() -> None:  # each server's project index, every 0.1 s
        while not done.is_set():
            for seen, server in zip(first_seen, top.servers, strict=True):
                listed = _listed(f"{server}/simple/")
                # Taken after the answer: a project listed was validated before this.
                now = datetime.now(UTC).replace(tzinfo=None)
                for name in listed - set(seen):
                    seen[name] = now
            time.sleep(0.1)

    def upload(job: tuple[int, Path]) -> int:
        i, wheel = job
        repo = Repository(f"{top.servers[i % 2]}/legacy/", "__token__", top.token, True)
        try:
            return int(repo.upload(PackageFile.from_filename(str(wheel), None)).status_code)
        finally:
            repo.close()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    jobs = list(enumerate(wheels)) + [(i + 1, wheels[i]) for i in TWICE]
    with contextlib.redirect_stdout(io.StringIO()), ThreadPoolExecutor(len(jobs)) as pool:
        answers = list(pool.map(upload, jobs))  # (twine prints a line per upload)
    assert answers == [200] * len(jobs), answers  # an identical re-upload is answered 200
    db = Database(database_url, migrate_now=False)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            with db.session() as session:
                pending = session.scalar(
                    select(func.count()).select_from(File).where(File.status == "pending")
                )
            if pending == 0:
                break
            time.sleep(0.2)
        with db.session() as session:
            validated = set(
                session.scalars(
                    select(Project.normalized)
                    .join(Release, Release.project_id == Project.id)
                    .join(File, File.release_id == Release.id)
                    .where(File.status == "validated")
                )
            )
        # Every validated project arrives on both servers' index (eventually: as soon as
        # the load lets the page caches look).
        while time.monotonic() < deadline and not all(validated <= set(s) for s in first_seen):
            time.sleep(0.2)
        done.set()
        watcher.join(10)
        with db.session() as session:
            files = session.execute(
                select(File.id, File.filename, File.status, File.validated, Project.normalized)
                .join(Release, File.release_id == Release.id)
                .join(Project, Release.project_id == Project.id)
            ).all()
            jobs_rows = session.execute(select(Job.payload, Job.status, Job.attempts)).all()
    finally:
        db.dispose()
    # Nothing lost, nothing doubled: one row per wheel, one job per row, run once, done.
    assert sorted(f.filename for f in files) == sorted(w.name for w in wheels)
    assert sorted(int(p["file_id"]) for p, _, _ in jobs_rows) == sorted(f.id for f in files)
    assert {(s, a) for _, s, a in jobs_rows} == {("done", 1)}
    wrong = {wheels[i].name for i in WRONG}
    assert {f.filename for f in files if f.status == "rejected"} == wrong
    assert {f.filename for f in files if f.status == "validated"} == {
        w.name for w in wheels
    } - wrong
    # Every validated file arrived on each server's simple index, after its verdict; no
    # rejected one was ever listed.
    for seen, server in zip(first_seen, top.servers, strict=True):
        for f in files:
            if f.status != "validated":
                assert f.normalized not in seen
                continue
            assert f.normalized in seen, (server, f.filename)
            assert f.validated <= seen[f.normalized], (server, f.filename)
            with urllib.request.urlopen(f"{server}/simple/{f.normalized}/", timeout=10) as r:
                assert f.filename in r.read().decode()


def _children(pid: int) -> list[str]:
    """The command lines of a process's children (Linux /proc)."""
    out = []
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        with contextlib.suppress(OSError):
            out.append(Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


def test_serve_workers_starts_that_many_processes_each_with_the_http_limits(
    tmp_path: Path, database_url: str
) -> None:
    flags = ("--workers", "2", "--max-header-bytes", "2048", *SERVE_ONLY)
    served = start_serve(
        ["--data", str(tmp_path / "m"), *flags], clean_env(OPMARKET_DATABASE_URL=database_url)
    )
    proc, url = served.proc, served.url
    try:
        _wait_up(url, proc)
        deadline = time.monotonic() + 30
        while len(spawned := [c for c in _children(proc.pid) if "spawn_main" in c]) < 2:
            assert time.monotonic() < deadline, _children(proc.pid)
            time.sleep(0.1)
        assert len(spawned) == 2
        big = {"X-Filler": "x" * 4096}
        for _ in range(20):  # fresh connections, taken by either process
            request = urllib.request.Request(f"{url}/simple/", headers=big)
            with pytest.raises(urllib.error.HTTPError) as answer:
                urllib.request.urlopen(request, timeout=10)
            answer.value.close()
            assert answer.value.code == 431
            with urllib.request.urlopen(f"{url}/simple/", timeout=10) as r:
                assert r.status == 200
    finally:
        served.stop(30)
