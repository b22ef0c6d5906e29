"""The GPU companions (plugins/*_cuda13): their wheels built once per session with nvcc
(skipped without it), what the wheels carry, and the installed companions on this machine:
they load, register no GPU kernel without a GPU, the ops run on CPU, and doctor says why.

The GPU-only branch (a GPU visible: the kernels register and run on it) is the ``else`` of
``test_the_installed_companions_load_here``; it runs only on a machine with a GPU.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import opmarket
from opmarket.registry import isolated_registry, load_plugins
from opmarket.registry._doctor import _missing_companions
from opmarket.registry._gpubinary import read_device_code
from opmarket.sdk.build import load_cuda_library
from opmarket.sdk.build._cuda import find_nvcc
from tests.first_party import skip_unless_installed

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PAIRS = {"time_two": "Opm>TimeTwo", "median_pool": "Opm>MedianPool"}


# Built once per session: time_two's base wheel and both companions (median_pool's base,
# the slowest C++ build, is checked as scripts/setup installed it), two pip processes at once.
BUILT = ["time_two", "time_two_cuda13", "median_pool_cuda13"]


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The wheels of BUILT, each built from a clean copy of its source."""
    if find_nvcc() is None:
        pytest.skip("nvcc not found ($CUDA_HOME/bin, PATH, /usr/local/cuda/bin): no companions")
    work = tmp_path_factory.mktemp("gpu-wheels")
    for name in BUILT:
        shutil.copytree(
            REPO / "plugins" / name,
            work / name,
            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
        )
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    builds = [
        subprocess.Popen(
            [*pip, "-w", str(work / "dist"), *(str(work / n) for n in names)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for names in (BUILT[:2], BUILT[2:])
    ]
    for build in builds:
        output = build.communicate()[0]
        assert build.returncode == 0, output.decode(errors="replace")[-3000:]
    wheels = {w.name.split("-")[0].removeprefix("opmarket_"): w for w in (work / "dist").iterdir()}
    assert sorted(wheels) == sorted(BUILT), wheels
    return wheels


def members(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return z.namelist()


def read_member(wheel: Path, suffix: str) -> bytes:
    with zipfile.ZipFile(wheel) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(suffix)))


@pytest.mark.slow
def test_the_base_wheel_carries_no_cuda_and_offers_the_extra(
    built: dict[str, Path], tmp_path: Path
) -> None:
    wheel = built["time_two"]
    names = members(wheel)
    assert not [n for n in names if n.endswith((".cu", ".cuh")) or "gpu" in n or "cuda" in n]
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    (lib,) = tmp_path.rglob("*.so")  # the pybind11 module, the CPU kernel
    code = read_device_code(lib)
    assert code.needed and code.cuda_runtime is None and not code.has_device_code
    manifest = json.loads(read_member(wheel, "opmarket.opset.json"))
    assert {k["device"] for k in manifest["kernels"]} == {"CPU"}
    metadata = read_member(wheel, ".dist-info/METADATA").decode()
    assert "Provides-Extra: cuda13" in metadata
    assert 'Requires-Dist: opmarket-time-two-cuda13==0.1.0; extra == "cuda13"' in metadata


def test_the_installed_median_pool_base_carries_no_cuda() -> None:
    skip_unless_installed("median_pool")
    import importlib.metadata

    dist = importlib.metadata.distribution("opmarket-median-pool")
    assert 'opmarket-median-pool-cuda13==0.1.0; extra == "cuda13"' in (dist.requires or [])
    libs = [Path(str(dist.locate_file(f))) for f in dist.files or () if ".so" in f.name]
    assert libs and all(read_device_code(p).cuda_runtime is None for p in libs)
    assert not [f for f in dist.files or () if f.suffix == ".cu"]


@pytest.mark.slow
@pytest.mark.parametrize("base", sorted(PAIRS))
def test_the_companion_links_the_runtime_wheel_shared(
    built: dict[str, Path], base: str, tmp_path: Path
) -> None:
    wheel = built[f"{base}_cuda13"]
    assert wheel.name == f"opmarket_{base}_cuda13-0.1.0-py3-none-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    (lib,) = tmp_path.rglob("*.so")
    code = read_device_code(lib)
    # Shared, not static: the runtime is NEEDED, found through the runtime wheel's folder.
    assert "libcudart.so.13" in code.needed and code.cuda_runtime == 13
    assert code.runpath == ("$ORIGIN/../nvidia/cu13/lib",)
    assert lib.stat().st_size < 400_000  # the static runtime alone is ~1 MB
    # What the fat binary carries is what the build recorded.
    record = json.loads(read_member(wheel, "cuda_build.json"))
    assert (list(code.sass), list(code.ptx)) == (record["sass"], record["ptx"])
    assert code.sass == ("sm_80", "sm_90") and code.ptx == ("compute_75",)
    metadata = read_member(wheel, ".dist-info/METADATA").decode()
    assert f"Requires-Dist: opmarket-{base.replace('_', '-')}==0.1.0" in metadata
    assert "Requires-Dist: nvidia-cuda-runtime<14,>=13" in metadata
    manifest = json.loads(read_member(wheel, "opmarket.opset.json"))
    assert manifest.get("ops", []) == []  # the base declares the op
    assert [(k["op"], k["device"]) for k in manifest["kernels"]] == [(PAIRS[base], "GPU")]


def installed(module: str) -> bool:
    try:
        __import__(module)
    except ImportError:
        return False
    return True


needs_companions = pytest.mark.skipif(
    not (installed("opmarket_time_two_cuda13") and installed("opmarket_median_pool_cuda13")),
    reason="the GPU companions are not installed (scripts/setup skips them without nvcc)",
)


@pytest.fixture
def companions() -> Iterator[None]:
    with isolated_registry(plugins=[*PAIRS, *(f"{b}_cuda13" for b in PAIRS)]):
        yield


@needs_companions
def test_the_installed_companions_load_here(companions: None) -> None:
    import opmarket_median_pool_cuda13
    import opmarket_time_two_cuda13

    infos = {i.name: i for i in load_plugins()}
    assert {n: i.status for n, i in infos.items()} == dict.fromkeys(infos, "loaded")
    x = np.arange(12, dtype=np.float32).reshape(1, 3, 4, 1)
    for module in (opmarket_time_two_cuda13, opmarket_median_pool_cuda13):
        lib = module.gpu()
        assert lib.handle is not None, lib.status  # loaded: the runtime was found
        # The runtime wheel's libcudart, not a system toolkit's.
        assert "/nvidia/cu13/lib/libcudart.so.13" in lib.runtime, lib.runtime
    # The C functions a companion names get their signatures; one the library lacks means
    # it cannot run, said so.
    path = Path(opmarket_time_two_cuda13.__file__).with_name(opmarket_time_two_cuda13.LIBRARY)
    assert opmarket_time_two_cuda13.gpu().handle.opm_time_two.restype is ctypes.c_int
    lacking = load_cuda_library(path, functions={"opm_time_three": (ctypes.c_int, [])})
    assert lacking.handle is None and not lacking.available
    assert lacking.status == "libopm_time_two_cuda13.so exports no opm_time_three()"
    if not opmarket_time_two_cuda13.gpu().available:
        assert opmarket_time_two_cuda13.gpu_status().startswith("no GPU visible")
        assert opmarket_median_pool_cuda13.gpu_status().startswith("no GPU visible")
        assert infos["time_two_cuda13"].kernels == () == infos["median_pool_cuda13"].kernels
        np.testing.assert_array_equal(opmarket.ops.time_two(x), x * 2)
    else:  # a GPU: the companions' kernels registered and run there
        with opmarket.device("GPU"):
            np.testing.assert_array_equal(opmarket.ops.time_two(x), x * 2)
            out = opmarket.ops.median_pool(
                x, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1], padding="SAME"
            )
        with opmarket.device("CPU"):
            expected = opmarket.ops.median_pool(
                x, ksize=[1, 3, 3, 1], strides=[1, 1, 1, 1], padding="SAME"
            )
        np.testing.assert_array_equal(out, expected)


