"""The page cache: served from memory, dropped when the catalog's serials move."""

from __future__ import annotations

from opmarket.web._cache import INDEX, PageCache


def test_pages_follow_the_serials() -> None:
    cache = PageCache(ttl=0)
    serials = {"a": 1, "b": 1}
    reads: list[str] = []

    def generation() -> tuple[int, int]:
        reads.append("generation")
        return len(serials), sum(serials.values())

    def read_serials() -> dict[str, int]:
        reads.append("serials")
        return dict(serials)

    cache.sync(generation, read_serials)
    seen = cache.generation
    cache.keep("a", 1, b"<a1>", b"{a1}", seen=seen)
    cache.keep("b", 1, b"<b1>", b"{b1}", seen=seen)
    cache.keep(INDEX, (2, 2), b"<i>", b"{i}", seen=seen)
    reads.clear()
    cache.sync(generation, read_serials)
    assert reads == ["generation"]  # nothing moved: one cheap read
    assert cache.get("a") == (b"<a1>", b"{a1}")
    serials["a"] = 2
    cache.sync(generation, read_serials)
    assert cache.get("a") is None and cache.get(INDEX) is None
    assert cache.get("b") == (b"<b1>", b"{b1}")


def test_a_page_rendered_across_a_check_is_not_kept() -> None:
    cache = PageCache(ttl=0)
    serials = {"a": 1}
    cache.sync(lambda: (1, sum(serials.values())), lambda: dict(serials))
    seen = cache.generation  # a render starts, reads serial 1...
    serials["a"] = 2  # ...the project changes, and a check notices
    cache.sync(lambda: (1, sum(serials.values())), lambda: dict(serials))
    assert cache.keep("a", 1, b"old", b"old", seen=seen) == (b"old", b"old")
    assert cache.get("a") is None  # served once, never kept


def test_forget_drops_the_project_and_the_index() -> None:
    cache = PageCache(ttl=60)
    cache.keep("a", 1, b"a", b"a", seen=None)
    cache.keep(INDEX, (1, 1), b"i", b"i", seen=None)
    cache.forget("a")
    assert cache.get("a") is None and cache.get(INDEX) is None
