"""The version policy."""

from __future__ import annotations

import pytest

from opmarket.compat import InvalidVersionError, check_bump
from opmarket.compat._version import required_bump


@pytest.mark.parametrize(
    ("old", "new", "level", "ok", "suggested"),
    [
        ("1.2.3", "2.0.0", "major", True, "2.0.0"),
        ("1.2.3", "1.3.0", "major", False, "2.0.0"),
        ("1.2.3", "1.2.4", "minor", False, "1.3.0"),
        ("1.2.3", "1.3.0", "minor", True, "1.3.0"),
        ("1.2.3", "1.2.4", "none", True, "1.2.3"),
        ("1.2.3", "1.2.3", "none", True, "1.2.3"),
        ("1.2.3", "1.2.2", "none", False, "1.2.3"),
        # Below 1.0 each level shifts down one.
        ("0.3.1", "0.4.0", "major", True, "0.4.0"),
        ("0.3.1", "0.3.2", "major", False, "0.4.0"),
        ("0.3.1", "0.3.2", "minor", True, "0.3.2"),
        ("0.3.1", "1.0.0", "major", True, "0.4.0"),
        ("1.0", "2.0", "major", True, "2.0.0"),
        ("1.0.0", "2.0.0rc1", "major", True, "2.0.0"),
    ],
)
def test_check_bump(old: str, new: str, level: str, ok: bool, suggested: str) -> None:
    verdict = check_bump(old, new, level)
    assert verdict.ok is ok
    assert verdict.suggested == suggested
    assert old in verdict.message and new in verdict.message
    if not ok:
        assert suggested in verdict.message


def test_too_small_message_says_why() -> None:
    verdict = check_bump("1.2.3", "1.2.4", "major")
    assert verdict.message == (
        "1.2.3 -> 1.2.4 is a patch bump, too small: breaking changes need a major bump; "
        "the smallest honest version is 2.0.0"
    )
    assert verdict.to_json()["required"] == "major"
    assert verdict.to_json()["actual"] == "patch"


def test_below_one_message_mentions_the_shift() -> None:
    assert "below 1.0" in check_bump("0.1.0", "0.1.1", "major").message


@pytest.mark.parametrize(
    ("old", "new", "level", "why"),
    [
        (
            "0.1.0",
            "0.1.1",
            "major",
            "breaking changes need a minor bump below 1.0 (major from 1.0 on)",
        ),
        ("0.1.0", "0.1.0", "minor", "additions need a patch bump below 1.0 (minor from 1.0 on)"),
        (
            "0.1.0",
            "0.2.0",
            "major",
            "breaking changes need a minor bump below 1.0 (major from 1.0 on)",
        ),
        ("1.0.0", "1.0.1", "minor", "additions need a minor bump"),
    ],
)
def test_the_reason_names_the_changes_found(old: str, new: str, level: str, why: str) -> None:
    message = check_bump(old, new, level).message
    assert f"{why};" in message or f"{why})" in message, message


def test_the_suggestion_keeps_the_epoch() -> None:
    verdict = check_bump("1!1.0", "1!1.0.1", "major")
    assert (verdict.ok, verdict.suggested) == (False, "1!2.0.0")
    assert verdict.message.endswith("the smallest honest version is 1!2.0.0")
    assert check_bump("1!1.0", "2!0.1", "major").ok  # a new epoch is more than a major bump


def test_required_bump() -> None:
    assert required_bump(True, True) == "major"
    assert required_bump(False, True) == "minor"
    assert required_bump(False, False) == "none"


def test_invalid_version_is_an_opmarket_value_error() -> None:
    with pytest.raises(InvalidVersionError, match="'banana' is not a valid version"):
        check_bump("banana", "1.0", "none")
    assert issubclass(InvalidVersionError, ValueError)


def test_same_version_with_changes_is_too_small() -> None:
    verdict = check_bump("1.0.0", "1.0.0", "minor")
    assert not verdict.ok
    assert verdict.message.startswith("1.0.0 -> 1.0.0 is the same version, too small")
