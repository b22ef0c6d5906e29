"""A throwaway PostgreSQL server for the tests, from Debian's ``postgresql`` package: initdb
into a fresh folder, pg_ctl start on 127.0.0.1 with a free port, trust authentication, one
new database per caller. initdb refuses to run as root, so as root the server runs as
``nobody`` (setpriv), in a folder that user owns."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .ports import free_port

__all__ = ["PostgresServer", "pg_bin", "running_postgres"]


def pg_bin() -> Path | None:
    """The folder of pg_ctl and initdb: on PATH, else Debian's /usr/lib/postgresql/<n>/bin
    (the newest); None when PostgreSQL is not installed."""
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return Path(found).resolve().parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    return Path(candidates[-1]).parent if candidates else None


class PostgresServer:
    """A running server; :meth:`new_database` gives a fresh database's SQLAlchemy URL."""

    def __init__(self, bin_dir: Path, root: Path, port: int, prefix: list[str]) -> None:
        self.bin_dir, self.root, self.port, self._prefix = bin_dir, root, port, prefix
        self._count = 0

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, label: str = "db") -> str:
        """CREATE DATABASE with a new name; its URL."""
        import psycopg

        self._count += 1
        name = f"{''.join(c for c in label.lower() if c.isalnum())[:40]}_{self._count}"
        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[arg-type]
        return self.url(name)

    def _run(self, *args: str) -> None:
        done = subprocess.run(
            [*self._prefix, *args], capture_output=True, text=True, check=False, cwd=self.root
        )
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed: {done.stdout}{done.stderr}")

    def start(self) -> None:
        data = self.root / "data"
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-locale",
            "--encoding=UTF8",
            "--no-sync",
        )
        options = (
            f"-h 127.0.0.1 -p {self.port} -k {self.root} -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
        )
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(self.root / "server.log"),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )

    def stop(self) -> None:
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "stop")


@contextlib.contextmanager
def running_postgres(bin_dir: Path) -> Iterator[PostgresServer]:
    """A started server in a new folder under the system's temporary folder (as root: owned
    by ``nobody``, who runs it), stopped and removed at the end."""
    root = Path(tempfile.mkdtemp(prefix="opmarket-pg-"))
    prefix: list[str] = []
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        os.chown(root, nobody.pw_uid, nobody.pw_gid)
        prefix = [
            "setpriv",
            f"--reuid={nobody.pw_uid}",
            f"--regid={nobody.pw_gid}",
            "--clear-groups",
            "--",
        ]
    server = PostgresServer(bin_dir, root, free_port(), prefix)
    try:
        server.start()
        yield server
    finally:
        with contextlib.suppress(RuntimeError):
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
