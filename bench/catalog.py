"""The catalog at hub scale: search, package pages and the simple index over N projects, on
SQLite and on PostgreSQL.

For each database: ``opmarket seed N`` fills a fresh data folder (PostgreSQL: a server of
Debian's ``postgresql`` package started here, as tests/web/postgres.py starts it), one
``opmarket serve`` process serves it on 127.0.0.1, then:

- search: ``/api/packages?q=...&limit=50`` with a fixed mix of one- and two-word queries,
  op names, and device, dtype and status filters; sequential requests on one keep-alive
  connection, p99 of their latency;
- ``/``: the catalog's first HTML page, the same way (and pages at random offsets, which
  OFFSET makes slower the deeper they are);
- package page: ``/project/<name>/`` (HTML) of random projects, the same way;
- a crawler's deep pages of ``/api/packages?limit=50``: at random offsets, and by cursor
  (``after=`` a name at a random depth), the same way;
- simple page: ``/simple/<name>/`` of random projects with wrk (2 threads, 16 connections).

The search is then measured again under a fixed background load the bench starts itself
(two CPU-bound processes for the whole measurement, as validations beside the index would
be), so busy-machine figures compare from run to run. It prints the query plans of the
search's SQL (EXPLAIN) to show the indexes in use. The last line is the result:

    catalog: search p99 X ms, package page p99 Y ms, simple page Z req/s at N projects
    (sqlite); search p99 X2 ms, package page p99 Y2 ms, simple page Z2 req/s (postgresql);
    loaded search p99 L1 ms (sqlite), L2 ms (postgresql)

    python bench/catalog.py [--projects 100000] [--requests 400] [--duration 10]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import importlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))
from index import LOAD_PROCESSES, cpu_load, free_port, stop, wait_up, wrk  # bench/index.py

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]


def _postgres_module() -> Any:
    """tests/web/postgres.py, imported as the test package's module it is (it imports its
    sibling ports.py)."""
    if str(ROOT) not in sys.path:
        sys.path.append(str(ROOT))
    return importlib.import_module("tests.web.postgres")


def searches(rng: random.Random, count: int) -> list[str]:
    """``count`` search query strings, a fixed mix."""
    from opmarket.web.catalog._seed import SEED_WORDS

    out = []
    for n in range(count):
        params: dict[str, str] = {"limit": "50"}
        kind = n % 6
        if kind == 0:
            params["q"] = rng.choice(SEED_WORDS)
        elif kind == 1:
            params["q"] = " ".join(rng.sample(SEED_WORDS, 2))
        elif kind == 2:
            params["q"] = f"Vision>{rng.choice(SEED_WORDS).capitalize()}"
        elif kind == 3:
            params |= {"q": rng.choice(SEED_WORDS), "device": "GPU"}
        elif kind == 4:
            params |= {"device": "CPU", "dtype": rng.choice(("float", "half", "int8"))}
        else:
            params |= {"q": rng.choice(SEED_WORDS)[:3], "status": "rejected"}
        out.append("/api/packages?" + urlencode(params))
    return out


def latencies(port: int, paths: list[str]) -> list[float]:
    """Milliseconds per request, sequential, one keep-alive connection; any answer but
    200 fails the run."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    out = []
    try:
        for path in paths:
            t = time.perf_counter()
            conn.request("GET", path)
            response = conn.getresponse()
            response.read()
            out.append((time.perf_counter() - t) * 1000)
            if response.status != 200:
                raise SystemExit(f"GET {path}: {response.status}")
    finally:
        conn.close()
    return out


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def show_plans(url: str) -> None:
    """EXPLAIN of the SQL that a few searches run, as the catalog runs it."""
    from sqlalchemy import event

    from opmarket.web.catalog._catalog import search_packages
    from opmarket.web.catalog._db import Database
    from opmarket.web.catalog._search import SearchQuery

    db = Database(url, migrate_now=False)
    seen: list[tuple[str, Any]] = []

    def capture(_c: Any, _cur: Any, statement: str, params: Any, *_: Any) -> None:
        if not statement.startswith("BEGIN"):  # SQLite's BEGIN, which opmarket emits itself
            seen.append((statement, params))

    event.listen(db.engine, "before_cursor_execute", capture)
    with db.session() as session:
        # A broad word, a rare one (a number in one project's name), a device and dtype,
        # a status: each search's count, then its page.
        for args in (("attention",), ("777",), ("", "GPU", "half"), ("", "", "", "rejected")):
            seen.clear()
            fields = ("q", "device", "dtype", "status")[: len(args)]
            query = SearchQuery(**dict(zip(fields, args, strict=True)))
            search_packages(session, query, limit=50)
            prefix = "EXPLAIN QUERY PLAN " if url.startswith("sqlite") else "EXPLAIN "
            ran = list(seen)  # the EXPLAINs below are captured too
            for (statement, params), what in zip(ran, ("count", "page"), strict=True):
                with db.engine.connect() as conn:
                    plan = conn.exec_driver_sql(prefix + statement, params).all()
                print(f"  plan of search{args}, {what}:", flush=True)
                for row in plan:
                    print(f"    {row[-1]}", flush=True)
    db.dispose()


