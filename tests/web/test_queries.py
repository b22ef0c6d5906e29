"""The catalog's SQL: summaries kept on change, full-text search, filters, paging, the plan
(indexes used), and ``opmarket seed``; on SQLite and PostgreSQL, without a server."""

from __future__ import annotations

import re
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version
from sqlalchemy import event, func, select, text, update

from opmarket.web.catalog import _queries
from opmarket.web.catalog._catalog import (
    SearchError,
    get_op,
    get_package,
    search_key,
    search_packages,
)
from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import (
    File,
    FileStatus,
    OpEntry,
    Project,
    ProjectKernel,
    ProjectSummary,
    Release,
)
from opmarket.web.catalog._queries import (
    dtypes_of,
    listed_projects,
    refresh_summary,
    search,
    search_words,
)
from opmarket.web.catalog._search import SearchQuery
from opmarket.web.catalog._seed import SEED_WORDS, seed

from .conftest import OPMARKET, Backend, clean_env


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory, database: Backend) -> Iterator[Database]:
    url = database.new_url("seeded")
    db = Database(url or f"sqlite:///{tmp_path_factory.mktemp('seeded') / 'c.sqlite3'}")
    seed(db, 300, random_seed=7)
    yield db
    db.dispose()


def test_words_and_dtypes() -> None:
    assert search_words("Test>Double opm_x-2") == ["test", "double", "opm", "x", "2"]
    assert search_words("%_'\"*") == []
    assert dtypes_of("T=float|double, U=int32") == {"float", "double", "int32"}
    assert dtypes_of("") == {""}


def test_search_matches_words_of_names_summaries_and_ops(seeded: Database) -> None:
    with seeded.session() as session:
        rows = session.scalars(select(ProjectSummary)).all()
        everything = search_packages(session, limit=1000)
        assert everything.total == len(rows) == 300
        names = [p.normalized for p in everything.packages]
        assert names == sorted(names)
        some = next(r for r in rows if r.ops)
        op = some.ops.split("\n")[0]  # e.g. Vision>FlashGemm: words "vision", "flashgemm"
        by_op = search_packages(session, SearchQuery(q=op), limit=1000)
        assert some.normalized in {p.normalized for p in by_op.packages}
        for p in by_op.packages:
            words = f"{p.name} {p.summary} {' '.join(p.ops)}".lower()
            assert all(w in words for w in search_words(op)), p
        prefix = some.normalized.split("-")[0][:3]  # a word's start finds it
        found = search_packages(session, SearchQuery(q=prefix), limit=1000)
        hits = {p.normalized for p in found.packages}
        assert some.normalized in hits or prefix in some.summary.lower()
        assert search_packages(session, SearchQuery(q="nosuchword")).total == 0
        # Words that FTS syntax would read as operators are plain words.
        assert search_packages(session, SearchQuery(q='NOT "OR" * (')).total == 0


def test_filters_and_paging_are_sql(seeded: Database) -> None:
    with seeded.session() as session:
        gpu = search_packages(session, SearchQuery(device="gpu"), limit=1000)
        assert gpu.total > 0
        assert all("GPU" in p.devices for p in gpu.packages)
        rejected = search_packages(session, SearchQuery(status="rejected"), limit=1000)
        assert rejected.total > 0 and all(p.status == "rejected" for p in rejected.packages)
        cpu_half = SearchQuery(device="CPU", dtype="half")
        half = search_packages(session, cpu_half, limit=1000).packages
        for p in half[:5]:
            detail = get_package(session, p.name)
            assert detail is not None
            assert any(k.device == "CPU" and k.dtypes == "T=half" for k in detail.kernels)
        first = search_packages(session, limit=7)
        second = search_packages(session, offset=7, limit=7)
        whole = search_packages(session, limit=14)
        assert [*first.packages, *second.packages] == whole.packages
        # The place for more predicates (the GPU filters): SQL on ProjectSummary.
        only = first.packages[0].normalized
        narrowed = search_packages(session, where=[ProjectSummary.normalized == only])
        assert [p.normalized for p in narrowed.packages] == [only]


