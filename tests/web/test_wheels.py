"""The upload checks on wheels, without a server: each refusal names its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from opmarket.web import WheelError, WheelLimits, inspect_wheel

from .plugins import handmade_wheel, record_line


def test_a_plain_wheel_passes(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "opm-fine", "1.0", {"opm_fine/x.py": b"x = 1\n"})
    info = inspect_wheel(wheel, wheel.name)
    assert (info.normalized, info.version) == ("opm-fine", "1.0")
    assert info.metadata.startswith(b"Metadata-Version")


@pytest.mark.parametrize(
    ("extra", "symlink", "message"),
    [
        ({"../x.py": b""}, "", "path traversal"),
        ({"/etc/x.py": b""}, "", "path traversal"),
        ({"a\\..\\x.py": b""}, "", "path traversal"),
        ({"C:/x.py": b""}, "", "path traversal"),
        ({}, "/etc/passwd", "symbolic link"),
        ({"opm_x/zeros": b"\0" * (8 * 1024 * 1024)}, "", "zip bomb"),
    ],
)
def test_unsafe_members(
    tmp_path: Path, extra: dict[str, bytes], symlink: str, message: str
) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", extra, symlink=symlink)
    with pytest.raises(WheelError, match=message):
        inspect_wheel(wheel, wheel.name)


def test_total_unpacked_size_limit(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", {"opm_x/a": b"a" * 5000})
    with pytest.raises(WheelError, match="unpacks to"):
        inspect_wheel(wheel, wheel.name, WheelLimits(max_unpacked_bytes=4000))


def test_name_and_version_must_match_metadata(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", {})
    renamed = wheel.rename(tmp_path / "opm_y-1.0-py3-none-any.whl")
    with pytest.raises(WheelError, match="missing"):  # its dist-info is opm_x's
        inspect_wheel(renamed, renamed.name)
    for n, (meta, why) in enumerate(
        [
            ("Name: opm-z\nVersion: 1.0\n", "METADATA says 'opm-z'"),
            ("Name: opm-x\nVersion: 2.0\n", "METADATA says '2.0'"),
            ("Name: opm-x\nVersion: one\n", "Version: 'one' is invalid"),
            ("Name: opm-x\nVersion: 1.0\nRequires-Python: >=>3\n", "Requires-Python"),
        ]
    ):
        folder = tmp_path / str(n)
        folder.mkdir()
        lying = handmade_wheel(
            folder, "opm-x", "1.0", {}, metadata=f"Metadata-Version: 2.1\n{meta}"
        )
        with pytest.raises(WheelError, match=why):
            inspect_wheel(lying, lying.name)


@pytest.mark.parametrize(
    "filename", ["x.tar.gz", "../opm_x-1.0-py3-none-any.whl", "not-a-wheel.whl"]
)
def test_bad_file_names(tmp_path: Path, filename: str) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"PK")
    with pytest.raises(WheelError):
        inspect_wheel(path, filename)


def test_not_a_zip(tmp_path: Path) -> None:
    path = tmp_path / "opm_x-1.0-py3-none-any.whl"
    path.write_bytes(b"not a zip")
    with pytest.raises(WheelError, match="not a zip"):
        inspect_wheel(path, path.name)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"opm_x/./__init__.py": b"hidden = 1\n"},
            "non-canonical path",
        ),  # beside opm_x/__init__.py
        ({"opm_x//x.py": b""}, "non-canonical path"),
        ({"OPM_X/__init__.py": b"hidden = 1\n"}, "duplicate entry"),  # one file on macOS, Windows
    ],
)
def test_entries_that_alias_another_path_are_refused(
    tmp_path: Path, extra: dict[str, bytes], message: str
) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", extra)
    with pytest.raises(WheelError, match=message):
        inspect_wheel(wheel, wheel.name)


@pytest.mark.parametrize(
    ("dist", "version", "filename", "message"),
    [
        # a Cyrillic e (U+0435): a homoglyph of opm-exp, and no PEP 508 name
        ("opm-\u0435xp", "1.0", "opm_\u0435xp-1.0-py3-none-any.whl", "not a valid name"),
        (
            "opm-x",
            "1.0",
            "opm_x-1.0-py3-none-any<img onerror>.whl",
            "not a valid compatibility tag",
        ),
        ("opm-x", "1.0+evil", "opm_x-1.0+evil-py3-none-any.whl", "local versions are not accepted"),
        # As PyPI: a plain linux tag says nothing of the glibc and libraries it needs.
        (
            "opm-x",
            "1.0",
            "opm_x-1.0-cp311-cp311-linux_x86_64.whl",
            r"the platform tag 'linux_x86_64' is not accepted, as on PyPI: build the wheel with "
            r"`opmarket build`, which repairs it to a manylinux tag",
        ),
    ],
)
def test_invalid_names_tags_and_local_versions(
    tmp_path: Path, dist: str, version: str, filename: str, message: str
) -> None:
    wheel = handmade_wheel(tmp_path, dist, version, {}, filename=filename)
    with pytest.raises(WheelError, match=message):
        inspect_wheel(wheel, wheel.name)


def test_a_metadata_name_with_a_kelvin_sign_is_refused(tmp_path: Path) -> None:
    # "\u212a" lower-cases to an ASCII "k": the file name's check alone would let it through.
    wheel = handmade_wheel(
        tmp_path,
        "opm-k",
        "1.0",
        {},
        metadata="Metadata-Version: 2.1\nName: opm-\u212a\nVersion: 1.0\n",
    )
    with pytest.raises(WheelError, match=r"invalid for 'name'|not a valid name"):
        inspect_wheel(wheel, wheel.name)


def _record(*rows: str) -> str:
    return "".join(rows) + "opm_x-1.0.dist-info/RECORD,,\n"


_META = b"Metadata-Version: 2.1\nName: opm-x\nVersion: 1.0\n"
_WHEEL = b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (
            _record(
                record_line("opm_x/__init__.py", b"not what is in the archive"),
                record_line("opm_x-1.0.dist-info/METADATA", _META),
                record_line("opm_x-1.0.dist-info/WHEEL", _WHEEL),
            ),
            "'opm_x/__init__.py' does not match its sha256",
        ),
        (
            _record(
                record_line("opm_x/__init__.py", b""),
                record_line("opm_x-1.0.dist-info/WHEEL", _WHEEL),
            ),
            "'opm_x-1.0.dist-info/METADATA' is not in RECORD",
        ),
        (
            _record(
                record_line("opm_x/__init__.py", b""),
                record_line("opm_x/gone.py", b""),
                record_line("opm_x-1.0.dist-info/METADATA", _META),
                record_line("opm_x-1.0.dist-info/WHEEL", _WHEEL),
            ),
            "RECORD lists 'opm_x/gone.py', which the archive lacks",
        ),
        (
            _record(
                "opm_x/__init__.py,,\n",
                record_line("opm_x-1.0.dist-info/METADATA", _META),
                record_line("opm_x-1.0.dist-info/WHEEL", _WHEEL),
            ),
            "no usable hash",
        ),
        (
            _record(
                "opm_x/__init__.py,sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU,99\n",
                record_line("opm_x-1.0.dist-info/METADATA", _META),
                record_line("opm_x-1.0.dist-info/WHEEL", _WHEEL),
            ),
            "is 0 bytes, RECORD says 99",
        ),
    ],
)
def test_record_must_match_the_archive(tmp_path: Path, record: str, message: str) -> None:
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", {}, record=record)
    with pytest.raises(WheelError, match=message):
        inspect_wheel(wheel, wheel.name)


def test_a_manylinux_wheel_passes(tmp_path: Path) -> None:
    name = "opm_x-1.0-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
    wheel = handmade_wheel(tmp_path, "opm-x", "1.0", {}, filename=name)
    assert inspect_wheel(wheel, wheel.name).normalized == "opm-x"
