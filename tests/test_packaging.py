"""The distribution: the wheel holds every package under its import name and installs clean."""

from __future__ import annotations

import subprocess
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ["opmarket", "opmarket.sdk", "opmarket.registry", "opmarket.compat", "opmarket.web"]


@pytest.fixture(scope="session")
def wheel(opmarket_wheel: Path) -> Path:
    return opmarket_wheel  # built once per session (tests/conftest.py)


@pytest.mark.slow
def test_wheel_maps_every_folder_to_its_package(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in PACKAGES:
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    assert "opmarket/sdk/schema/opset.schema.json" in names
    assert "opmarket/sdk/py.typed" in names
    assert "opmarket/sdk/include/opmarket/kernel.h" in names  # get_include() in an install
    assert "opmarket/sdk/include/opmarket/cuda.cuh" in names  # GPU companions include it
    assert not any(n.startswith(("sdk/", "registry/", "compat/", "web/", "tests/")) for n in names)
    # opmarket new's templates, and the pytest plugin's entry point.
    assert "opmarket/_scaffold/pyproject.toml.tmpl" in names
    (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]\nopmarket = opmarket.testing._pytest_plugin" in text


@pytest.mark.slow
def test_wheel_installs_and_imports_in_a_fresh_venv(wheel: Path, tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)],
        check=True,
        capture_output=True,
    )
    code = "import importlib\n" + "".join(f"importlib.import_module({p!r})\n" for p in PACKAGES)
    code += "from opmarket.sdk import op\nprint(op('ZeroOut').input('x: int32').build().name)\n"
    done = subprocess.run(
        [str(python), "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "ZeroOut"
    cli = subprocess.run(
        [str(env_dir / "bin" / "opmarket"), "--version"], capture_output=True, text=True, check=True
    )
    assert "opmarket" in cli.stdout
    # The templates come with the wheel: opmarket new works from an install.
    made = subprocess.run(
        [str(env_dir / "bin" / "opmarket"), "new", "acme-clip", "-o", str(tmp_path / "p")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    assert (tmp_path / "p" / "src" / "acme_clip" / "opmarket.opset.json").is_file()
