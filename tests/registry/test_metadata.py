"""Versions ordered one way everywhere: PEP 440 order, what is not PEP 440 first."""

from __future__ import annotations

from packaging.version import Version

from opmarket.registry._metadata import parse_version, version_key


def test_versions_sort_in_pep_440_order_with_invalid_ones_first() -> None:
    given = ["1.10.0", "not-a-version", "1.2.0", "1.0.0rc1", "1.0", "a-bad-one", "0.9.post1"]
    assert sorted(given, key=version_key) == [
        "a-bad-one",
        "not-a-version",
        "0.9.post1",
        "1.0.0rc1",
        "1.0",
        "1.2.0",
        "1.10.0",
    ]
    # 1.0 and 1.0.0 are one version: a stable sort keeps their order.
    assert sorted(["1.0.0", "1.0"], key=version_key) == ["1.0.0", "1.0"]


def test_parse_version_says_none_for_what_is_not_pep_440() -> None:
    assert parse_version("1.0.post2") == Version("1.0.post2")
    assert parse_version("1.0-beta.x") is None
    assert parse_version("") is None
