"""pip and uv install a validated plugin from /simple/ into a fresh venv, and its op runs."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from .conftest import BIN, Market, Wheels, clean_env

RUN_OP = "import numpy as np, opmarket; print(opmarket.ops.double(np.arange(4, dtype=np.int32)))"


def fresh_venv(path: Path) -> Path:
    """A new venv that has opmarket: the dev environment's site-packages are added through a
    .pth (no network here), so opmarket, numpy and friends count as installed for pip."""
    venv.create(path, with_pip=True)
    python = path / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    dev = sysconfig.get_paths()["purelib"]
    Path(purelib, "opmarket-dev.pth").write_text(f"import site; site.addsitedir({dev!r})\n")
    return python


@pytest.mark.slow
def test_pip_installs_from_the_index_and_the_op_runs(
    uploaded: Market, wheels: Wheels, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv")
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--index-url",
            f"{uploaded.url}/simple/",
            "opm-double==1.0.0",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Requirement already satisfied: opmarket" in done.stdout
    ran = subprocess.run(
        [str(python), "-c", RUN_OP],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[0 2 4 6]"


@pytest.mark.slow
def test_pip_never_sees_a_rejected_wheel(market: Market, wheels: Wheels, tmp_path: Path) -> None:
    python = Path(sys.executable)  # resolution only: nothing is installed
    done = subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "download",
            "--no-deps",
            "-d",
            str(tmp_path),
            "--index-url",
            f"{market.url}/simple/",
            "opm-wrong",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=120,
    )
    assert done.returncode != 0
    assert not list(tmp_path.glob("*.whl"))


@pytest.mark.slow
def test_uv_installs_from_the_index(uploaded: Market, tmp_path: Path) -> None:
    uv = BIN / "uv"
    python = fresh_venv(tmp_path / "venv")
    # uv reads site-packages itself and ignores the .pth's opmarket, so it installs the
    # plugin without dependencies; opmarket is there through the .pth.
    done = subprocess.run(
        [
            str(uv),
            "pip",
            "install",
            "--python",
            str(python),
            "--no-deps",
            "--no-cache",
            "--index-url",
            f"{uploaded.url}/simple/",
            "opm-double==1.0.0",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    ran = subprocess.run(
        [str(python), "-c", RUN_OP],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[0 2 4 6]"
