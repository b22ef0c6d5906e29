"""History files: opmarket's own (a list of releases) and TensorFlow's ops_history."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from opmarket.compat import Severity, add_release, compare_history, read_history
from opmarket.sdk import DocumentError, OpSet, op, opdefs_to_pbtxt

Release = Callable[..., OpSet]


def test_add_release_appends_and_replaces(tmp_path: Path, release: Release) -> None:
    path = tmp_path / "history.json"
    assert "added release 1.0.0" in add_release(path, release("1.0.0"))
    assert "added release 1.1.0" in add_release(path, release("1.1.0", extra_attr="a: int = 1"))
    assert "replaced release 1.1.0" in add_release(path, release("1.1.0", extra_attr="a: int = 2"))
    releases = read_history(path)
    assert [label for label, _ in releases] == ["1.0.0", "1.1.0"]
    attr = releases[1][1]["Opm>ZeroOut"].attr("a")
    assert attr is not None and attr.default == 2
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["format"] == "opmarket.history" and len(data["releases"]) == 2


def test_add_release_refuses_an_older_release(tmp_path: Path, release: Release) -> None:
    path = tmp_path / "history.json"
    add_release(path, release("2.0.0"))
    with pytest.raises(DocumentError, match="older than the last recorded one"):
        add_release(path, release("1.0.0"))


def test_history_checks_new_against_every_release(release: Release) -> None:
    # The new release changes a default both recorded releases had: reported once.
    r1 = release("1.0.0", extra_attr="a: int = 1")
    r2 = release("1.1.0", extra_attr="a: int = 1")
    new = release("1.2.0", extra_attr="a: int = 5")
    findings = compare_history([("1.0.0", r1), ("1.1.0", r2)], new)
    assert [(f.rule, f.release) for f in findings] == [("attr-default-changed", "")]


def test_history_finds_what_only_an_older_release_had(release: Release) -> None:
    r1 = release("1.0.0", extra_attr="a: int = 1")
    r2 = release("1.1.0")  # a already gone in 1.1 (that release broke it)
    new = release("1.2.0", extra_attr="b: int = 2")
    findings = compare_history([("1.0.0", r1), ("1.1.0", r2)], new)
    assert [(f.rule, f.release, f.severity) for f in findings] == [
        ("attr-added", "", Severity.INFO),
        ("attr-removed", "1.0.0", Severity.BREAKING),
    ]
    # As in TensorFlow, an op identical to its last recorded version is not checked again.
    assert compare_history([("1.0.0", r1), ("1.1.0", r2)], release("1.2.0")) == []


def test_an_attr_added_without_default_may_not_gain_one(release: Release) -> None:
    # TensorFlow's OpDefAddedDefaultsUnchanged(first, last, new), for histories that hold a
    # breaking release: 1.1 added attr a without a default.
    r1 = release("1.0.0")
    r2 = release("1.1.0", extra_attr="a: int")
    new = release("1.2.0", extra_attr="a: int = 0")
    findings = compare_history([("1.0.0", r1), ("1.1.0", r2)], new)
    assert [(f.rule, f.release) for f in findings if f.severity is Severity.BREAKING] == [
        ("attr-default-changed", "1.1.0")
    ]
    assert "added after the first release without a default" in findings[-1].message


def test_tensorflow_history_folder_is_read_as_releases(
    tensorflow_testdata: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "h"
    folder.mkdir()
    for name in ("Placeholder.pbtxt", "Relu.pbtxt", "Const.pbtxt"):
        shutil.copy(tensorflow_testdata / "tf_ops_history_v2" / name, folder / name)
    releases = read_history(folder)
    assert len(releases) >= 2
    assert all({"Placeholder", "Relu", "Const"} <= {o.name for o in r} for _, r in releases)
    latest = OpSet.of([r for _, r in releases][-1].ops)
    # Today's ops pass, as they pass TensorFlow's own history check: Placeholder's shape
    # default changed in an older version, and defaults are compared with the latest only.
    assert [f for f in compare_history(releases, latest) if f.severity is Severity.BREAKING] == []
    # Going back to Placeholder's first definition breaks against the latest release.
    first = releases[0][1]
    back = OpSet.of([first["Placeholder"], latest["Relu"], latest["Const"]])
    assert {
        (f.op, f.rule) for f in compare_history(releases, back) if f.severity is Severity.BREAKING
    } >= {("Placeholder", "attr-default-changed")}


def test_older_releases_are_checked_like_tensorflows_ops_history(release: Release) -> None:
    # A default changed by 1.1 (already reported then) is not reported against 1.0 again...
    r1 = release("1.0.0", extra_attr="a: int = 1")
    r2 = release("1.1.0", extra_attr="a: int = 2")
    assert compare_history([("1.0.0", r1), ("1.1.0", r2)], r2) == []
    # ... but anything OpDefCompatible rejects is, against every release.
    r3 = release("1.1.0", extra_attr="a: int >= 5 = 5")
    findings = compare_history([("1.0.0", r1), ("1.1.0", r2)], r3)
    assert sorted((f.rule, f.release) for f in findings) == [
        ("attr-default-changed", ""),
        ("attr-minimum-added", ""),
    ]


def test_single_tensorflow_history_file(tmp_path: Path) -> None:
    v1 = op("Foo").output("y: float").build()
    v2 = op("Foo").output("y: float").attr("a: int = 1").build()
    path = tmp_path / "Foo.pbtxt"
    path.write_text(opdefs_to_pbtxt([v1, v2]), encoding="utf-8")
    releases = read_history(path)
    assert [r["Foo"] for _, r in releases] == [v1, v2]
    back = compare_history(releases, OpSet.of([v1]))
    assert [(f.rule, f.release) for f in back] == [("attr-removed", "")]


def test_unreadable_history(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(DocumentError, match="invalid JSON at line 1"):
        read_history(path)
    with pytest.raises(DocumentError, match="no such file"):
        read_history(tmp_path / "missing.json")


def test_add_release_refuses_a_version_that_is_not_pep_440(
    tmp_path: Path, release: Release
) -> None:
    path = tmp_path / "history.json"
    add_release(path, release("1.0.0"))
    before = path.read_text(encoding="utf-8")
    with pytest.raises(DocumentError, match="release version 'banana' is not a valid version"):
        add_release(path, release("banana"))
    assert path.read_text(encoding="utf-8") == before
    assert [p.name for p in tmp_path.iterdir()] == ["history.json"]  # no temporary left