@needs_companions
def test_a_companion_registers_gpu_kernels_for_its_base_plugins_op(companions: None) -> None:
    import opmarket_median_pool_cuda13
    import opmarket_time_two_cuda13

    load_plugins()
    registry = opmarket.registry.get_registry()
    if opmarket_time_two_cuda13.gpu().available:
        pytest.skip("a GPU is visible: the companions registered their kernels already")
    # What register() hands over where a GPU is, registered here by hand: the registry
    # takes GPU kernels from one plugin for the op another declares.
    registry.register(
        *opmarket_time_two_cuda13.kernels(),
        *opmarket_median_pool_cuda13.kernels(),
        source="plugin companions (test)",
    )
    for op in PAIRS.values():
        assert {k.device for k in registry.kernels(op)} == {"CPU", "GPU"}
        assert registry.source(op) is not None and "cuda13" not in registry.source(op)
    x = np.ones(3, np.float32)
    with opmarket.device("GPU"), pytest.raises(RuntimeError, match="cannot run here: no GPU"):
        opmarket.ops.time_two(x)


@needs_companions
@pytest.mark.slow
def test_doctor_names_the_gpu_kernels_not_chosen(tmp_path: Path) -> None:
    done = subprocess.run(
        [str(BIN / "opmarket"), "doctor", "--format", "json"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": "/usr/bin:/bin", "OPMARKET_CACHE_DIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert set(data) == {"machine", "ops"}
    assert all(set(o) == {"op", "kernels"} for o in data["ops"])
    ops = {o["op"]: o["kernels"] for o in data["ops"]}
    # A CPU kernel also says which door the framework bridges take to it (issue 24), a GPU
    # kernel which path each framework gives it.
    extra = {"CPU": {"native", "native_reason"}, "GPU": {"frameworks"}}
    assert all(
        set(k) - extra.get(k["device"], set()) == {"device", "dtypes", "chosen", "reason"}
        for o in ops.values()
        for k in o
    )
    if data["machine"]["gpus"]:
        pytest.skip("a GPU is visible: see the GPU branch of the companions' load test")
    why = f"no GPU visible ({data['machine']['gpu_note']})"
    for op in PAIRS.values():
        gpu = [k for k in ops[op] if k["device"] == "GPU"]
        assert [(k["chosen"], k["reason"]) for k in gpu] == [(False, "no GPU visible")]
        assert all(k["chosen"] for k in ops[op] if k["device"] == "CPU")
        # no framework imported for it: each installed one's Python path, for that reason
        assert gpu[0]["frameworks"] == {
            "tensorflow": {"path": "python", "reason": why},
            "torch": {"path": "python", "reason": why},
            "jax": {"path": "callback", "reason": why},
        }
    assert ops["Opm>TimeTwo"][-1]["dtypes"] == ["float", "double", "int32", "int64"]
    assert any(
        r["major"] == 13 and r["source"] == "wheel" for r in data["machine"]["cuda_runtimes"]
    )


def test_a_cuda_extra_whose_companion_is_missing(tmp_path: Path) -> None:
    info = tmp_path / "opm_x-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: opm-x\nVersion: 1.0\nProvides-Extra: cuda13\n"
        'Provides-Extra: docs\nRequires-Dist: opm-x-cuda13==1.0; extra == "cuda13"\n'
        'Requires-Dist: sphinx; extra == "docs"\nRequires-Dist: numpy\n'
    )
    assert _missing_companions(str(info)) == [("opm-x-cuda13", "cuda13")]


@needs_companions
def test_the_median_pool_window_code_matches_the_reference_on_the_host() -> None:
    # The CUDA kernel's per-window function is __host__ __device__; the library runs it on
    # the CPU too, so its selection (local sort up to 49 values, counting beyond), SAME
    # edges, even counts and NaN are checked here against the numpy composition.
    import ctypes

    import opmarket_median_pool_cuda13 as companion
    from opmarket_median_pool import median_pool_reference

    handle = companion.gpu().handle
    assert handle is not None, companion.gpu_status()
    on_host = handle.opm_median_pool_on_host
    on_host.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    rng = np.random.default_rng(7)
    for trial in range(120):
        dtype = (np.float32, np.float64)[trial % 2]
        kh, kw = int(rng.integers(1, 10)), int(rng.integers(1, 10))
        ksize, strides = [1, kh, kw, 1], [1, int(rng.integers(1, 4)), int(rng.integers(1, 4)), 1]
        padding = ("SAME", "VALID")[int(rng.integers(0, 2))]
        shape = (int(rng.integers(1, 3)), int(rng.integers(kh, 16)), int(rng.integers(kw, 16)), 2)
        x = (rng.integers(-20, 20, shape) / 4).astype(dtype)
        if trial % 5 == 0:
            x.flat[int(rng.integers(0, x.size))] = np.nan
        g = companion.geometry(x.shape, ksize, strides, padding)
        out = np.empty((g[0], g[8], g[9], g[3]), dtype)
        dims = (ctypes.c_int64 * 12)(*g)
        assert on_host(trial % 2, x.ctypes.data, out.ctypes.data, dims) == 0
        expected = median_pool_reference(x, ksize, strides, padding)
        np.testing.assert_array_equal(out, expected, err_msg=f"{ksize} {strides} {padding}")


@pytest.mark.slow
def test_without_nvcc_the_companion_build_fails_and_says_why(tmp_path: Path) -> None:
    # $CUDA_HOME names the toolkit to use (as in PyTorch's cpp_extension): one without nvcc
    # is no nvcc, whatever PATH holds.
    (tmp_path / "toolkit" / "bin").mkdir(parents=True)
    source = tmp_path / "time_two_cuda13"
    shutil.copytree(
        REPO / "plugins" / "time_two_cuda13",
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            str(source),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={
            "PATH": os.environ["PATH"],
            "CUDA_HOME": str(tmp_path / "toolkit"),
            "PIP_CONFIG_FILE": os.devnull,
            "HOME": str(tmp_path),
        },
    )
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "CudaBuildError: nvcc not found" in output, output[-3000:]
    assert "a CUDA 13 GPU companion needs the CUDA 13 toolkit's compiler" in output
    assert not (tmp_path / "dist").exists() or not list((tmp_path / "dist").iterdir())


def find_cuobjdump() -> str | None:
    """cuobjdump on PATH or from the nvidia-cuda-cuobjdump wheel (nvidia/cu13/bin)."""
    found = shutil.which("cuobjdump")
    for entry in sys.path:
        candidate = Path(entry or ".", "nvidia", "cu13", "bin", "cuobjdump")
        if found is None and candidate.is_file() and os.access(candidate, os.X_OK):
            found = str(candidate)
    return found


@needs_companions
@pytest.mark.parametrize("module", ["opmarket_time_two_cuda13", "opmarket_median_pool_cuda13"])
def test_the_fatbin_reader_agrees_with_cuobjdump(module: str) -> None:
    cuobjdump = find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("cuobjdump not found (PATH, or the nvidia-cuda-cuobjdump wheel)")
    package = __import__(module)
    lib = Path(package.__file__).with_name(package.LIBRARY)
    listing = subprocess.run(
        [cuobjdump, "--list-elf", "--list-ptx", str(lib)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # "ELF file    1: libx.1.sm_80.cubin", "PTX file    1: libx.1.sm_75.ptx"
    sass = {line.rsplit(".", 2)[1] for line in listing.splitlines() if line.startswith("ELF")}
    ptx = {
        "compute_" + line.rsplit(".", 2)[1].removeprefix("sm_")
        for line in listing.splitlines()
        if line.startswith("PTX")
    }
    code = read_device_code(lib)
    assert (set(code.sass), set(code.ptx)) == (sass, ptx) != (set(), set())
