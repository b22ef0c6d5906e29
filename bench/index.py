"""Requests per second of ``/simple/<project>/``: opmarket's index against pypiserver.

Both servers get the same 1,000 projects x 10 wheels (small real wheel files), the same
number of worker processes and their best production setting: opmarket with uvicorn
workers (``opmarket serve --workers N``), pypiserver 2.4 with ``--server gunicorn --backend
cached-dir`` and gunicorn workers. The load generator is wrk (Debian's ``wrk``): 2 threads,
16 connections, each request for a random project, after a warm-up. opmarket is measured
for HTML and for PEP 691 JSON; pypiserver has no JSON API. Everything binds 127.0.0.1.

The catalog rows are written straight into opmarket's database as validated files (the
benchmark measures serving, not validation); the wheels go into its store and into
pypiserver's folder. The last line is the result:

    index: X req/s html, Y req/s json, p99 Z ms (pypiserver: W req/s html)

Before it, the same HTML measurement of opmarket runs once more under a fixed background
load the bench starts itself (``cpu_load``: two CPU-bound processes for the whole
measurement, as validations beside the index would be), so busy-machine figures compare
from run to run:

    opmarket html loaded (2 CPU-bound processes): X req/s, p99 Y ms

    python bench/index.py [--projects 1000] [--files 10] [--duration 10] [--workers 2]
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

BIN = Path(sys.executable).parent
ACCEPT_JSON = "application/vnd.pypi.simple.v1+json"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


LOAD_PROCESSES = 2


@contextlib.contextmanager
def cpu_load(processes: int = LOAD_PROCESSES) -> Iterator[None]:
    """``processes`` CPU-bound processes (a busy loop each) for the length of the block: the
    fixed background load under which the loaded figures are measured."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(processes)
    ]
    try:
        time.sleep(0.5)  # let them take their share of the CPUs before measuring
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def make_wheels(folder: Path, projects: int, files: int) -> list[tuple[str, str, Path]]:
    """(project, version, wheel) for every file: tiny wheels with real METADATA."""
    out = []
    for p in range(projects):
        name = f"bench-project-{p:04d}"
        for f in range(files):
            version = f"1.{f}.0"
            package = name.replace("-", "_")
            wheel = folder / f"{package}-{version}-py3-none-any.whl"
            info = f"{package}-{version}.dist-info"
            with zipfile.ZipFile(wheel, "w") as zf:
                zf.writestr(f"{package}/__init__.py", f"VERSION = {version!r}\n")
                zf.writestr(
                    f"{info}/METADATA",
                    f"Metadata-Version: 2.1\nName: {name}\n"
                    f"Version: {version}\nRequires-Python: >=3.11\n",
                )
                zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
                zf.writestr(f"{info}/RECORD", "")
            out.append((name, version, wheel))
    return out


def seed_opmarket(data: Path, wheels: list[tuple[str, str, Path]]) -> None:
    """Validated catalog rows and stored blobs for every wheel, in one transaction."""
    from opmarket.web._app import open_state
    from opmarket.web._auth import add_user
    from opmarket.web._settings import Settings
    from opmarket.web.catalog._models import File, Project, Release

    state = open_state(Settings(data_dir=data, validation_workers=0))
    with state.db.transaction() as session:
        user = add_user(session, "bench")
        projects: dict[str, Project] = {}
        for name, version, wheel in wheels:
            if name not in projects:
                projects[name] = Project(
                    name=name, normalized=name, owner_id=user.id, summary="", serial=1
                )
                session.add(projects[name])
                session.flush()
            release = Release(project_id=projects[name].id, version=version)
            session.add(release)
            session.flush()
            data_bytes = wheel.read_bytes()
            digest = hashlib.sha256(data_bytes).hexdigest()
            state.storage.put_file(wheel, digest)
            with zipfile.ZipFile(wheel) as zf:
                metadata = zf.read(f"{wheel.name.split('-')[0]}-{version}.dist-info/METADATA")
            session.add(
                File(
                    release_id=release.id,
                    filename=wheel.name,
                    sha256=digest,
                    size=len(data_bytes),
                    requires_python=">=3.11",
                    metadata_sha256=state.storage.put_bytes(metadata),
                    summary="",
                    uploader_id=user.id,
                    status="validated",
                    yanked=False,
                    yanked_reason="",
                    log="",
                    opset="",
                )
            )
    state.db.dispose()


