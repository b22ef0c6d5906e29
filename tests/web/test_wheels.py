"""The upload checks on wheels, without a server: each refusal names its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from opmarket.web import WheelLimits, WheelProblem, inspect_wheel

from .plugins import handmade_wheel


def test_a_plain_wheel_passes(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "opm-fine", "1.0", {"opm_fine/x.py": b"x = 1\n"})
    info = inspect_wheel(wheel, wheel.name)
    assert (info.normalized, info.version) == ("opm-fine", "1.0")
    assert info.metadata.startswith(b"Metadata-Version")


@pytest.mark.parametrize(("extra", "symlink", "message"), [
    ({"../x.py": b""}, "", "path traversal"),
    ({"/etc/x.py": b""}, "", "path traversal"),
    ({"a\\..\\x.py": b""}, "", "path traversal"),
    ({"C:/x.py": b""}, "", "path traversal"),
    ({}, "/etc/passwd", "symbolic link"),
    ({"opm_x/zeros": b"\0" * (8 * 1024 * 1024)}, "", "zip bomb"),
])
def test_unsafe_members(tmp_path: Path, extra: dict[str, bytes], symlink: str,
                        message: str) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", extra, symlink=symlink)
    with pytest.raises(WheelProblem, match=message):
        inspect_wheel(wheel, wheel.name)


def test_total_unpacked_size_limit(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", {"opm_x/a": b"a" * 5000})
    with pytest.raises(WheelProblem, match="unpacks to"):
        inspect_wheel(wheel, wheel.name, WheelLimits(max_unpacked_bytes=4000))


def test_name_and_version_must_match_metadata(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", {})
    renamed = wheel.rename(tmp_path / "opm_y-1.0-py3-none-any.whl")
    with pytest.raises(WheelProblem, match="missing"):  # its dist-info is opm_x's
        inspect_wheel(renamed, renamed.name)
    for n, (meta, why) in enumerate([
        ("Name: opm-z\nVersion: 1.0\n", "METADATA says 'opm-z'"),
        ("Name: opm-x\nVersion: 2.0\n", "METADATA says '2.0'"),
        ("Name: opm-x\nVersion: one\n", "not a valid version"),
        ("Name: opm-x\nVersion: 1.0\nRequires-Python: >=>3\n", "Requires-Python"),
    ]):
        folder = tmp_path / str(n)
        folder.mkdir()
        lying = handmade_wheel(folder, "opm-x", "1.0", {},
                               metadata=f"Metadata-Version: 2.1\n{meta}")
        with pytest.raises(WheelProblem, match=why):
            inspect_wheel(lying, lying.name)


@pytest.mark.parametrize("filename", ["x.tar.gz", "../opm_x-1.0-py3-none-any.whl",
                                      "not-a-wheel.whl"])
def test_bad_file_names(tmp_path: Path, filename: str) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"PK")
    with pytest.raises(WheelProblem):
        inspect_wheel(path, filename)


def test_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "opm_x-1.0-py3-none-any.whl"
    path.write_bytes(b"not a zip")
    with pytest.raises(WheelProblem, match="not a zip"):
        inspect_wheel(path, path.name)