def test_summary_follows_verdicts_and_yanks(seeded: Database) -> None:
    with seeded.transaction() as session:
        row = session.scalars(
            select(ProjectSummary).where(ProjectSummary.status == FileStatus.VALIDATED)
        ).first()
        assert row is not None
        session.execute(
            update(File).where(File.id == row.latest_file_id).values(status=FileStatus.REJECTED)
        )
        refresh_summary(session, row.project_id)
        after = session.get(ProjectSummary, row.project_id)
        assert after is not None
        assert (after.latest_file_id, after.status) != (row.latest_file_id, row.status)
    with seeded.session() as session:
        found = search_packages(
            session, SearchQuery(q=row.normalized, status=str(after.status)), limit=1000
        )
        assert row.normalized in {p.normalized for p in found.packages}
        listed = dict((n, n) for _, n in listed_projects(session))
        assert (row.normalized in listed) == bool(after.listed)


def _plan(db: Database, sql: str) -> str:
    explain = "EXPLAIN QUERY PLAN " if db.engine.dialect.name == "sqlite" else "EXPLAIN "
    with db.engine.connect() as conn:
        if db.engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET enable_seqscan = off")  # 300 rows: force the choice
        return "\n".join(str(r[-1]) for r in conn.execute(text(explain + sql)))


def test_the_indexes_are_used(seeded: Database) -> None:
    fts = (
        "SELECT project_id FROM project_summaries WHERE search @@ to_tsquery('simple', 'gemm:*')"
        if seeded.engine.dialect.name == "postgresql"
        else "SELECT rowid FROM project_search WHERE project_search MATCH '\"gemm\"*'"
    )
    assert any(
        word in _plan(seeded, fts)
        for word in ("ix_project_summaries_search", "VIRTUAL TABLE INDEX")
    )
    page = "SELECT * FROM project_summaries ORDER BY normalized LIMIT 50"
    assert "project_summaries_normalized" in _plan(seeded, page) or "USING INDEX" in _plan(
        seeded, page
    )
    device = "SELECT project_id FROM project_kernels WHERE device = 'GPU' AND dtype = 'half'"
    assert "ix_project_kernels_device" in _plan(seeded, device)


