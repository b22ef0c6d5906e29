"""The build side for plugin authors: the backend opmarket.build_meta writes the manifest
into every wheel it builds (RECORD rewritten), `opmarket manifest` writes or checks one and
names the field that differs, `opmarket build` makes wheels the index accepts."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from opmarket.registry._manifest import MANIFEST
from opmarket.sdk import opset_from_json

OPMARKET = str(Path(sys.executable).with_name("opmarket"))

_MODULE = '''\
"""A test plugin: Test>Scale multiplies by an attr with a default."""

import numpy as np
from opmarket.sdk import hookimpl, input_generator, kernel, op, reference

OP = (op("Test>Scale").input("x: float").output("y: float").attr("factor: int = {default}")
      .doc("Multiplies x by factor.").build())


@kernel("Test>Scale")
def scale(x, factor={default}):
    return x * np.float32(factor)


@reference("Test>Scale")
def scale_reference(x, factor={default}):
    return x * np.float32(factor)


@input_generator("Test>Scale")
def scale_inputs(rng, types):
    return [rng.standard_normal(4).astype(np.float32)], {{}}


@hookimpl
def register(register):
    print("plugin output on stdout must not confuse the backend")
    register(OP, scale, scale_reference, scale_inputs)
'''

_PYPROJECT = """\
[build-system]
requires = ["setuptools>=70.1", "opmarket"]
build-backend = "{backend}"

[project]
name = "opm-scale"
version = "1.0.0"
requires-python = ">=3.11"
dependencies = ["opmarket"]

[project.entry-points.opmarket]
scale = "opm_scale"

[tool.setuptools.package-data]
opm_scale = ["opmarket.opset.json"]
"""


def project(root: Path, *, default: int = 2, backend: str = "opmarket.build_meta") -> Path:
    """A pure-Python plugin project in src layout, without a manifest."""
    (root / "src" / "opm_scale").mkdir(parents=True)
    (root / "pyproject.toml").write_text(_PYPROJECT.format(backend=backend))
    (root / "src" / "opm_scale" / "__init__.py").write_text(_MODULE.format(default=default))
    return root


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [OPMARKET, *args], capture_output=True, text=True, check=False, cwd=cwd, timeout=600
    )


def check_record(wheel: Path) -> None:
    """RECORD lists every member with its sha256 and size, and nothing else."""
    with zipfile.ZipFile(wheel) as zf:
        (record,) = [n for n in zf.namelist() if n.endswith(".dist-info/RECORD")]
        rows = {r[0]: r[1:] for r in csv.reader(io.StringIO(zf.read(record).decode()))}
        assert set(rows) == {i.filename for i in zf.infolist() if not i.is_dir()}
        for name, (digest, size) in rows.items():
            if name == record:
                assert (digest, size) == ("", "")
                continue
            data = zf.read(name)
            want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, size) == (f"sha256={want.decode()}", str(len(data))), name


def manifest_of(wheel: Path, member: str = "opm_scale/opmarket.opset.json") -> dict[str, object]:
    with zipfile.ZipFile(wheel) as zf:
        return dict(json.loads(zf.read(member)))


def test_the_backend_writes_the_manifest_into_the_wheel(tmp_path: Path) -> None:
    root = project(tmp_path / "p", default=3)
    done = run("build", "--no-isolation", "-o", str(tmp_path / "out"), str(root))
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "out").iterdir()  # -o receives only the finished wheel
    assert done.stdout.split() == [str(wheel)]
    assert wheel.name == "opm_scale-1.0.0-py3-none-any.whl"
    assert "pure Python, kept as built" in done.stderr
    check_record(wheel)
    opset = opset_from_json(json.dumps(manifest_of(wheel)))
    (op,) = opset.ops
    attr = op.attr("factor")
    assert op.name == "Test>Scale" and attr is not None and attr.default == 3
    assert [(k.op, k.device) for k in opset.kernels] == [("Test>Scale", "CPU")]
    # The source tree is left as it was: no manifest written there.
    assert not (root / "src" / "opm_scale" / "opmarket.opset.json").exists()
    from opmarket.web import inspect_wheel  # the index's own archive checks accept it

    inspect_wheel(wheel, wheel.name)


def test_a_stale_manifest_in_the_source_is_replaced_keeping_gpu_kernels(tmp_path: Path) -> None:
    root = project(tmp_path / "p", default=3)
    # A committed manifest from a machine with a GPU: an old default, and a GPU kernel.
    first = project(tmp_path / "q", default=1)
    old = run("build", "--no-isolation", "-o", str(tmp_path / "first"), str(first))
    assert old.returncode == 0, old.stderr
    text = json.dumps(manifest_of(next((tmp_path / "first").iterdir())))
    doc = json.loads(text)
    doc["kernels"].append({**doc["kernels"][0], "device": "GPU"})
    (root / "src" / "opm_scale" / "opmarket.opset.json").write_text(json.dumps(doc))
    done = run("build", "--no-isolation", "-o", str(tmp_path / "out"), str(root))
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "out").iterdir()
    check_record(wheel)
    opset = opset_from_json(json.dumps(manifest_of(wheel)))
    factor = opset.ops[0].attr("factor")
    assert factor is not None and factor.default == 3
    assert sorted(k.device for k in opset.kernels) == ["CPU", "GPU"]


@pytest.mark.slow
def test_opmarket_manifest_writes_checks_and_names_the_field(tmp_path: Path) -> None:
    root = project(tmp_path / "p", default=6)
    target = root / "src" / "opm_scale" / "opmarket.opset.json"
    missing = run("manifest", "--check", str(root))
    assert missing.returncode == 1
    assert f"stale: {target}: missing" in missing.stderr
    done = run("manifest", str(root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"wrote {target}"
    assert run("manifest", "--check", str(root)).returncode == 0
    # The default changes in the code, not in the committed manifest.
    init = root / "src" / "opm_scale" / "__init__.py"
    init.write_text(init.read_text().replace("= 6", "= 1").replace("factor=6", "factor=1"))
    stale = run("manifest", "--check", str(root))
    assert stale.returncode == 1
    assert (
        f"stale: {target}: Test>Scale: attrs['factor'].default: the manifest says 6, "
        "the code 1" in stale.stderr
    ), stale.stderr
    assert f"run `opmarket manifest {root}` to write it" in stale.stderr


def test_opmarket_manifest_adds_one_to_a_wheel_another_backend_built(tmp_path: Path) -> None:
    root = project(tmp_path / "p", backend="setuptools.build_meta")
    out = tmp_path / "out"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", str(out), str(root)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.iterdir()
    assert "opm_scale/opmarket.opset.json" not in zipfile.ZipFile(wheel).namelist()
    done = run("manifest", str(wheel))
    assert done.returncode == 0, done.stderr
    check_record(wheel)
    assert manifest_of(wheel)["ops"]


def test_a_plugin_that_fails_to_import_fails_the_build_with_its_error(tmp_path: Path) -> None:
    root = project(tmp_path / "p")
    init = root / "src" / "opm_scale" / "__init__.py"
    init.write_text("raise RuntimeError('no GPU toolkit here')\n" + init.read_text())
    done = run("build", "--no-isolation", "-o", str(tmp_path / "out"), str(root))
    assert done.returncode == 1
    assert "RuntimeError: no GPU toolkit here" in done.stderr
    assert "importing the plugin 'opm_scale' from the built wheel" in done.stderr
    assert done.stderr.rstrip().endswith("its output is above")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def build_editable(root: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """The backend's PEP 660 hook on the project at ``root``, as pip install -e calls it."""
    code = "import sys; from opmarket.build_meta import build_editable as b; print(b(sys.argv[1]))"
    return subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )


def zero_out_c(tmp_path: Path) -> Path:
    """A copy of plugins/zero_out_c without anything a build left there."""
    root = tmp_path / "zero_out_c"
    source = Path(__file__).resolve().parents[1] / "plugins" / "zero_out_c"
    shutil.copytree(source, root, ignore=shutil.ignore_patterns("build", "*.egg-info", "*.so"))
    return root


def test_an_editable_build_writes_the_manifest_into_the_source_package(tmp_path: Path) -> None:
    root = project(tmp_path / "p", default=4)
    done = build_editable(root, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    written = root / "src" / "opm_scale" / "opmarket.opset.json"
    factor = opset_from_json(written.read_text()).ops[0].attr("factor")
    assert factor is not None and factor.default == 4


def test_an_editable_build_of_a_c_abi_plugin_builds_its_library_beside_the_sources(
    tmp_path: Path,
) -> None:
    """opmarket.sdk.build.library_setup under ``pip install -e``: the library goes where the
    editable install imports the package from (the build folder is never imported)."""
    root = zero_out_c(tmp_path)
    done = build_editable(root, tmp_path / "out")
    assert done.returncode == 0, done.stderr
    package = root / "src" / "opmarket_zero_out_c"
    assert (package / "libopm_zero_out_c.so").is_file()
    assert "ZeroOut" in (package / "opmarket.opset.json").read_text()


def test_a_c_abi_plugins_sdist_carries_its_sources_and_builds_the_wheel(tmp_path: Path) -> None:
    """library_setup puts the library's sources in the sdist (the wheel leaves them out)."""
    root = zero_out_c(tmp_path)
    build = [sys.executable, "-m", "build", "--no-isolation"]
    done = subprocess.run(
        [*build, "--sdist", "-o", str(tmp_path / "sdist"), str(root)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    (sdist,) = (tmp_path / "sdist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
        assert any(n.endswith("src/opmarket_zero_out_c/zero_out.cc") for n in archive.getnames())
    (unpacked,) = (tmp_path / "unpacked").iterdir()
    done = subprocess.run(
        [*build, "--wheel", "-o", str(tmp_path / "wheel"), str(unpacked)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = (tmp_path / "wheel").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "opmarket_zero_out_c/libopm_zero_out_c.so" in names
    assert not any(n.endswith(".cc") for n in names)


def test_usage_errors_are_one_line(tmp_path: Path) -> None:
    done = run("build", str(tmp_path))
    assert done.returncode == 2
    want = f"opmarket: error: {str(tmp_path)!r} has no pyproject.toml: not a Python project"
    assert done.stderr.strip() == want
    (tmp_path / "x.txt").write_text("")
    done = run("manifest", str(tmp_path / "x.txt"))
    assert done.returncode == 2 and "neither a wheel (.whl) nor a project folder" in done.stderr


def test_importing_the_backend_imports_no_setuptools_and_no_plugin_code() -> None:
    code = (
        "import sys, opmarket.build_meta as m; "
        "print(sorted(n for n in sys.modules if n.startswith(('setuptools', 'opmarket.'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['opmarket.build_meta']"


@pytest.fixture(scope="module")
def first_party(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three first-party plugins built as the index takes them: pure Python, pybind11, C."""
    out = tmp_path_factory.mktemp("first-party")
    repo = Path(__file__).resolve().parent.parent
    wheels = {}
    for name in ("atan", "zero_out", "bitcast"):
        done = run("build", "--no-isolation", "-o", str(out / name), str(repo / "plugins" / name))
        assert done.returncode == 0, done.stderr
        (wheels[name],) = (out / name).iterdir()
    return wheels


@pytest.mark.slow
def test_first_party_wheels_carry_manylinux_tags_and_their_manifests(
    first_party: dict[str, Path],
) -> None:
    tags = {name: wheel.name.split("-", 2)[2] for name, wheel in first_party.items()}
    assert tags["atan"] == "py3-none-any.whl"
    # pybind11 has no limited-API (abi3) build: one wheel per CPython.
    assert tags["zero_out"].startswith("cp311-cp311-manylinux_"), tags
    # A C-ABI library has no Python in it: one wheel for every Python.
    assert tags["bitcast"].startswith("py3-none-manylinux"), tags
    for name, wheel in first_party.items():
        check_record(wheel)
        opset = opset_from_json(json.dumps(manifest_of(wheel, f"opmarket_{name}/{MANIFEST}")))
        assert opset.ops and opset.kernels, name


@pytest.mark.slow
def test_an_isolated_build_resolves_opmarket_from_a_local_index(
    opmarket_wheel: Path, tmp_path: Path
) -> None:
    """What an author's isolated build does, with a find-links folder standing in for the
    index: opmarket (this checkout's wheel), setuptools and pybind11 come from it alone."""
    links = tmp_path / "links"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--disable-pip-version-check",
            "--wheel-dir",
            str(links),
            str(opmarket_wheel),
            "setuptools>=70.1",
            "pybind11>=2.12",
        ],
        check=True,
        capture_output=True,
    )
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [OPMARKET, "build", "-o", str(tmp_path / "out"), str(repo / "plugins" / "zero_out")],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(links)},
    )
    assert done.returncode == 0, done.stderr
    assert "(isolated)" in done.stderr
    (wheel,) = (tmp_path / "out").iterdir()
    assert wheel.name.startswith("opmarket_zero_out-0.1.0-cp311-cp311-manylinux_")
    check_record(wheel)
    assert manifest_of(wheel, f"opmarket_zero_out/{MANIFEST}")["ops"]


_GPU_SETUP = """\
import subprocess
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

STUBS = {stubs!r}


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib, "opm_scale", "libopm_scale_gpu.so")
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-o", str(target), "-x", "c", "-",
             "-Wl,--no-as-needed", f"-L{{STUBS}}", f"-Wl,-rpath,{{STUBS}}", "-lcudart", "-lcuda"],
            input=b"int opm_scale_gpu(void) {{ return 0; }}\\n",
            check=True,
        )


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True


setup(distclass=BinaryDistribution, cmdclass={{"build_py": BuildWithLibrary}})
"""


def test_cuda_driver_and_runtime_stay_out_of_the_repaired_wheel(tmp_path: Path) -> None:
    # Stand-ins for the CUDA libraries (the machine has no toolkit): same sonames, found
    # through the library's run path, so auditwheel would copy them in if not told not to.
    stubs = tmp_path / "cuda"
    stubs.mkdir()
    for soname, link in (("libcudart.so.12", "libcudart.so"), ("libcuda.so.1", "libcuda.so")):
        subprocess.run(
            [
                "cc",
                "-shared",
                "-fPIC",
                f"-Wl,-soname,{soname}",
                "-o",
                str(stubs / soname),
                "-x",
                "c",
                "-",
            ],
            input=b"int stub(void) { return 0; }\n",
            check=True,
        )
        (stubs / link).symlink_to(soname)
    root = project(tmp_path / "p")
    (root / "setup.py").write_text(_GPU_SETUP.format(stubs=str(stubs)))
    done = run("build", "--no-isolation", "-o", str(tmp_path / "out"), str(root))
    assert done.returncode == 0, done.stderr
    (wheel,) = (tmp_path / "out").iterdir()
    assert "-manylinux" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "opm_scale/libopm_scale_gpu.so" in names
    assert not [n for n in names if "libcuda" in n], names
    check_record(wheel)