def wait_up(url: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(
                f"server exited with {proc.returncode}: {url}\n"
                f"{log.read_text(errors='replace')[-3000:]}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"server did not come up: {url}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop the server and its workers (its own session, started here)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
            proc.wait(15)
            return
        except ProcessLookupError:
            proc.wait()
            return
        except subprocess.TimeoutExpired:
            continue


_LUA = """
local names = {%s}
local accept = "%s"
request = function()
  local path = "/simple/" .. names[math.random(#names)] .. "/"
  if accept ~= "" then
    return wrk.format("GET", path, {["Accept"] = accept})
  end
  return wrk.format("GET", path)
end
"""


def wrk(
    url: str, names: list[str], accept: str, duration: int, workdir: Path, *, warmup: int = 2
) -> tuple[float, float]:
    """(requests per second, p99 latency in ms) after a warm-up run; non-2xx answers and
    socket errors fail the run."""
    script = workdir / f"rotate-{abs(hash(accept))}.lua"
    script.write_text(_LUA % (",".join(f'"{n}"' for n in names), accept))
    args = ["wrk", "-t2", "-c16", "--latency", "-s", str(script), url]
    subprocess.run([*args[:1], f"-d{warmup}s", *args[1:]], capture_output=True, check=True)
    done = subprocess.run(
        [*args[:1], f"-d{duration}s", *args[1:]], capture_output=True, text=True, check=True
    )
    out = done.stdout
    if "Non-2xx" in out or "Socket errors" in out:
        raise SystemExit(f"errors while measuring {url}:\n{out}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    m = re.search(r"99%\s+([\d.]+)(us|ms|s)", out)
    assert m is not None, out
    p99 = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    return rps, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--projects", type=int, default=1000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--duration", type=int, default=10, help="seconds per measurement")
    parser.add_argument("--workers", type=int, default=2, help="server worker processes")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (Debian: apt-get install wrk)")
    work = Path(tempfile.mkdtemp(prefix="opmarket-bench-"))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        files = work / "packages"
        files.mkdir()
        t = time.monotonic()
        wheels = make_wheels(files, args.projects, args.files)
        seed_opmarket(work / "market", wheels)
        print(
            f"{len(wheels)} files of {args.projects} projects ready in "
            f"{time.monotonic() - t:.1f} s",
            flush=True,
        )
        names = sorted({name for name, _, _ in wheels})
        env = {k: v for k, v in os.environ.items() if not k.startswith("OPMARKET_")}

        ours = free_port()
        procs.append(
            subprocess.Popen(
                [
                    str(BIN / "opmarket"),
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(ours),
                    "--data",
                    str(work / "market"),
                    "--workers",
                    str(args.workers),
                    "--validation-workers",
                    "0",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=open(work / "opmarket.log", "wb"),  # noqa: SIM115
                start_new_session=True,
            )
        )
        theirs = free_port()
        procs.append(
            subprocess.Popen(
                [
                    str(BIN / "pypi-server"),
                    "run",
                    "-i",
                    "127.0.0.1",
                    "-p",
                    str(theirs),
                    "--server",
                    "gunicorn",
                    "--backend",
                    "cached-dir",
                    "-a",
                    ".",
                    "-P",
                    ".",
                    str(files),
                ],
                env={**env, "GUNICORN_CMD_ARGS": f"--workers {args.workers}"},
                stdout=subprocess.DEVNULL,
                stderr=open(work / "pypiserver.log", "wb"),  # noqa: SIM115
                start_new_session=True,
            )
        )
        wait_up(f"http://127.0.0.1:{ours}/simple/{names[0]}/", procs[0], work / "opmarket.log")
        wait_up(f"http://127.0.0.1:{theirs}/simple/{names[0]}/", procs[1], work / "pypiserver.log")

        # The first run warms every project's page in every worker of both servers (each
        # caches: opmarket its rendered pages, pypiserver its directory listing).
        js, p99_json = wrk(
            f"http://127.0.0.1:{ours}", names, ACCEPT_JSON, args.duration, work, warmup=8
        )
        print(f"opmarket json: {js:.0f} req/s, p99 {p99_json:.1f} ms", flush=True)
        html, p99_html = wrk(f"http://127.0.0.1:{ours}", names, "", args.duration, work)
        print(f"opmarket html: {html:.0f} req/s, p99 {p99_html:.1f} ms", flush=True)
        with cpu_load():
            loaded, p99_loaded = wrk(f"http://127.0.0.1:{ours}", names, "", args.duration, work)
        print(
            f"opmarket html loaded ({LOAD_PROCESSES} CPU-bound processes): {loaded:.0f} req/s, "
            f"p99 {p99_loaded:.1f} ms",
            flush=True,
        )
        base, p99_base = wrk(f"http://127.0.0.1:{theirs}", names, "", args.duration, work, warmup=8)
        print(f"pypiserver html: {base:.0f} req/s, p99 {p99_base:.1f} ms", flush=True)
        print(
            f"load: wrk, 2 threads, 16 connections, {args.duration} s per run; "
            f"{args.workers} workers per server; ratio html {html / base:.1f}x",
            flush=True,
        )
        print(
            f"index: {html:.0f} req/s html, {js:.0f} req/s json, p99 "
            f"{max(p99_html, p99_json):.1f} ms (pypiserver: {base:.0f} req/s html)"
        )
    finally:
        for proc in procs:
            stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