def test_seed_command_fills_a_data_folder(tmp_path: Path) -> None:
    done = subprocess.run(
        [OPMARKET, "seed", "25", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("seeded 25 projects in ")
    db = Database(f"sqlite:///{tmp_path / 'opmarket.sqlite3'}")
    with db.session() as session:
        assert search_packages(session).total == 25
        statuses = {p.status for p in search_packages(session).packages}
        assert FileStatus.VALIDATED in statuses
    db.dispose()


def test_concurrent_refreshes_of_one_project_take_turns(seeded: Database) -> None:
    with seeded.session() as session:
        row = session.scalars(select(ProjectSummary).where(ProjectSummary.ops != "")).first()
        assert row is not None
    barrier = threading.Barrier(6, timeout=120)
    # On SQLite a write transaction holds the database's write lock from its start, so only
    # one can be open at a time: there the six meet before their transactions, elsewhere
    # inside them.
    sqlite = seeded.engine.dialect.name == "sqlite"
    errors: list[BaseException] = []

    def refresh() -> None:
        try:
            if sqlite:
                barrier.wait()
            with seeded.transaction() as session:
                if not sqlite:
                    barrier.wait()
                refresh_summary(session, row.project_id)
        except BaseException as exc:  # collected, the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=refresh) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with seeded.session() as session:
        again = session.get(ProjectSummary, row.project_id)
        assert again is not None and (again.ops, again.status) == (row.ops, row.status)


@pytest.mark.parametrize(
    "filters",
    [
        {"q": "gemm"},
        {"q": "vision flash"},
        {"device": "GPU"},
        {"device": "cpu", "dtype": "half"},
        {"q": "conv", "device": "CPU", "status": "validated"},
    ],
)
def test_both_plans_give_the_same_pages(
    seeded: Database, monkeypatch: pytest.MonkeyPatch, filters: dict[str, str]
) -> None:
    """Broad searches read summaries in name order (over SCAN_ABOVE matches), narrow ones
    sort their matches: the same rows either way."""
    with seeded.session() as session:
        by_set = [search(session, SearchQuery(**filters), offset=o, limit=9) for o in (0, 9, 18)]
        monkeypatch.setattr(_queries, "SCAN_ABOVE", 0)
        by_scan = [search(session, SearchQuery(**filters), offset=o, limit=9) for o in (0, 9, 18)]
    assert by_set[0].total > 9
    assert [(p.total, [r.normalized for r in p.rows]) for p in by_set] == [
        (p.total, [r.normalized for r in p.rows]) for p in by_scan
    ]


def test_combined_filters_count_up_to_the_limit(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    cpu_validated = SearchQuery(device="CPU", status="validated")
    with seeded.session() as session:
        exact = search(session, cpu_validated, limit=1000)
        assert exact.total == len(exact.rows) > 5 and not exact.capped
        monkeypatch.setattr(_queries, "COUNT_LIMIT", 5)
        capped = search(session, cpu_validated, limit=1000)
        assert (capped.total, capped.capped) == (5, True)
        assert capped.rows == exact.rows  # the pages are whole: only the count stops
        assert not search(session, SearchQuery(device="CPU"), limit=1).capped  # a cheap count


def test_words_alone_count_up_to_the_limit(
    seeded: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search by words alone counts its matches up to COUNT_LIMIT (a broad word's full
    count reads every match), exactly below it; its pages, by offset and by cursor, go on
    past the count."""
    with seeded.session() as session:
        one = session.scalar(select(ProjectSummary.normalized).order_by(ProjectSummary.name))
        assert one is not None  # e.g. attention-conv-17: few projects have its words
        everyone = {
            w: search(session, SearchQuery(q=w), limit=1000)
            for w in [*SEED_WORDS, "gemm norm", "vision>flash", one]
        }
        assert all(not p.capped and p.total == len(p.rows) for p in everyone.values())
        monkeypatch.setattr(_queries, "COUNT_LIMIT", 5)
        for q, exact in everyone.items():
            found = search(session, SearchQuery(q=q), limit=1000)
            if exact.total <= 5:
                assert (found.total, found.capped) == (exact.total, False), q
            else:
                assert (found.total, found.capped) == (5, True), q
            assert found.rows == exact.rows, q  # the pages are whole: only the count stops
        q, exact = next((q, p) for q, p in everyone.items() if p.total > 12)
        names = [r.normalized for r in exact.rows]
        by_offset = search(session, SearchQuery(q=q), offset=6, limit=6)
        by_cursor = search(session, SearchQuery(q=q), after=names[5], limit=6)
        last = search(session, SearchQuery(q=q), offset=len(names) - 2, limit=6)
    assert [r.normalized for r in by_offset.rows] == names[6:12] and by_offset.capped
    assert [r.normalized for r in by_cursor.rows] == names[6:12] and by_cursor.capped
    assert [r.normalized for r in last.rows] == names[-2:]
    assert any(0 < p.total <= 5 for p in everyone.values())  # both sides of the cap were seen


def test_op_pages_name_each_provider_with_its_kernels_of_that_op(seeded: Database) -> None:
    with seeded.session() as session:
        name = session.scalars(
            select(OpEntry.op).group_by(OpEntry.op).order_by(func.count().desc(), OpEntry.op)
        ).first()
        assert name is not None
        found = get_op(session, name)
        assert found is not None and len(found.providers) > 1
        # What the page says, read the plain way: every file with the op, and its kernels.
        entries = session.scalars(select(OpEntry).where(OpEntry.op == name)).all()
        expected = sorted(
            (
                e.file.release.project.normalized,
                e.file.release.version,
                e.file.filename,
                e.file.status,
                e.signature,
                sorted((k.device, k.dtypes, k.status) for k in e.file.kernels if k.op == name),
            )
            for e in {e.file_id: e for e in entries}.values()
        )
        shown = [
            (
                p.normalized,
                p.version,
                p.filename,
                p.status,
                p.signature,
                sorted((k.device, k.dtypes, k.status) for k in p.kernels),
            )
            for p in found.providers
        ]
        assert sorted(shown) == expected
        ordered = [(p.normalized, p.version) for p in found.providers]
        assert ordered == sorted(ordered, key=lambda pv: (pv[0], Version(pv[1])))
        assert get_op(session, "No>SuchOp") is None


def test_a_package_is_read_in_four_queries_whatever_its_size(seeded: Database) -> None:
    """The package page's details: the summary row with its owner, the releases with their
    files, those files' kernels, the latest file's ops; never one query per release or
    file. And they say what the rows say."""
    selects: list[str] = []

    def seen(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)

    with seeded.session() as session:
        biggest = session.execute(
            select(Release.project_id, func.count(File.id))
            .join(File)
            .group_by(Release.project_id)
            .order_by(func.count(File.id).desc(), Release.project_id)
            .limit(1)
        ).one()
        assert biggest[1] > 2
        name = session.get_one(Project, biggest[0]).name
        event.listen(seeded.engine, "before_cursor_execute", seen)
        try:
            found = get_package(session, name.upper())  # any spelling
        finally:
            event.remove(seeded.engine, "before_cursor_execute", seen)
        assert found is not None
        assert len(selects) == 4, selects
        files = session.scalars(
            select(File).join(Release).where(Release.project_id == biggest[0])
        ).all()
        assert len(found.files) == len(files) == biggest[1]
        for info in found.files:
            f = next(f for f in files if f.filename == info.filename)
            assert (info.version, info.status) == (f.release.version, f.status)
            assert info.devices == sorted({k.device for k in f.kernels})
        latest = session.get_one(File, session.get_one(ProjectSummary, biggest[0]).latest_file_id)
        assert sorted(o.name for o in found.op_details) == sorted(o.op for o in latest.ops)
        assert len(found.kernels) == len(latest.kernels)
        assert get_package(session, "no-such-package") is None


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ({"q": "Flash  ATT"}, {"q": "flash>att"}),
        ({"device": "gpu", "dtype": "HALF"}, {"device": "GPU", "dtype": "half"}),
    ],
)
def test_searches_with_one_key_have_one_result(
    seeded: Database, one: dict[str, str], other: dict[str, str]
) -> None:
    assert search_key(SearchQuery(**one)) == search_key(SearchQuery(**other))
    with seeded.session() as session:
        assert search_packages(session, SearchQuery(**one)) == search_packages(
            session, SearchQuery(**other)
        )


def test_search_keys_tell_every_filter_apart() -> None:
    searches: list[dict[str, Any]] = [
        {},
        {"q": "flash"},
        {"q": "flash att"},
        {"device": "GPU"},
        {"dtype": "half"},
        {"status": "rejected"},
        {"offset": 50},
        {"limit": 50},
        {"cuda": "13"},
        {"compute_capability": "8.6"},
        {"after": "m"},
    ]

    def key(offset: int = 0, limit: int = 100, after: str = "", **filters: str) -> object:
        return search_key(SearchQuery(**filters), offset=offset, limit=limit, after=after)

    assert len({key(**s) for s in searches}) == len(searches)
    with pytest.raises(SearchError, match="q is 201 characters long"):
        search_key(SearchQuery(q="x" * 201))


@pytest.mark.parametrize(("device", "dtype"), [("CPU", ""), ("", "float"), ("gpu", "half")])
def test_words_with_kernel_filters_count_what_their_pages_list(
    seeded: Database, monkeypatch: pytest.MonkeyPatch, device: str, dtype: str
) -> None:
    """The count of words with device/dtype filters (on SQLite: the text's matches, each
    looked up in project_kernels) is the number of rows the pages list."""
    with seeded.session() as session:
        for word in SEED_WORDS[:6]:
            found = search(session, SearchQuery(q=word, device=device, dtype=dtype), limit=1000)
            assert (found.total, found.capped) == (len(found.rows), False)
        found = search(
            session, SearchQuery(device=device, dtype=dtype), limit=1000
        )  # 300 projects: some match
        assert found.total > 5
        monkeypatch.setattr(_queries, "COUNT_LIMIT", 5)
        word = next(
            w
            for w in SEED_WORDS
            if len(search(session, SearchQuery(q=w, device=device, dtype=dtype)).rows) > 5
        )
        capped = search(session, SearchQuery(q=word, device=device, dtype=dtype), limit=1000)
        assert (capped.total, capped.capped) == (5, True) and len(capped.rows) > 5


def _scan(rows: list[ProjectSummary], q: str, status: str) -> list[str]:
    """What a search finds, by reading every summary: each word of ``q`` starts a word
    (a run of letters and digits) of the name, summary or ops."""
    words = search_words(q)
    found = []
    for row in rows:
        text_words = re.findall(r"[^\W_]+", f"{row.name} {row.summary} {row.ops}".lower())
        if status and row.status != status:
            continue
        if all(any(t.startswith(w) for t in text_words) for w in words):
            found.append(row.normalized)
    return sorted(found)


_QUERIES = [
    *SEED_WORDS[:8],
    *(w[:n] for w in SEED_WORDS[8:16] for n in (1, 2, 3)),
    "vision>flash",
    "Vision>Embed",
    "gemm norm",
    "conv 1",
    "7",
    "%",
    "_",
    "co%",
    "c_nv",
    "'",
    "o'conv",
    '"conv"',
    "conv*",
    "ünïcode",
    "νόρμα",
    "",
    "nosuchword",
]


@pytest.mark.parametrize("status", ["", "rejected", "validated", "pending"])
@pytest.mark.parametrize("status_scan", [0, 10**9])
def test_searches_find_what_a_scan_of_every_project_finds(
    seeded: Database, monkeypatch: pytest.MonkeyPatch, status: str, status_scan: int
) -> None:
    """Every plan (a status's index read in name order, or each text match looked up)
    lists what reading every summary lists, for words, prefixes of 1-3 characters,
    SQL's wildcards and quotes, and letters outside ASCII."""
    monkeypatch.setattr(_queries, "STATUS_SCAN", status_scan)
    with seeded.session() as session:
        rows = list(session.scalars(select(ProjectSummary)).all())
        for q in _QUERIES:
            found = search(session, SearchQuery(q=q, status=status), limit=1000)
            expected = _scan(rows, q, status)
            assert (found.total, [r.normalized for r in found.rows]) == (
                len(expected),
                expected,
            ), q


@pytest.mark.parametrize(
    ("device", "dtype"), [("CPU", ""), ("gpu", ""), ("", "half"), ("CPU", "float"), ("GPU", "int8")]
)
def test_device_and_dtype_count_each_project_once(
    seeded: Database, device: str, dtype: str
) -> None:
    """A device and dtype search counts the projects its pages list, whether a project has
    one matching (device, dtype) row or several."""
    with seeded.session() as session:
        pairs = session.execute(
            select(ProjectKernel.project_id, ProjectKernel.device, ProjectKernel.dtype)
        ).all()
        found = search(session, SearchQuery(device=device, dtype=dtype), limit=1000)
    expected = {
        p
        for p, d, t in pairs
        if (not device or d == device.upper()) and (not dtype or t == dtype.lower())
    }
    assert found.total == len(found.rows) == len(expected) > 0
    assert {r.project_id for r in found.rows} == expected
