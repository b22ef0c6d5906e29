"""``opmarket env-check`` as a user runs it: the text report, tags, ``--python``, bad usage."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import BIN, REPO, predict

# --- the command line ------------------------------------------------------------------------


def test_the_text_report_is_a_line_per_file_then_one_per_problem(
    case_wheels: dict[str, Path],
) -> None:
    wheels = [case_wheels["python_global"], case_wheels["needed_missing"]]
    done = subprocess.run(
        [str(BIN / "opmarket"), "env-check", *map(str, wheels)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        f"{wheels[0]}: works",
        f"{wheels[1]}: does not load",
        "  needed: opm_case_needed_missing/_needed_missing.so: needs libopm_nowhere.so, "
        "found nowhere the dynamic linker looks",
    ]


def test_a_wheel_for_another_python_is_a_tag_problem(
    case_wheels: dict[str, Path], tmp_path: Path
) -> None:
    other = tmp_path / case_wheels["python_global"].name.replace(
        "py3-none-any", "cp27-cp27mu-linux_x86_64"
    )
    shutil.copy(case_wheels["python_global"], other)
    code, document = predict([other])
    assert code == 1
    (problem,) = [p for p in document["files"][0]["problems"] if p["kind"] == "tag"]
    assert "cp27-cp27mu-linux_x86_64" in problem["detail"]
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--disable-pip-version-check",
            "--target",
            str(tmp_path / "t"),
            str(other),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert refused.returncode != 0 and "not a supported wheel" in refused.stderr


@pytest.mark.slow
def test_python_names_another_environment(case_wheels: dict[str, Path], tmp_path: Path) -> None:
    # A bare virtual environment of this Python: no packaging, no torch in it.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True
    )
    python = tmp_path / "venv" / "bin" / "python"
    wheels = [case_wheels["python_global"]]
    if "torch_needed" in case_wheels:
        wheels.append(case_wheels["torch_needed"])
    code, document = predict(wheels, "--python", str(python))
    assert document["environment"]["frameworks"] == {}
    assert document["environment"]["python"] == os.path.realpath(python)
    assert document["files"][0]["works"]
    if len(wheels) > 1:
        assert code == 1
        torch_report = document["files"][1]
        assert {p["kind"] for p in torch_report["problems"]} == {"needed"}
        assert any("declares torch, not installed" in n["detail"] for n in torch_report["notes"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere.whl"], "nowhere.whl: no such file"),
        (["README.md"], "give a wheel file (.whl) or NAME==VERSION"),
        (["x==not a version"], "not NAME==VERSION"),
        (["--python", "/nonexistent/python", "x.whl"], "no such file"),
        (["--python", "README.md", "pyproject.toml"], "give a wheel file"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    done = subprocess.run(
        [str(BIN / "opmarket"), "env-check", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr


def test_a_broken_wheel_is_one_line_and_exit_2(tmp_path: Path) -> None:
    broken = tmp_path / "broken-1.0-py3-none-any.whl"
    broken.write_bytes(b"not a zip")
    done = subprocess.run(
        [str(BIN / "opmarket"), "env-check", str(broken)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr


def handmade_wheel(path: Path, library: bytes) -> Path:
    """A wheel holding ``library`` as x/_lib.so, and its METADATA."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x/_lib.so", library)
        z.writestr("x-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: x\nVersion: 1.0\n")
    return path


def test_a_wheel_whose_libraries_unpack_past_the_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opmarket.registry import _envcheck
    from opmarket.registry._environment import read_environment
    from opmarket.registry._wheelzip import BadWheel

    libm = Path("/lib/x86_64-linux-gnu/libm.so.6").read_bytes()
    wheel = handmade_wheel(tmp_path / "x-1.0-py3-none-any.whl", libm)
    env = read_environment()
    assert _envcheck.check_wheel(wheel, env).works
    monkeypatch.setattr(_envcheck, "UNPACK_LIMIT", len(libm) - 1)
    with pytest.raises(BadWheel, match="unpack to more than"):
        _envcheck.check_wheel(wheel, env)


def test_a_member_that_does_not_inflate_is_one_line_and_exit_2(tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path / "x-1.0-py3-none-any.whl", b"\x7fELF" + bytes(range(256)) * 64)
    data = bytearray(wheel.read_bytes())
    start = data.index(b"x/_lib.so") + len("x/_lib.so") + 8  # into the deflated bytes
    data[start : start + 32] = bytes(32)
    wheel.write_bytes(bytes(data))
    done = subprocess.run(
        [str(BIN / "opmarket"), "env-check", str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "x/_lib.so" in done.stderr


@pytest.mark.parametrize("python", ["/bin/true", "/bin/false"])
def test_a_python_that_does_not_answer_is_one_line_and_exit_2(python: str, tmp_path: Path) -> None:
    wheel = handmade_wheel(tmp_path / "x-1.0-py3-none-any.whl", b"not ELF")
    done = subprocess.run(
        [str(BIN / "opmarket"), "env-check", "--python", python, str(wheel)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        f"opmarket: error: --python {python}: not a Python that answers: no output"
    ]


def test_a_library_whose_names_break_the_readers_limit_does_not_work(tmp_path: Path) -> None:
    # An RPATH longer than the ELF reader reads of a name: the reader refuses the file, and
    # env-check must say so instead of taking it as a library that needs nothing.
    from opmarket.registry._envcheck import check_wheel
    from opmarket.registry._environment import read_environment

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler")
    (tmp_path / "lib.c").write_text("int opm_f(void) { return 1; }\n")
    (tmp_path / "rpath.txt").write_text("-rpath /" + "a" * 300_000 + "\n")
    library = tmp_path / "lib.so"
    subprocess.run(
        [
            cc,
            "-shared",
            "-fPIC",
            "-o",
            str(library),
            str(tmp_path / "lib.c"),
            f"-Wl,@{tmp_path / 'rpath.txt'}",
        ],
        check=True,
    )
    wheel = handmade_wheel(tmp_path / "x-1.0-py3-none-any.whl", library.read_bytes())
    report = check_wheel(wheel, read_environment())
    assert not report.works
    assert [(p.kind, p.library) for p in report.problems] == [("elf", "x/_lib.so")], report
