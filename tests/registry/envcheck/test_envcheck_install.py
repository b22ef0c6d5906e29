"""``opmarket install NAME`` installs the newest release whose wheel loads here, with real pip
from a file index: a newer release built against a libstdc++ this system lacks is skipped,
and the reason is printed; when no release loads, nothing is installed. Also env-check
reading NAME==VERSION from the same index."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from .conftest import BIN


def library_of(wheel: Path) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(".so")))


def write_wheel(folder: Path, version: str, library: bytes) -> Path:
    """A wheel of opm-loads VERSION shipping ``library`` as opm_loads/_lib.so."""
    info = f"opm_loads-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: opm-loads\nVersion: {version}\n"
    files = {
        "opm_loads/__init__.py": b"",
        "opm_loads/_lib.so": library,
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    wheel = folder / f"opm_loads-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return wheel


def file_index(root: Path, releases: dict[str, bytes]) -> str:
    """A PEP 503 folder index of opm-loads with one wheel per release; its URL."""
    files = root / "files"
    files.mkdir(parents=True)
    wheels = [write_wheel(files, v, lib) for v, lib in releases.items()]
    page = root / "simple" / "opm-loads"
    page.mkdir(parents=True)
    (page / "index.html").write_text(
        "".join(f'<a href="../../files/{w.name}">{w.name}</a>' for w in wheels)
    )
    return (root / "simple").as_uri() + "/"


def install(index: str, target: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "OPMARKET_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_TARGET=str(target), PIP_NO_DEPS="1")
    return subprocess.run(
        [str(BIN / "opmarket"), "install", "opm-loads", "--index-url", index],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


@pytest.mark.slow
def test_install_skips_a_newer_release_that_would_not_load(
    case_wheels: dict[str, Path], tmp_path: Path
) -> None:
    loads = library_of(case_wheels["python_global"])
    future = library_of(case_wheels["glibcxx_future"])
    index = file_index(tmp_path / "index", {"1.0": loads, "2.0": future})
    done = install(index, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "opm-loads 1.0: opm_loads-1.0-py3-none-any.whl"
    assert lines[1].startswith(
        "  2.0: skipped: does not load here: version: opm_loads/_lib.so: needs GLIBCXX_3.4.99 "
        "of libstdc++.so.6"
    )
    assert (tmp_path / "site" / "opm_loads-1.0.dist-info").is_dir()


@pytest.mark.slow
def test_install_installs_nothing_when_no_release_loads(
    case_wheels: dict[str, Path], tmp_path: Path
) -> None:
    future = library_of(case_wheels["glibcxx_future"])
    index = file_index(tmp_path / "index", {"1.0": future, "2.0": future})
    done = install(index, tmp_path / "site")
    assert done.returncode == 1
    assert [line.split(":")[0] for line in done.stdout.splitlines()] == ["  2.0", "  1.0"]
    assert "opm-loads: no release on" in done.stderr and "loads here" in done.stderr
    assert not (tmp_path / "site").exists()


def test_env_check_reads_name_version_from_the_index(
    case_wheels: dict[str, Path], tmp_path: Path
) -> None:
    loads = library_of(case_wheels["python_global"])
    future = library_of(case_wheels["glibcxx_future"])
    index = file_index(tmp_path / "index", {"1.0": loads, "2.0": future})

    def env_check(*targets: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(BIN / "opmarket"), "env-check", "--index-url", index, *targets],
            capture_output=True,
            text=True,
            check=False,
        )

    done = env_check("opm-loads==1.0", "opm-loads==2.0")
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "opm-loads==1.0: works"
    assert lines[1] == "opm-loads==2.0: does not load"
    assert lines[2].startswith("  version: opm_loads/_lib.so: needs GLIBCXX_3.4.99")
    missing = env_check("opm-loads==3.0")
    assert missing.returncode == 2
    assert "opm-loads==3.0: no wheel of that release on" in missing.stderr
