"""``opmarket doctor`` reads every installed plugin's libraries as env-check does: a plugin
that imports fine but ships a library that would not load (it loads it on first use) is a
problem; the first-party plugins here, CUDA companions included, are not."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import BIN, _run

PLUGIN = """from opmarket.sdk import hookimpl, op

LAZY = op("Test>Lazy").input("x: float").output("y: float").build()


@hookimpl
def register(register):
    register(LAZY)
"""


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "opmarket"), "doctor"], capture_output=True, text=True, check=False, env=env
    )


@pytest.mark.slow
def test_doctor_names_an_installed_plugin_whose_library_would_not_load(
    case_wheels: dict[str, Path], tmp_path: Path
) -> None:
    # A plugin that registers its op and ships the library built for a newer libstdc++.
    src = tmp_path / "src"
    (src / "opm_lazy").mkdir(parents=True)
    (src / "opm_lazy" / "__init__.py").write_text(PLUGIN)
    with zipfile.ZipFile(case_wheels["glibcxx_future"]) as z:
        (src / "opm_lazy" / "_future.so").write_bytes(
            z.read("opm_case_glibcxx_future/_glibcxx_future.so")
        )
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=69"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "opm-lazy"\nversion = "1.0"\ndependencies = ["opmarket"]\n\n'
        '[project.entry-points.opmarket]\nlazy = "opm_lazy"\n\n'
        '[tool.setuptools.package-data]\nopm_lazy = ["*.so"]\n'
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    _run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(src)])
    (wheel,) = tmp_path.glob("opm_lazy-*.whl")
    _run([*pip, "install", "-q", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)])
    env = {
        **os.environ,
        "OPMARKET_CACHE_DIR": str(tmp_path / "cache"),
        "PYTHONPATH": str(tmp_path / "site"),
    }
    env.pop("OPMARKET_PLUGINS", None)
    env.pop("OPMARKET_DISABLE_PLUGINS", None)
    done = doctor(env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "  Test>Lazy" in done.stdout  # it loaded: only the files tell
    assert (
        "problem: opm-lazy 1.0: would not load: version: opm_lazy/_future.so: needs "
        "GLIBCXX_3.4.99 of libstdc++.so.6" in done.stdout
    )
    # Without it, the first-party plugins (GPU companions too) raise no such problem.
    del env["PYTHONPATH"]
    clean = doctor(env)
    assert "would not load" not in clean.stdout + clean.stderr


@pytest.mark.parametrize(
    ("capability", "driver", "reason"),
    [
        ((9, 0), (13, 0), ""),
        ((8, 6), (13, 0), ""),  # sm_80 SASS runs on 8.6
        ((7, 0), (13, 0), "sm_70 GPU but the build has sm_80/sm_90 and no PTX <= 7.0"),
        (
            (9, 0),
            (12, 4),
            "the NVIDIA driver supports CUDA 12.4, the build needs CUDA 13; update the driver",
        ),
    ],
)
def test_a_cuda_companions_code_is_weighed_against_the_gpus(
    capability: tuple[int, int], driver: tuple[int, int], reason: str
) -> None:
    # The installed companion's own library (SASS sm_80/sm_90, PTX compute_75) on made-up
    # GPUs, as doctor's tests do: its libcudart is found where it really is.
    import importlib.metadata

    from opmarket.registry._envcheck import check_installed
    from opmarket.registry._environment import read_environment
    from opmarket.registry._machine import Gpu, Machine

    try:
        companion = importlib.metadata.distribution("opmarket-time-two-cuda13")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the time_two CUDA companion is not installed (no nvcc at set-up)")
    machine = Machine(gpus=(Gpu(0, "Test GPU", capability),), driver_cuda=driver)
    report = check_installed(companion, read_environment(machine=machine))
    assert report.works is (not reason), report
    assert [p.detail for p in report.problems] == ([reason] if reason else [])
