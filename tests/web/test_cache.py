"""The page cache: served from memory, dropped when the catalog's change log names the
project (written by database triggers, read by id)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from sqlalchemy import update

from opmarket.web.catalog._db import Database
from opmarket.web.catalog._models import Project, User
from opmarket.web.routes._cache import (
    INDEX,
    MISSING,
    NAMED,
    RESULT_BUDGET,
    RESULTS,
    PageCache,
    prune_changes,
    read_changes,
)


class Log:
    """A change log as the database keeps it: (id, project) rows; ``visible`` says which
    ones committed (PostgreSQL may commit id 3 after id 4)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str]] = []
        self.hidden: set[int] = set()
        self.reads: list[str] = []

    def add(self, project: str, *, hidden: bool = False) -> int:
        change_id = len(self.rows) + 1
        self.rows.append((change_id, project))
        if hidden:
            self.hidden.add(change_id)
        return change_id

    def last(self) -> tuple[int, int]:
        self.reads.append("last")
        ids = [i for i, _ in self.rows if i not in self.hidden]
        return min(ids, default=0), max(ids, default=0)

    def after(self, seen: int, gaps: Iterable[int]) -> list[tuple[int, str]]:
        self.reads.append("after")
        wanted = set(gaps)
        return [(i, p) for i, p in self.rows if i not in self.hidden and (i > seen or i in wanted)]


def _fill(cache: PageCache, *keys: str) -> None:
    for key in keys:
        cache.keep(key, 1, f"<{key}>".encode(), b"{}", seen=cache.generation)


def test_pages_are_dropped_only_for_the_projects_that_changed() -> None:
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    log.add("b")
    cache.sync(log.last, log.after)
    _fill(cache, "a", "b", INDEX)
    log.reads.clear()
    cache.sync(log.last, log.after)
    assert log.reads == ["last"]  # nothing moved: one cheap read
    assert cache.get("a") == (b"<a>", b"{}")
    log.add("a")
    cache.sync(log.last, log.after)
    assert cache.get("a") is None and cache.get(INDEX) is None
    assert cache.get("b") == (b"<b>", b"{}")


def test_a_change_committed_below_an_id_already_seen_is_not_missed() -> None:
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    cache.sync(log.last, log.after)
    late = log.add("b", hidden=True)  # id 2, its transaction still open
    log.add("c")  # id 3 commits first
    cache.sync(log.last, log.after)
    _fill(cache, "b")
    log.hidden.discard(late)  # now id 2 commits
    cache.sync(log.last, log.after)
    assert cache.get("b") is None  # the skipped id was looked for again
    log.reads.clear()
    cache.sync(log.last, log.after)
    assert log.reads == ["last"]  # and is no longer


def test_an_answer_rendered_before_a_late_change_is_not_kept_after_it() -> None:
    """A check that only reads a change committed below the newest id seen (PostgreSQL)
    leaves the newest id as it was: the generation moves all the same, so a "not found"
    (or a page, a file, a result) read before that commit is not kept after it."""
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    cache.sync(log.last, log.after)
    late = log.add("b", hidden=True)  # id 2 creates "b", its transaction still open
    log.add("c")  # id 3 commits first
    cache.sync(log.last, log.after)
    seen = cache.generation  # a request reads "b": not listed yet...
    log.hidden.discard(late)  # ..."b" commits, and a check reads the late change
    cache.sync(log.last, log.after)
    assert cache.generation != seen
    cache.keep_missing("b", "no b", seen=seen)
    cache.keep("b", 1, b"old", b"old", seen=seen)
    cache.keep_file("b", "page", b"old", seen=seen, kind="page")
    cache.keep_result(("search",), "old", b"old", seen=seen)
    assert cache.get_missing("b") is None and cache.get("b") is None
    assert cache.get_file("b", "page", kind="page") is None
    assert cache.get_result(("search",)) is None
    log.reads.clear()
    cache.sync(log.last, log.after)  # nothing new: the generation stays, answers are kept
    assert log.reads == ["last"]
    cache.keep_missing("d", "no d", seen=cache.generation)
    assert cache.get_missing("d") == "no d"


def test_a_page_rendered_across_a_check_is_not_kept() -> None:
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    cache.sync(log.last, log.after)
    seen = cache.generation  # a render starts, reads the project...
    log.add("a")  # ...the project changes, and a check notices
    cache.sync(log.last, log.after)
    assert cache.keep("a", 1, b"old", b"old", seen=seen) == (b"old", b"old")
    assert cache.get("a") is None  # served once, never kept


