"""The distribution: the wheel holds every package under its import name and installs clean."""

from __future__ import annotations

import re
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


def _pyprojects(tmp_path: Path) -> list[Path]:
    """This repository's, each first-party plugin's, and each kind of `opmarket new` project's
    pyproject.toml."""
    from opmarket._scaffold._new import generate

    generated = []
    for kernel in ("python", "cpp", "c", "cuda"):
        project = generate(f"opmarket-probe-{kernel}", kernel, tmp_path / kernel)
        generated.append(project / "pyproject.toml")
    return [REPO / "pyproject.toml", *sorted(REPO.glob("plugins/*/pyproject.toml")), *generated]


def test_a_license_string_comes_with_the_setuptools_that_reads_it(tmp_path: Path) -> None:
    """`license = "Apache-2.0"` (PEP 639) needs setuptools 77: an older one (Python 3.11's
    venvs bundle 65) fails the build with a 94-line validation error."""
    import tomllib

    from packaging.requirements import Requirement

    for path in _pyprojects(tmp_path):
        data = tomllib.loads(path.read_text())
        if not isinstance(data["project"].get("license"), str):
            continue
        requires = [Requirement(r) for r in data["build-system"]["requires"]]
        (setuptools,) = [r for r in requires if r.name == "setuptools"]
        assert "77.0" in setuptools.specifier, path
        assert "76.1" not in setuptools.specifier, (path, str(setuptools))


def test_what_opmarket_subclasses_inside_is_pinned_below_its_next_release() -> None:
    """opmarket.web._limits subclasses uvicorn's internal HTTP protocol class and
    opmarket.web.gpu._tools calls auditwheel's internal analysis: a release may move them, so
    the web extras stop before the next one."""
    import importlib.metadata

    from packaging.requirements import Requirement

    reached = {"uvicorn", "auditwheel"}
    bounded = {
        r.name
        for r in map(Requirement, importlib.metadata.requires("opmarket") or [])
        if r.name in reached
        and r.marker is not None
        and not r.marker.evaluate({"extra": ""})
        and any(s.operator in ("<", "==", "~=") for s in r.specifier)
    }
    assert bounded == reached


def test_the_readme_says_why_each_dependency_is_there() -> None:
    """Each requirement of pyproject.toml (core, extras, build) is named in the README's
    "Dependencies, and why"."""
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    lines = [
        *data["project"]["dependencies"],
        *(r for extra in data["project"]["optional-dependencies"].values() for r in extra),
        *data["build-system"]["requires"],
    ]
    names = {canonicalize_name(Requirement(r).name) for r in lines} - {"opmarket"}
    readme = (REPO / "README.md").read_text()
    section = readme.partition("## Dependencies, and why")[2].partition("\n## ")[0]
    said = {canonicalize_name(w) for w in re.findall(r"[A-Za-z][\w.-]*[A-Za-z0-9]", section)}
    assert names - said == set()
