"""Synthetic projects for benchmarks (what ``opmarket seed`` writes), straight into the
database in bulk (no uploads, no validation, no file bytes): realistic op counts, several
releases and files each, mixed statuses, and each project's summary and search rows."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, func, insert, select, text

from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import (
    File,
    FileStatus,
    KernelEntry,
    OpEntry,
    Project,
    ProjectKernel,
    ProjectSummary,
    Release,
    User,
    distribution_key,
    utcnow,
)

__all__ = ["SEED_WORDS", "seed", "seed_projects"]

#: The words seeded names, summaries and ops are made of (what a benchmark searches for).
SEED_WORDS = (
    "fused",
    "flash",
    "sparse",
    "quant",
    "conv",
    "attention",
    "gemm",
    "norm",
    "rope",
    "moe",
    "pool",
    "scan",
    "topk",
    "softmax",
    "lstm",
    "fft",
    "rng",
    "sort",
    "gather",
    "median",
    "bitcast",
    "atan",
    "resize",
    "nms",
    "ctc",
    "embed",
    "layer",
    "group",
    "paged",
    "ragged",
)
_NAMESPACES = ("Addons", "Vision", "Text", "Audio", "Quant", "Sparse", "Nn", "Signal")
_OP_COUNTS = (1, 1, 1, 1, 2, 2, 2, 3, 3, 4, 5, 6, 8, 12, 20)
_RELEASES = (1, 1, 2, 2, 3, 3, 4, 6)
_TAGS = ("py3-none-any", "cp311-cp311-manylinux_2_28_x86_64", "cp312-cp312-macosx_11_0_arm64")
_DTYPES = ("float", "double", "half", "bfloat16", "int32", "int64", "int8", "uint8")
_BATCH = 2000  # projects per transaction
#: The pending list of a GIN index while seeding (KiB; PostgreSQL's default is 4,096).
_PENDING_KB = 256 * 1024


@dataclass
class _Rows:
    projects: list[dict[str, Any]] = field(default_factory=list)
    releases: list[dict[str, Any]] = field(default_factory=list)
    files: list[dict[str, Any]] = field(default_factory=list)
    ops: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Ids:
    project: int
    release: int
    file: int
    op: int
    kernel: int


def _project(rng: random.Random, n: int, owner: int, ids: _Ids, out: _Rows) -> None:
    w1, w2 = rng.sample(SEED_WORDS, 2)
    name = f"{w1}-{w2}-{n}"
    pid = ids.project
    ids.project += 1
    summary = f"{w1.capitalize()} {w2} kernels, synthetic project {n}"
    out.projects.append(
        {
            "id": pid,
            "name": name,
            "normalized": name,
            "owner_id": owner,
            "summary": summary,
            "serial": 1,
            "created": utcnow(),
        }
    )
    ops = sorted(
        {
            f"{rng.choice(_NAMESPACES)}>{rng.choice(SEED_WORDS).capitalize()}"
            f"{rng.choice(SEED_WORDS).capitalize()}"
            for _ in range(rng.choice(_OP_COUNTS))
        }
    )
    releases = rng.choice(_RELEASES)
    last_status = rng.choices(
        (FileStatus.VALIDATED, FileStatus.REJECTED, FileStatus.PENDING), (8, 1, 1)
    )[0]
    files: list[tuple[int, str, str]] = []  # id, version, status
    stem = name.replace("-", "_")
    for r in range(releases):
        version = f"1.{r}.0"
        rid = ids.release
        ids.release += 1
        out.releases.append({"id": rid, "project_id": pid, "version": version, "created": utcnow()})
        status = last_status if r == releases - 1 else FileStatus.VALIDATED
        for tag in _TAGS[: rng.choice((1, 1, 2, 3))]:
            filename = f"{stem}-{version}-{tag}.whl"
            fid = ids.file
            ids.file += 1
            files.append((fid, version, status))
            out.files.append(
                {
                    "id": fid,
                    "release_id": rid,
                    "filename": filename,
                    "dist_key": distribution_key(filename),
                    "sha256": f"{rng.getrandbits(256):064x}",
                    "size": rng.randint(5_000, 50_000_000),
                    "requires_python": ">=3.10",
                    "metadata_sha256": f"{rng.getrandbits(256):064x}",
                    "summary": summary,
                    "uploaded": utcnow(),
                    "uploader_id": owner,
                    "status": status,
                    "yanked": False,
                    "yanked_reason": "",
                    "log": f"{filename}: {status}\n",
                    "opset": "",
                }
            )
            if status != FileStatus.PENDING:
                for op in ops:
                    out.ops.append(
                        {
                            "id": ids.op,
                            "file_id": fid,
                            "op": op,
                            "signature": f"{op}(x: T) -> (y: T)",
                            "summary": "",
                        }
                    )
                    ids.op += 1
    validated = [f for f in files if f[2] == FileStatus.VALIDATED]
    latest = (validated or files)[-1]
    pairs: set[tuple[str, str]] = set()
    if latest[2] != FileStatus.PENDING:
        devices = ("CPU", "GPU") if rng.random() < 0.3 else ("CPU",)
        for op in ops:
            for device in devices:
                for dtype in rng.sample(_DTYPES, rng.choice((1, 2, 3))):
                    pairs.add((device, dtype))
                    out.kernels.append(
                        {
                            "id": ids.kernel,
                            "file_id": latest[0],
                            "op": op,
                            "device": device,
                            "dtypes": f"T={dtype}",
                            "status": "passed",
                            "message": "",
                        }
                    )
                    ids.kernel += 1
    out.summaries.append(
        {
            "project_id": pid,
            "name": name,
            "normalized": name,
            "summary": summary,
            "latest_file_id": latest[0],
            "latest_version": latest[1],
            "status": latest[2],
            "listed": bool(validated),
            "ops": "\n".join(ops) if latest[2] != FileStatus.PENDING else "",
            "devices": " ".join(sorted({d for d, _ in pairs})),
        }
    )
    out.pairs += [{"project_id": pid, "device": d, "dtype": t} for d, t in sorted(pairs)]


def _next_ids(db: Database) -> _Ids:
    with db.engine.connect() as conn:

        def after(column: Any) -> int:
            return int(conn.scalar(select(func.coalesce(func.max(column), 0))) or 0) + 1

        return _Ids(
            after(Project.id),
            after(Release.id),
            after(File.id),
            after(OpEntry.id),
            after(KernelEntry.id),
        )


def _owner(db: Database) -> int:
    with db.transaction() as session:
        user = session.scalar(select(User).where(User.name == "seed"))
        if user is None:
            user = User(name="seed")
            session.add(user)
            session.flush()
        return user.id


def _write(conn: Connection, model: Any, rows: list[dict[str, Any]]) -> None:
    """Insert ``rows`` of ``model``'s table: PostgreSQL's COPY, else executemany."""
    if conn.dialect.name != "postgresql":
        conn.execute(insert(model), rows)
        return
    columns = list(rows[0])
    cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY {model.__tablename__} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row([row[c] for c in columns])


def seed_projects(db: Database, count: int, *, random_seed: int = 0) -> Iterator[int]:
    """Insert ``count`` synthetic projects in transactions of a few thousand; yields the
    number done after each. Names are ``<word>-<word>-<n>``, n counting on from the
    projects already there, so seeding twice adds more."""
    rng = random.Random(random_seed)
    owner = _owner(db)
    ids = _next_ids(db)
    first = ids.project
    done = 0
    with _pending_lists(db):
        while done < count:
            rows = _Rows()
            for n in range(first + done, first + min(done + _BATCH, count)):
                _project(rng, n, owner, ids, rows)
            with db.engine.connect() as conn:
                if db.engine.dialect.name == "sqlite":
                    # No fsync per batch: a seed that dies half-way is seeded again. A cache
                    # that holds the indexes: names and digests go into them in random order.
                    # Set on the driver's connection, outside any transaction (SQLite refuses
                    # to change the safety level inside one, and SQLAlchemy begins one itself).
                    raw = conn.connection.driver_connection
                    assert raw is not None
                    raw.execute("PRAGMA synchronous=OFF")
                    raw.execute("PRAGMA cache_size=-262144")  # KiB
                with conn.begin():
                    _write_rows(conn, rows)
            done = min(done + _BATCH, count)
            yield done
    if db.engine.dialect.name == "postgresql":
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    else:
        with db.engine.begin() as conn:
            conn.exec_driver_sql("ANALYZE")


def seed(db: Database, count: int, *, random_seed: int = 0) -> None:
    """Insert ``count`` synthetic projects (see :func:`seed_projects`)."""
    for _ in seed_projects(db, count, random_seed=random_seed):
        pass


def _write_rows(conn: Connection, rows: _Rows) -> None:
    for model, values in (
        (Project, rows.projects),
        (Release, rows.releases),
        (File, rows.files),
        (OpEntry, rows.ops),
        (KernelEntry, rows.kernels),
        (ProjectSummary, rows.summaries),
        (ProjectKernel, rows.pairs),
    ):
        if values:
            _write(conn, model, values)


@contextlib.contextmanager
def _pending_lists(db: Database) -> Iterator[None]:
    """On PostgreSQL, the summaries' GIN indexes (the search's, of migrations 0006 and 0011)
    keep a seed's entries in their pending lists, merged into their trees at the end, when
    each gets back the options the migrations gave it (``fastupdate = off``: see 0010),
    read here from PostgreSQL's catalog, with an empty pending list; a seed given up half-way
    too. Taken into the trees row by row instead, every prefix of every word of every
    summary was a descent of 0011's tree: 100,000 projects took about 105 s, now about 78."""
    if db.engine.dialect.name != "postgresql":
        yield
        return
    with db.engine.connect() as conn:
        quote = conn.dialect.identifier_preparer.quote
        indexes = [
            (quote(name), options)
            for name, options in conn.execute(
                text(
                    "SELECT c.relname, c.reloptions FROM pg_index i"
                    " JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam"
                    " WHERE i.indrelid = 'project_summaries'::regclass AND a.amname = 'gin'"
                )
            )
        ]
        for index, _ in indexes:
            conn.exec_driver_sql(
                f"ALTER INDEX {index} SET (fastupdate = on, gin_pending_list_limit = {_PENDING_KB})"
            )
        conn.commit()
    try:
        yield
    finally:
        with db.engine.connect() as conn:
            for index, options in indexes:
                conn.exec_driver_sql(
                    f"ALTER INDEX {index} RESET (fastupdate, gin_pending_list_limit)"
                )
                if options:
                    conn.exec_driver_sql(f"ALTER INDEX {index} SET ({', '.join(options)})")
                conn.execute(
                    text("SELECT gin_clean_pending_list(CAST(:i AS regclass))"), {"i": index}
                )
            conn.commit()