def test_a_process_behind_deleted_changes_drops_every_page() -> None:
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    cache.sync(log.last, log.after)
    _fill(cache, "a", "b", INDEX)
    log.add("b")
    log.add("c")
    del log.rows[:2]  # pruned: the change to "b" was never read here
    cache.sync(log.last, log.after)
    assert cache.get("a") is None and cache.get("b") is None and cache.get(INDEX) is None
    _fill(cache, "a")
    cache.sync(log.last, log.after)
    assert cache.get("a") == (b"<a>", b"{}")  # and then follows the log again


def test_forget_drops_the_project_and_the_index() -> None:
    log, cache = Log(), PageCache(ttl=60)
    cache.sync(log.last, log.after)
    _fill(cache, "a", INDEX)
    cache.forget("a")
    assert cache.get("a") is None and cache.get(INDEX) is None


def test_the_triggers_log_every_new_project_and_serial_bump(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'c.sqlite3'}")
    last, after = read_changes(db.engine)
    start = last()
    with db.transaction() as session:
        session.add(User(name="u"))
        session.flush()
        session.add(Project(name="A", normalized="a", owner_id=1, summary="", serial=0))
        session.add(Project(name="B", normalized="b", owner_id=1, summary="", serial=0))
    with db.transaction() as session:  # as record() and set_yanked() do, and in bulk
        session.execute(update(Project).where(Project.normalized == "b").values(serial=1))
    with db.transaction() as session:  # a change of another column is not a change here
        session.execute(update(Project).values(summary="new"))
    changes = after(start[1], [])
    assert [p for _, p in changes] == ["a", "b", "b"]
    assert last() == (changes[0][0], changes[-1][0])
    assert after(last()[1], []) == []
    assert prune_changes(db.engine, keep=1) == 2
    assert last() == (changes[-1][0], changes[-1][0])
    with db.transaction() as session:  # ids are never reused after a prune
        session.execute(update(Project).where(Project.normalized == "a").values(serial=5))
    assert after(changes[-1][0], []) == [(changes[-1][0] + 1, "a")]
    db.dispose()


def test_made_up_hosts_cannot_keep_the_real_hosts_project_page_out() -> None:
    log, cache = Log(), PageCache(ttl=0)
    cache.sync(log.last, log.after)
    for host in ("evil1", "evil2", "evil3", "evil4"):  # Host headers a client made up
        cache.keep_file("a", f"page {host}", b"x", seen=cache.generation, kind="page", most=4)
    cache.keep_file("a", "page real", b"real", seen=cache.generation, kind="page", most=4)
    for host in ("evil5", "evil6", "evil7"):
        assert cache.get_file("a", "page real", kind="page") == b"real"  # in use: stays
        cache.keep_file("a", f"page {host}", b"x", seen=cache.generation, kind="page", most=4)
    assert cache.get_file("a", "page real", kind="page") == b"real"
    assert cache.get_file("a", "page evil1", kind="page") is None


def test_variants_files_and_project_pages_are_capped_apart() -> None:
    log, cache = Log(), PageCache(ttl=0)
    cache.sync(log.last, log.after)
    for n in range(10):
        cache.keep_file("a", f"a-{n}-variants.json", b"{}", seen=cache.generation, most=3)
    cache.keep_file("a", "page real", b"real", seen=cache.generation, kind="page", most=4)
    assert cache.get_file("a", "page real", kind="page") == b"real"
    kept = [n for n in range(10) if cache.get_file("a", f"a-{n}-variants.json") is not None]
    assert kept == [7, 8, 9]
    assert cache.get_file("a", "a-9-variants.json", kind="page") is None  # kinds apart


def test_generated_files_stay_within_the_byte_budget() -> None:
    log, cache = Log(), PageCache(ttl=0, budget=1000)
    cache.sync(log.last, log.after)
    for project in ("a", "b", "c", "d"):
        cache.keep_file(project, "page", b"x" * 400, seen=cache.generation, kind="page")
    kept = [p for p in "abcd" if cache.get_file(p, "page", kind="page") is not None]
    assert kept == ["c", "d"]
    cache.keep_file("e", "page", b"x" * 1001, seen=cache.generation, kind="page")
    assert cache.get_file("e", "page", kind="page") is None
    log.add("c")
    cache.sync(log.last, log.after)  # dropped with its project: its bytes are free again
    for project in ("f", "g"):
        cache.keep_file(project, "page", b"x" * 300, seen=cache.generation, kind="page")
    kept = [p for p in "cdfg" if cache.get_file(p, "page", kind="page") is not None]
    assert kept == ["d", "f", "g"]