@contextlib.contextmanager
def serving(data: Path, env: dict[str, str]) -> Iterator[int]:
    port = free_port()
    log = data / "serve.log"
    proc = subprocess.Popen(
        [
            str(BIN / "opmarket"),
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--data",
            str(data),
            "--validation-workers",
            "0",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(log, "wb"),  # noqa: SIM115
        start_new_session=True,
    )
    try:
        wait_up(f"http://127.0.0.1:{port}/simple/", proc, log, timeout=120)
        yield port
    finally:
        stop(proc)


def measure(
    kind: str, url: str, projects: int, args: argparse.Namespace, work: Path
) -> tuple[str, float]:
    """Seed, serve and measure one database: its part of the last line, and its search p99
    under the background load."""
    data = work / kind
    data.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPMARKET_")}
    if url:
        env["OPMARKET_DATABASE_URL"] = url
    t = time.monotonic()
    subprocess.run(
        [str(BIN / "opmarket"), "seed", str(projects), "--data", str(data)],
        env=env,
        check=True,
        stderr=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
    )
    print(f"{kind}: seeded {projects} projects in {time.monotonic() - t:.1f} s", flush=True)
    show_plans(url or f"sqlite:///{data / 'opmarket.sqlite3'}")
    rng = random.Random(1)
    with serving(data, env) as port:
        names = [  # projects whose latest file is validated: all on /simple/
            p["normalized"]
            for offset in range(0, min(projects, 5000), 1000)
            for p in _json(port, f"/api/packages?limit=1000&offset={offset}")["packages"]
            if p["status"] == "validated"
        ]
        latencies(port, searches(rng, 30) + ["/"] * 10)  # warm: connections, templates
        search = latencies(port, searches(rng, args.requests))
        pages = max(projects // 50, 1)
        home = latencies(port, ["/"] * args.requests)
        deep = latencies(port, [f"/?page={rng.randint(1, pages)}" for _ in range(args.requests)])
        package = latencies(port, [f"/project/{rng.choice(names)}/" for _ in range(args.requests)])
        print(
            f"{kind}: search p50 {sorted(search)[len(search) // 2]:.1f} ms p99 {p99(search):.1f}"
            f" ms; / p99 {p99(home):.1f} ms; /?page=random p99 {p99(deep):.1f} ms; "
            f"package page p99 {p99(package):.1f} ms "
            f"({args.requests} requests each)",
            flush=True,
        )
        # A crawler's deep pages of the JSON API: by offset, and by cursor (after=) from
        # names at random depths (found untimed, by offset).
        api_offset = latencies(
            port,
            [
                f"/api/packages?limit=50&offset={rng.randint(0, max(projects - 50, 0))}"
                for _ in range(args.requests)
            ],
        )
        cursors = [
            page["packages"][0]["normalized"]
            for page in (
                _json(port, f"/api/packages?limit=1&offset={rng.randint(0, projects - 1)}")
                for _ in range(20)
            )
            if page["packages"]
        ]
        api_cursor = latencies(
            port,
            [f"/api/packages?limit=50&after={rng.choice(cursors)}" for _ in range(args.requests)],
        )
        print(
            f"{kind}: API page at a random depth p99 {p99(api_offset):.1f} ms by offset, "
            f"{p99(api_cursor):.1f} ms by cursor (after=) ({args.requests} requests each)",
            flush=True,
        )
        rps, simple_p99 = wrk(f"http://127.0.0.1:{port}", names, "", args.duration, work)
        print(f"{kind}: simple page {rps:.0f} req/s, p99 {simple_p99:.1f} ms", flush=True)
        with cpu_load():
            loaded = latencies(port, searches(rng, args.requests))
        print(
            f"{kind}: loaded ({LOAD_PROCESSES} CPU-bound processes) search "
            f"p50 {sorted(loaded)[len(loaded) // 2]:.1f} ms p99 {p99(loaded):.1f} ms",
            flush=True,
        )
    idle = (
        f"search p99 {p99(search):.1f} ms, package page p99 {p99(package):.1f} ms, "
        f"simple page {rps:.0f} req/s"
    )
    return idle, p99(loaded)


def _json(port: int, path: str) -> Any:
    import json

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=400, help="per latency measurement")
    parser.add_argument("--duration", type=int, default=10, help="seconds of wrk")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    postgres = _postgres_module()
    bin_dir = postgres.pg_bin()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is not installed (Debian: apt-get install postgresql)")
    work = Path(tempfile.mkdtemp(prefix="opmarket-bench-"))
    try:
        sqlite, sqlite_loaded = measure("sqlite", "", args.projects, args, work)
        with postgres.running_postgres(bin_dir) as server:
            url = server.new_database("bench")
            pg, pg_loaded = measure("postgresql", url, args.projects, args, work)
        print(
            f"catalog: {sqlite} at {args.projects} projects (sqlite); {pg} (postgresql); "
            f"loaded search p99 {sqlite_loaded:.1f} ms (sqlite), {pg_loaded:.1f} ms (postgresql)"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
