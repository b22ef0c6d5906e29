"""The installed Bitcast plugin: a plain C library loaded through the C API, against numpy's
``view``; TensorFlow's shape function and its errors; a wheel for every Python version."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from packaging.utils import parse_wheel_filename

import opmarket
from opmarket.registry import Registry, check_conformance, isolated_registry
from opmarket.registry._capi import CAbiKernel
from opmarket.registry._plugins import library_path
from opmarket.sdk import DType, InferenceContext, InvalidArgumentError

PLUGIN = Path(__file__).resolve().parents[1]
ENTRY = "opmarket_bitcast:libopm_bitcast.so"


@pytest.fixture
def registry() -> Iterator[Registry]:
    with isolated_registry(plugins=["bitcast"]) as reg:
        yield reg


@pytest.fixture(scope="module")
def library() -> Path:
    return library_path(ENTRY)


def test_done_when_bitcast_runs_through_the_c_api(registry: Registry) -> None:
    (k,) = registry.kernels("Opm>Bitcast")
    assert isinstance(k.impl, type) and issubclass(k.impl, CAbiKernel)
    assert k.name == "libopm_bitcast.so.BitcastOp"
    x = np.array([1, 2, 3], np.int32)
    out = opmarket.ops.bitcast(x, type=DType.UINT8)
    assert out.shape == (3, 4) and out.ravel().tolist() == list(x.view(np.uint8))


CASES = [  # input dtype, shape, output dtype
    (np.float32, (2, 3), np.int32),
    (np.int32, (5,), np.uint8),
    (np.float64, (2, 2), np.float16),
    (np.uint8, (3, 4), np.float32),
    (np.int16, (2, 4), np.int64),
    (np.complex64, (3,), np.float32),
    (np.uint64, (1, 2), np.int32),
    (np.float16, (2,), np.uint16),
]


@pytest.mark.parametrize(("src", "shape", "dst"), CASES)
def test_results_match_numpys_view(
    registry: Registry, src: type, shape: tuple[int, ...], dst: type
) -> None:
    rng = np.random.default_rng(7)
    x = (
        rng.integers(0, 256, size=int(np.prod(shape)) * np.dtype(src).itemsize, dtype=np.uint8)
        .view(src)
        .reshape(shape)
    )
    out = opmarket.ops.bitcast(x, type=np.dtype(dst))
    view = x.view(dst)
    ratio = np.dtype(src).itemsize / np.dtype(dst).itemsize
    # numpy's view resizes the last dim; TensorFlow appends or drops one.
    want_shape = (*shape, int(ratio)) if ratio > 1 else shape[:-1] if ratio < 1 else shape
    assert out.dtype == np.dtype(dst) and out.shape == want_shape
    assert out.tobytes() == view.tobytes()


def test_every_type_pair_matches_the_reference(registry: Registry) -> None:
    report = check_conformance("Opm>Bitcast", trials=2)
    report.raise_for_failures()
    assert len(report.results) == 14 * 14


def infer(
    registry: Registry, shape: tuple[int | None, ...] | None, src: DType, dst: DType
) -> tuple[int | None, ...] | None:
    spec = registry.shape_fn("Opm>Bitcast")
    assert spec is not None
    c = InferenceContext(registry.op_def("Opm>Bitcast"), [shape], {"T": src, "type": dst})
    spec.fn(c)
    return c.outputs[0]


def test_the_shape_function_is_tensorflows(registry: Registry) -> None:
    assert infer(registry, (2, 3), DType.FLOAT, DType.INT32) == (2, 3)
    assert infer(registry, (2, None), DType.INT32, DType.UINT8) == (2, None, 4)
    assert infer(registry, (2, 4), DType.UINT8, DType.FLOAT) == (2,)
    assert infer(registry, (2, None), DType.UINT8, DType.FLOAT) == (2,)
    assert infer(registry, None, DType.UINT8, DType.FLOAT) is None
    with pytest.raises(
        InvalidArgumentError,
        match=r"Cannot bitcast due to shape\. 3 does "
        r"not match 4",
    ):
        infer(registry, (2, 3), DType.UINT8, DType.FLOAT)
    with pytest.raises(InvalidArgumentError, match="Shape must be at least rank 1 but is rank 0"):
        infer(registry, (), DType.UINT8, DType.FLOAT)
    with pytest.raises(InvalidArgumentError, match=r"Opm>Bitcast: Cannot bitcast due to shape\."):
        opmarket.ops.bitcast(np.zeros(3, np.int32), type=DType.INT64)


def test_the_library_carries_no_python_and_no_cpp(library: Path) -> None:
    dynamic = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    needed = [line.split("[")[1].rstrip("]") for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert needed and not [n for n in needed if "python" in n or "stdc++" in n], needed
    symbols = subprocess.run(
        ["nm", "-D", str(library)], capture_output=True, text=True, check=True
    ).stdout.split("\n")
    undefined = [s.split()[-1] for s in symbols if " U " in s]
    assert not [s for s in undefined if s.startswith(("Py", "_Py", "_Z"))], undefined
    defined = [s.split()[-1] for s in symbols if s.split()[1:2] == ["T"]]
    assert defined == ["OPM_InitPlugin"]  # one exported entry point, nothing else


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # As the index takes it: `opmarket build` repairs it to a manylinux tag.
    subprocess.run(
        [
            str(Path(sys.executable).with_name("opmarket")),
            "build",
            "--no-isolation",
            "-o",
            str(out),
            str(PLUGIN),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (found,) = out.glob("*.whl")
    return found


@pytest.mark.slow
def test_the_wheel_is_for_every_python_version(wheel: Path) -> None:
    assert wheel.name.startswith("opmarket_bitcast-0.1.0-py3-none-")
    assert not wheel.name.endswith("-any.whl")  # a platform wheel: it holds a library
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read("opmarket_bitcast-0.1.0.dist-info/WHEEL").decode()
    assert "opmarket_bitcast/libopm_bitcast.so" in names
    assert not [n for n in names if n.endswith((".c", ".h"))]
    assert "Root-Is-Purelib: false" in meta
    tags = parse_wheel_filename(wheel.name)[3]
    assert {t.platform.startswith("manylinux") for t in tags} == {True}
    assert all(f"Tag: {t}" in meta for t in tags)


def other_python() -> str | None:
    """An interpreter of another supported Python version on this machine, if any."""
    ours = f"{sys.version_info.major}.{sys.version_info.minor}"
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    for path in sorted(
        {
            *glob.glob(f"{root}/versions/3.*/bin/python3"),
            *glob.glob("/usr/bin/python3.*"),
            *glob.glob("/usr/local/bin/python3.*"),
        },
        reverse=True,
    ):
        version = subprocess.run(
            [path, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        major, _, minor = version.partition(".")
        if version and version != ours and major == "3" and minor.isdigit() and int(minor) >= 11:
            return path
    return None


@pytest.mark.slow
def test_the_same_wheel_runs_on_another_python_version(wheel: Path, tmp_path: Path) -> None:
    python = other_python()
    if python is None:
        pytest.skip(
            "no second Python >= 3.11 here; test_the_library_carries_no_python "
            "shows the library depends on none"
        )
    uv = Path(sys.executable).with_name("uv")
    venv = tmp_path / "venv"
    subprocess.run([str(uv), "venv", "--quiet", "--python", python, str(venv)], check=True)
    installed = subprocess.run(
        [
            str(uv),
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            str(PLUGIN.parents[1]),
            str(wheel),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if installed.returncode != 0:
        pytest.skip(
            f"cannot install opmarket's dependencies for {python}: "
            f"{installed.stderr.strip()[-300:]}"
        )
    script = (
        "import sys, numpy as np, opmarket\n"
        "from opmarket.registry import load_plugins\n"
        "info = [p for p in load_plugins() if p.name == 'bitcast'][0]\n"
        "assert info.status == 'loaded', info.error\n"
        "x = np.arange(3, dtype=np.int32)\n"
        "out = opmarket.ops.bitcast(x, type=opmarket.sdk.DType.UINT8)\n"
        "assert out.tobytes() == x.tobytes() and out.shape == (3, 4)\n"
        "print('%d.%d' % sys.version_info[:2])\n"
    )
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        env={**os.environ, "OPMARKET_CACHE_DIR": str(tmp_path / "cache")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() != f"{sys.version_info.major}.{sys.version_info.minor}"


@pytest.mark.slow
def test_the_marketplace_validation_accepts_the_wheel(wheel: Path, tmp_path: Path) -> None:
    """``opmarket validate``: what the index runs on upload, in its sandbox (a read-only
    file system but its folder), C-ABI library and all."""
    cli = Path(sys.executable).with_name("opmarket")
    done = subprocess.run(
        [str(cli), "validate", str(wheel)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{wheel.name}: validated" in done.stdout
    assert "bitcast = opmarket_bitcast:libopm_bitcast.so" in done.stdout
    assert "[passed] manifest" in done.stdout and "[passed] conformance" in done.stdout