def test_pages_stay_within_their_byte_budget_and_the_index_goes_last() -> None:
    log, cache = Log(), PageCache[bytes](ttl=0, page_budget=1000)
    cache.sync(log.last, log.after)
    cache.keep(INDEX, 1, b"i" * 100, b"i" * 100, seen=cache.generation)
    for project in "abcd":
        cache.keep(project, 1, b"x" * 200, b"y" * 200, seen=cache.generation)
    assert [k for k in (INDEX, *"abcd") if cache.get(k) is not None] == [INDEX, "c", "d"]
    cache.keep("e", 1, b"x" * 600, b"y" * 401, seen=cache.generation)  # over it alone
    assert cache.get("e") is None and cache.get("d") is not None
    log.add("c")
    cache.sync(log.last, log.after)  # dropped with its project: its bytes are free again
    cache.keep("f", 1, b"x" * 200, b"y" * 200, seen=cache.generation)
    assert [k for k in (INDEX, *"cdf") if cache.get(k) is not None] == ["d", "f"]  # index: c


def test_a_not_found_answer_goes_when_the_change_log_names_the_project() -> None:
    log, cache = Log(), PageCache[bytes](ttl=0)
    log.add("a")
    cache.sync(log.last, log.after)
    for project in ("new", "a"):
        cache.keep_missing(project, f"no {project}", seen=cache.generation)
    log.add("new")  # created (or its first file validated) in another process
    cache.sync(log.last, log.after)
    assert cache.get_missing("new") is None and cache.get_missing("a") == "no a"
    cache.keep_missing("new", "no new", seen=cache.generation)
    cache.forget("new")  # this process's own change
    assert cache.get_missing("new") is None
    seen = cache.generation  # asked before a change that a check then sees: not kept
    log.add("late")
    cache.sync(log.last, log.after)
    cache.keep_missing("late", "no late", seen=seen)
    assert cache.get_missing("late") is None
    cache.keep_missing("b", "no b", seen=cache.generation)
    cache.keep("b", 2, b"<b>", b"{}", seen=cache.generation)  # rendered since: listed now
    assert cache.get_missing("b") is None


def test_not_found_answers_are_capped() -> None:
    log, cache = Log(), PageCache[bytes](ttl=0)
    cache.sync(log.last, log.after)
    for n in range(MISSING + 10):  # made-up names
        cache.keep_missing(f"p{n}", "no", seen=cache.generation)
    assert cache.get_missing("p9") is None and cache.get_missing("p10") == "no"
    assert cache.get_missing(f"p{MISSING + 9}") == "no"


class _Hooked(str):
    """A project name from the change log whose hashing (when the check drops its pages)
    runs ``hook``: a render finishing inside the check."""

    hook: Callable[[], None] = staticmethod(lambda: None)

    def __hash__(self) -> int:
        type(self).hook()
        return str.__hash__(self)


def test_a_render_finishing_while_a_check_drops_pages_is_not_kept() -> None:
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    cache.sync(log.last, log.after)
    _fill(cache, "b")  # dicts with something in them hash what they are asked for
    cache.keep_file("b", "page", b"b", seen=cache.generation, kind="page")
    seen = cache.generation  # a render of "a" starts...
    log.rows.append((2, _Hooked("a")))  # ...and "a" changes
    _Hooked.hook = staticmethod(
        lambda: (
            cache.keep("a", 1, b"old", b"old", seen=seen),
            cache.keep_file("a", "page", b"old", seen=seen, kind="page"),
        )
    )
    try:
        cache.sync(log.last, log.after)
    finally:
        _Hooked.hook = staticmethod(lambda: None)
    assert cache.get("a") is None
    assert cache.get_file("a", "page", kind="page") is None


def test_any_change_drops_every_search_result() -> None:
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    cache.sync(log.last, log.after)
    key = ("search", ("flash",))
    cache.keep_result(key, "result", b"{}", seen=cache.generation)
    cache.sync(log.last, log.after)
    assert cache.get_result(key) == ("result", b"{}")  # nothing moved: kept
    log.add("zzz")  # a project no result names: it may match a search now
    cache.sync(log.last, log.after)
    assert cache.get_result(key) is None
    cache.keep_result(key, "result", b"{}", seen=cache.generation)
    cache.forget("b")  # this process's own change
    assert cache.get_result(key) is None


