"""opmarket's wheel carries the C-ABI host compiled (abi3), and a C-ABI plugin loads and runs
from it in a fresh virtual environment with no C compiler anywhere on PATH and no CC."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BITCAST = REPO / "plugins" / "bitcast"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bitcast_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin's wheel: built with a compiler, as its author does."""
    out = tmp_path_factory.mktemp("bitcast")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(out),
            str(BITCAST),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("opmarket_bitcast-*.whl")
    return wheel


def pythons() -> list[str]:
    """Another CPython >= 3.11 here first (the abi3 host must serve it too), then ours."""
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    found = []
    for path in sorted(glob.glob(f"{root}/versions/3.*/bin/python3"), reverse=True):
        version = subprocess.run(
            [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        minor = version.partition(".")[2]
        if version != ours and version.startswith("3.") and minor.isdigit() and int(minor) >= 11:
            found.append(path)
            break
    return [*found, sys.executable]


def test_the_wheel_carries_the_compiled_host_for_every_python(opmarket_wheel: Path) -> None:
    assert "-cp311-abi3-" in opmarket_wheel.name and "linux" in opmarket_wheel.name
    names = set(zipfile.ZipFile(opmarket_wheel).namelist())
    assert [n for n in names if n.startswith("opmarket/registry/_capi_host")] == [
        "opmarket/registry/_capi_host.abi3.so"
    ]
    assert "opmarket/sdk/include/opmarket/capi_bridge.h" in names
    assert "opmarket/web/static/style.css" in names and "opmarket/web/templates/op.html" in names
    log = (opmarket_wheel.parent / "build.log").read_text(encoding="utf-8")
    assert "_capi_host.c" in log  # the log is the build's
    assert "would be ignored" not in log, log[-3000:]
    # The compiler ran with -Wall -Wextra and had nothing to say.
    assert "-Wall -Wextra" in log and not re.search(r"\.[ch]:\d+:\d+: warning:", log), log


def test_a_c_abi_plugin_runs_on_a_machine_without_a_compiler(
    opmarket_wheel: Path, bitcast_wheel: Path, tmp_path: Path
) -> None:
    uv = Path(sys.executable).with_name("uv")
    problems = []
    for python in pythons():
        venv = tmp_path / f"venv-{len(problems)}"
        subprocess.run([str(uv), "venv", "--quiet", "--python", python, str(venv)], check=True)
        installed = subprocess.run(
            [
                str(uv),
                "pip",
                "install",
                "--quiet",
                "--python",
                str(venv / "bin" / "python"),
                str(opmarket_wheel),
                str(bitcast_wheel),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if installed.returncode == 0:
            break
        problems.append(f"{python}: {installed.stderr.strip()[-300:]}")
    else:
        pytest.fail("cannot install the wheels anywhere: " + "; ".join(problems))
    script = """
import shutil, sys
compilers = [c for c in ("cc", "gcc", "clang", "c99", "tcc") if shutil.which(c)]
assert not compilers, f"a compiler is on PATH: {compilers}"
import numpy as np, opmarket
from opmarket.registry import load_plugins
info = [p for p in load_plugins() if p.name == "bitcast"][0]
assert info.status == "loaded", info.error
x = np.arange(3, dtype=np.int32)
out = opmarket.ops.bitcast(x, type=opmarket.sdk.DType.UINT8)
assert out.tobytes() == x.tobytes() and out.shape == (3, 4)
import opmarket.registry._capi_host as host
print(host.__file__)
print("%d.%d" % sys.version_info[:2])
"""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CC", "CXX", "LDSHARED", "PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(PATH=str(venv / "bin"), OPMARKET_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    host, version = done.stdout.split()
    assert host.startswith(str(venv)) and host.endswith("_capi_host.abi3.so"), host
    if python != sys.executable:  # the cp311-abi3 wheel on another CPython
        assert version != f"{sys.version_info.major}.{sys.version_info.minor}"
    assert not list((tmp_path / "cache").glob("capi/*.so"))  # nothing was compiled
