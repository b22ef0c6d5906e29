"""write_atomic: the whole new content or the old one, and no temporary file left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from opmarket.sdk._files import write_atomic


def test_replaces_whole_and_leaves_nothing_beside(tmp_path: Path) -> None:
    target = tmp_path / "history.json"
    target.write_text("old")
    write_atomic(target, "new ✓")
    write_atomic(tmp_path / "blob", b"\x00\x01", fsync=True)
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert (tmp_path / "blob").read_bytes() == b"\x00\x01"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blob", "history.json"]


def test_a_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(UnicodeEncodeError):
        write_atomic(target, "\ud800")  # a lone surrogate cannot be encoded
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]
    with pytest.raises(IsADirectoryError):
        write_atomic(tmp_path, "x")  # renaming onto a folder fails after the write
    assert not [p for p in tmp_path.parent.iterdir() if p.name.startswith(f".{tmp_path.name}.")]