def test_a_result_computed_across_a_check_is_not_kept() -> None:
    log, cache = Log(), PageCache(ttl=0)
    cache.sync(log.last, log.after)
    seen = cache.generation  # a search starts...
    log.add("a")  # ...a project changes, and a check notices
    cache.sync(log.last, log.after)
    cache.keep_result(("search",), "old", b"old", seen=seen)
    assert cache.get_result(("search",)) is None


def test_results_are_capped() -> None:
    log, cache = Log(), PageCache(ttl=0)
    cache.sync(log.last, log.after)
    for n in range(RESULTS + 10):
        cache.keep_result(("search", n), n, b"{}", seen=cache.generation)
    assert cache.get_result(("search", 0)) is None
    assert cache.get_result(("search", RESULTS + 9)) == (RESULTS + 9, b"{}")


def test_results_stay_within_their_byte_budget() -> None:
    log, cache = Log(), PageCache(ttl=0)
    cache.sync(log.last, log.after)
    big = b"x" * (RESULT_BUDGET // 4)
    for n in range(6):
        cache.keep_result(("search", n), n, big, seen=cache.generation)
    assert [n for n in range(6) if cache.get_result(("search", n))] == [2, 3, 4, 5]
    cache.keep_result(("search", 5), 5, b"{}", seen=cache.generation)  # replaced: counted once
    cache.keep_result(("search", 6), 6, big, seen=cache.generation)
    assert [n for n in range(7) if cache.get_result(("search", n))] == [3, 4, 5, 6]
    cache.keep_result(("huge",), 0, b"x" * (RESULT_BUDGET + 1), seen=cache.generation)
    assert cache.get_result(("huge",)) is None and cache.get_result(("search", 6))


def test_no_request_is_sent_to_read_the_log_while_another_reads_it() -> None:
    """While one thread reads the change log, ``due`` says no to the others (their
    ``sync`` would return at once: crossing to a thread for it cost every request in flight
    a thread switch); a caller may ask for a fresher read than the cache's ``ttl``."""
    log, cache = Log(), PageCache(ttl=0)
    log.add("a")
    reading, release = threading.Event(), threading.Event()

    def slow_last() -> tuple[int, int]:
        reading.set()
        release.wait(30)
        return log.last()

    assert cache.due()
    reader = threading.Thread(target=cache.sync, args=(slow_last, log.after))
    reader.start()
    assert reading.wait(30)
    assert not cache.due() and not cache.due(0)  # one is reading: the others serve
    release.set()
    reader.join(30)
    assert cache.due() and cache.generation == 1
    patient = PageCache(ttl=3600)
    patient.sync(log.last, log.after)
    assert not patient.due() and patient.due(0)
    log.add("b")
    patient.sync(log.last, log.after)  # read less than ttl ago: not read again
    assert patient.generation == 1
    patient.sync(log.last, log.after, 0)  # asked for a fresher read
    assert patient.generation == 2


def test_a_waiting_upload_is_woken_only_by_changes_naming_its_project() -> None:
    log, cache = Log(), PageCache(ttl=0)
    cache.sync(log.last, log.after)
    seen = cache.generation
    log.add("b")  # another project's upload or verdict
    cache.sync(log.last, log.after)
    assert cache.generation != seen
    assert not cache.changed_since("a", seen)
    assert cache.changed_since("b", seen)
    log.add("a", hidden=True)  # committed late, below an id already seen
    log.add("c")
    cache.sync(log.last, log.after)
    assert not cache.changed_since("a", seen)
    log.hidden.clear()
    cache.sync(log.last, log.after)
    assert cache.changed_since("a", seen)


def test_a_waiting_upload_is_woken_when_its_change_may_be_lost() -> None:
    log, cache = Log(), PageCache(ttl=0)
    assert not cache.changed_since("a", cache.generation)  # nothing read yet
    before = cache.generation
    cache.sync(log.last, log.after)
    assert cache.changed_since("a", before)  # the first check: anything may have changed
    seen = cache.generation
    log.add("a")
    cache.sync(log.last, log.after)
    after_a = cache.generation
    for i in range(NAMED):  # more projects than it remembers: "a" goes, and counts as changed
        log.add(f"p{i}")
    cache.sync(log.last, log.after)
    assert cache.changed_since("a", seen)
    assert not cache.changed_since("a", after_a)
    seen = cache.generation
    log.rows[:] = [(len(log.rows) + 5, "y")]  # changes deleted before this process read them
    cache.sync(log.last, log.after)
    assert cache.changed_since("a", seen)
