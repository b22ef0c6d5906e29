"""Static GPU validation, variant wheels and the GPU worker's CPU-only branches: real nvcc
builds, real cuobjdump and auditwheel, a real server, real twine and pip."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from opmarket.registry import _gpubinary
from opmarket.registry._elf import needed_libraries, read_library
from opmarket.registry._gpubinary import MAX_STRAYS, DeviceCode, EntryBudget, read_device_code
from opmarket.web.catalog._models import distribution_key
from opmarket.web.gpu._checks import MAX_LIBRARIES, capability_number, inspect_gpu, runs_on
from opmarket.web.gpu._tools import cuobjdump_path
from opmarket.web.wheels._inspect import WheelError, inspect_wheel
from opmarket.web.wheels._variants import VariantError, split_variant, variants_file
from tests.registry.envcheck.test_stripped_elf import stripped

from .conftest import OPMARKET, Market, clean_env, start_market, twine
from .gpu_wheels import (
    GENCODE,
    NVCC,
    build_cuda_library,
    build_host_library,
    build_stray_library,
    gpu_plugin_wheel,
    nvidia_variant,
)
from .plugins import handmade_wheel

needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc (the CUDA toolkit) is not installed")
needs_cuobjdump = pytest.mark.skipif(
    cuobjdump_path() is None, reason="cuobjdump (nvidia-cuda-cuobjdump wheel) is not installed"
)


@dataclass
class GpuWheels:
    library: Path
    plain: Path  # opm-gpu 1.0.0: SASS sm_80, sm_90, PTX compute_75, runtime declared
    variant: Path  # the same with variant label cu13
    no_code: Path  # declares a GPU kernel, its library has no device code
    no_runtime: Path  # device code needing libcudart.so.13, no dependency providing it


@pytest.fixture(scope="session")
def gpu_wheels(tmp_path_factory: pytest.TempPathFactory) -> GpuWheels:
    if NVCC is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed")
    d = tmp_path_factory.mktemp("gpu")
    library = build_cuda_library(d)
    return GpuWheels(
        library=library,
        plain=gpu_plugin_wheel(d / "plain", "opm-gpu", "1.0.0", library=library),
        variant=gpu_plugin_wheel(
            d / "variant",
            "opm-gpu",
            "1.0.0",
            library=library,
            filename="opm_gpu-1.0.0-py3-none-any-cu13.whl",
            variant=nvidia_variant("cu13"),
        ),
        no_code=gpu_plugin_wheel(
            d / "nocode", "opm-nocode", "1.0.0", library=build_host_library(d)
        ),
        no_runtime=gpu_plugin_wheel(
            d / "noruntime", "opm-noruntime", "1.0.0", library=library, requires=()
        ),
    )


def cuobjdump_lists(library: Path) -> tuple[list[str], list[str]]:
    """What ``cuobjdump --list-elf --list-ptx`` says, read here on its own."""
    tool = cuobjdump_path()
    assert tool is not None
    out = subprocess.run(
        [str(tool), "--list-elf", "--list-ptx", str(library)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    sass = sorted(set(re.findall(r"^ELF file\s+\d+: \S+\.(sm_\d+)\.cubin$", out, re.M)))
    ptx = sorted(
        {f"compute_{n}" for n in re.findall(r"^PTX file\s+\d+: \S+\.sm_(\d+)\.ptx$", out, re.M)}
    )
    return sass, ptx


# -- file names and rules, no tools needed ------------------------------------------------


def test_variant_file_names_split_off_their_label() -> None:
    assert split_variant("foo-1.0-py3-none-any.whl") == ("foo-1.0-py3-none-any.whl", None)
    assert split_variant("foo-1.0-2-py3-none-any.whl") == ("foo-1.0-2-py3-none-any.whl", None)
    assert split_variant("foo-1.0-py3-none-any-cu13.whl") == ("foo-1.0-py3-none-any.whl", "cu13")
    assert split_variant("foo-1.0-2-py3-none-any-x86_64_v3.whl") == (
        "foo-1.0-2-py3-none-any.whl",
        "x86_64_v3",
    )
    with pytest.raises(VariantError, match="'CU13'"):
        split_variant("foo-1.0-py3-none-any-CU13.whl")
    with pytest.raises(VariantError, match="1-16"):
        split_variant("foo-1.0-py3-none-any-" + "a" * 17 + ".whl")
    # The label is part of a file's identity: a variant and the plain wheel are two files.
    plain, variant = (
        distribution_key("foo-1.0-py3-none-any.whl"),
        distribution_key("foo-1.0.0-py3-none-any-cu13.whl"),
    )
    assert plain == "foo/1//py3-none-any" and variant == "foo/1//py3-none-any/cu13"


def test_which_gpus_run_which_code() -> None:
    sass, ptx = ["sm_80", "sm_90"], ["compute_75"]
    assert [runs_on(sass, ptx, capability_number(c)) for c in ("7.0", "7.5", "8.6", "12.0")] == [
        False,
        True,
        True,
        True,
    ]
    # SASS alone: later minors of its major only; sm_90a: 9.0 only.
    assert runs_on(["sm_80"], [], 86) and not runs_on(["sm_80"], [], 90)
    assert runs_on(["sm_90a"], [], 90) and not runs_on(["sm_90a"], [], 100)
    with pytest.raises(ValueError, match="'8'"):
        capability_number("8")


def test_variants_json_merges_labels_and_leaves_out_contradictions() -> None:
    one, two = nvidia_variant("cu13"), nvidia_variant("cu13_sm90")
    two["variants"] = {"cu13_sm90": {"nvidia": {"sm_arch": ["90_real"]}}}
    clash = nvidia_variant("cu13")
    clash["variants"] = {"cu13": {"nvidia": {"sm_arch": ["75_real"]}}}
    made = variants_file(
        "Opm-GPU",
        "1.0.0",
        [
            ("opm_gpu-1.0.0-py3-none-any-cu13.whl", one),
            ("opm_gpu-1.0.0-py3-none-any-cu13_sm90.whl", two),
            ("opm_gpu-1.0.0-py3-none-manylinux_2_17_x86_64-cu13.whl", clash),
        ],
    )
    assert made is not None and made.filename == "opm_gpu-1.0.0-variants.json"
    assert made.labels == ("cu13", "cu13_sm90")
    data = json.loads(made.content)
    assert data["variants"]["cu13"]["nvidia"]["sm_arch"] == ["80_real", "90_real"]
    assert data["default-priorities"]["namespace"] == ["nvidia"]


def test_gpu_worker_without_a_gpu_exits_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [OPMARKET, "worker", "--gpu", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=60,
    )
    if Path("/proc/driver/nvidia/gpus").is_dir():
        pytest.skip("this machine has an NVIDIA driver: the no-GPU branch is not reachable")
    assert done.returncode == 2, done.stderr
    assert "no GPU visible" in done.stderr and "gpu: not run" in done.stderr


# -- the static checks on real builds ----------------------------------------------------


@needs_cuobjdump
def test_static_checks_read_the_library_as_cuobjdump_and_readelf_do(
    gpu_wheels: GpuWheels,
) -> None:
    assert needed_libraries(gpu_wheels.library)[0] == "libcudart.so.13"
    found = inspect_gpu(gpu_wheels.plain)
    assert found is not None and found.status == "passed", found
    sass, ptx = cuobjdump_lists(gpu_wheels.library)
    assert (sass, ptx) == (["sm_80", "sm_90"], ["compute_75"])
    gpu = found.summary
    assert gpu is not None
    assert (gpu["sass"], gpu["ptx"]) == (sass, ptx)
    assert gpu["cuda"] == "13.0" and gpu["min_compute_capability"] == "7.5"
    assert gpu["min_driver"] == "580.65.06"
    assert gpu["manylinux"].startswith("manylinux_")  # libcudart excluded, as PyTorch does
    log = "\n".join(found.log)
    assert re.search(r"cuobjdump \d+\.\d+\.\d+", log)
    assert "provided by the dependency nvidia-cuda-runtime" in log
    assert "gpu: not run" in log


def _broken_section_table(data: bytes) -> bytes:
    """``data`` whose section header table says entries of 1 byte: no reader of sections
    can use it; the loader, which reads none, loads the library."""
    out = bytearray(data)
    struct.pack_into("<H", out, 0x3A, 1)  # e_shentsize
    return bytes(out)


def _renamed_section(data: bytes) -> bytes:
    """``data`` whose ``.nv_fatbin`` section binutils' objcopy renamed: the bytes, loaded
    where they were, still hold the fatbins the library's constructor registers."""
    if shutil.which("objcopy") is None:
        pytest.skip("binutils (objcopy) is not installed")
    with tempfile.TemporaryDirectory() as tmp:
        plain, renamed = Path(tmp, "plain.so"), Path(tmp, "renamed.so")
        plain.write_bytes(data)
        subprocess.run(
            ["objcopy", "--rename-section", ".nv_fatbin=.rodata.kernels", plain, renamed],
            check=True,
        )
        return renamed.read_bytes()


@needs_cuobjdump
@pytest.mark.parametrize("damage", [stripped, _broken_section_table, _renamed_section])
def test_a_gpu_library_without_usable_section_headers_passes_as_doctor_reads_it(
    gpu_wheels: GpuWheels, tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    """cuobjdump reads device code through the section headers and finds none in a library
    without them, which the loader loads and whose kernels the runtime registers: the step
    hands cuobjdump the fatbins the ELF reader finds in the segments, as doctor reads them."""
    library = tmp_path / gpu_wheels.library.name
    library.write_bytes(damage(gpu_wheels.library.read_bytes()))
    wheel = gpu_plugin_wheel(tmp_path / "wheel", "opm-gpu", "1.0.0", library=library)
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "passed", found
    assert found.summary is not None
    sass, ptx = cuobjdump_lists(gpu_wheels.library)  # the library as built
    assert (found.summary["sass"], found.summary["ptx"]) == (sass, ptx)
    code = read_device_code(library)  # what doctor and env-check read
    assert (list(code.sass), list(code.ptx)) == (sass, ptx) and code.cuda_runtime == 13
    assert found.summary["cuda"] == "13.0"
    (line,) = [n for n in found.log if n.startswith("opm_gpu/libopm_twice.so: ")]
    assert "device code listed by cuobjdump from the 2 fatbins opmarket's ELF reader " in line
    assert "SASS sm_80, sm_90; PTX compute_75" in line


@needs_nvcc
@needs_cuobjdump
def test_fatbins_outside_the_nv_fatbin_section_count_as_doctor_counts_them(
    tmp_path: Path,
) -> None:
    """A library that carries, besides its ``.nv_fatbin`` section, a fatbin in its read-only
    data that it loads itself (as cuFFT does: cuobjdump lists 1 of its 9 SASS
    architectures): the step lists what the ELF reader (doctor's) finds, through cuobjdump."""
    assert NVCC is not None
    source = tmp_path / "twice.cu"
    build_cuda_library(tmp_path)  # writes twice.cu
    fatbin = tmp_path / "extra.fatbin"
    subprocess.run(
        [NVCC, "-fatbin", "-gencode", "arch=compute_86,code=sm_86", "-o", fatbin, source],
        check=True,
        capture_output=True,
    )
    words = ", ".join(str(b) for b in fatbin.read_bytes())
    embed = tmp_path / "embed.c"
    embed.write_text(
        f"__attribute__((aligned(8))) const unsigned char opm_kernels[] = {{{words}}};\n"
    )
    library = tmp_path / "libopm_both.so"
    link = ["-shared", "-Xcompiler=-fPIC", "--cudart=shared", "-o", library, source, embed]
    subprocess.run(
        [NVCC, *GENCODE, *link],
        check=True,
        capture_output=True,
    )
    assert cuobjdump_lists(library) == (["sm_80", "sm_90"], ["compute_75"])
    code = read_device_code(library)
    assert (code.sass, code.ptx) == (("sm_80", "sm_86", "sm_90"), ("compute_75",))
    wheel = gpu_plugin_wheel(tmp_path / "wheel", "opm-both", "1.0.0", library=library)
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "passed" and found.summary is not None
    assert (found.summary["sass"], found.summary["ptx"]) == (list(code.sass), list(code.ptx))
    (line,) = [n for n in found.log if n.startswith("opm_both/libopm_both.so: ")]
    assert "(cuobjdump lists only sm_80, sm_90, compute_75 from its sections: " in line


@needs_cuobjdump
def test_the_step_says_why_a_librarys_device_code_was_not_read(tmp_path: Path) -> None:
    """cuobjdump finds no device code in the library, and the ELF reader stops at more
    magics that begin no fatbin than it passes over: the library's line says so."""
    library = build_stray_library(tmp_path, MAX_STRAYS + 1)
    wheel = gpu_plugin_wheel(tmp_path / "wheel", "opm-strays", "1.0.0", library=library)
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "failed" and found.summary is None
    (line,) = [n for n in found.log if n.startswith("opm_strays/libopm_strays.so: ")]
    reason = f"more than {MAX_STRAYS} fatbin magics that begin no fatbin"
    assert f"its device code cannot be read: {reason}; no device code" in line


@needs_nvcc
@needs_cuobjdump
def test_a_wheels_libraries_share_one_budget_of_fatbin_entries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step runs the ELF reader in the index's own process: the fatbin entries it reads
    count for the whole wheel, so a wheel of many libraries dense with entries costs one
    library's worth of CPU there, not one each. Past the budget a library's line says so,
    and cuobjdump's listing (in the sandbox) stands."""
    first = build_cuda_library(tmp_path)
    second = first.with_name("libopm_again.so")
    shutil.copyfile(first, second)
    budget = EntryBudget()
    assert read_device_code(first, budget).has_device_code
    per_library = budget.total - budget.left
    monkeypatch.setattr(_gpubinary, "MAX_ENTRIES", per_library + per_library // 2)
    assert read_device_code(second).has_device_code  # each alone is within the limit
    wheel = gpu_plugin_wheel(
        tmp_path / "wheel", "opm-dense", "1.0.0", library=first, more=(second,)
    )
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "passed", found.log if found else None
    (line,) = [n for n in found.log if n.startswith("opm_dense/libopm_again.so: ")]
    limit = per_library + per_library // 2
    assert (
        f"its device code cannot be read: more than {limit} fatbin entries in the wheel's libraries"
        in line
    )
    (other,) = [n for n in found.log if n.startswith("opm_dense/libopm_twice.so: ")]
    assert "cannot be read" not in other


@needs_cuobjdump
def test_gpu_kernels_without_device_code_or_runtime_are_rejected(gpu_wheels: GpuWheels) -> None:
    no_code = inspect_gpu(gpu_wheels.no_code)
    assert no_code is not None and no_code.status == "failed"
    assert no_code.summary is None
    assert "declares GPU kernels for Test>OpmNocode but no shared library" in "\n".join(no_code.log)
    no_runtime = inspect_gpu(gpu_wheels.no_runtime)
    assert no_runtime is not None and no_runtime.status == "failed"
    assert "needs libcudart.so.13, which nothing provides" in "\n".join(no_runtime.log)


def test_variant_metadata_is_checked(tmp_path: Path, gpu_wheels: GpuWheels) -> None:
    info = inspect_wheel(gpu_wheels.variant, gpu_wheels.variant.name)
    assert info.variant is not None and "cu13" in info.variant["variants"]
    wrong_label = gpu_plugin_wheel(
        tmp_path / "a",
        "opm-gpu",
        "1.0.0",
        library=None,
        filename="opm_gpu-1.0.0-py3-none-any-cu12.whl",
        variant=nvidia_variant("cu13"),
    )
    with pytest.raises(WheelError, match="label cu13, expected cu12"):
        inspect_wheel(wrong_label, wrong_label.name)
    missing = gpu_plugin_wheel(
        tmp_path / "b", "opm-gpu", "1.0.0", library=None, filename=wrong_label.name
    )
    with pytest.raises(WheelError, match=r"variant\.json is missing"):
        inspect_wheel(missing, missing.name)
    # Nested past the JSON parser's stack: refused with a reason, not a server error.
    deep = gpu_plugin_wheel(
        tmp_path / "c",
        "opm-gpu",
        "1.0.0",
        library=None,
        filename=wrong_label.name,
        variant=b"[" * 30_000 + b"]" * 30_000,  # within the 64 KiB a variant.json may take
    )
    with pytest.raises(WheelError, match="nests deeper than any variant metadata"):
        inspect_wheel(deep, deep.name)


# -- end to end: twine uploads, the API, the simple pages, pip --------------------------


@pytest.fixture(scope="module")
def gpu_market(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Market]:
    yield from start_market(tmp_path_factory.mktemp("gpu-market"), validation_workers=2)


@pytest.mark.slow
@needs_cuobjdump
def test_gpu_files_on_the_index(gpu_market: Market, gpu_wheels: GpuWheels, tmp_path: Path) -> None:
    market, token = gpu_market, gpu_market.tokens["alice"]
    for wheel in (gpu_wheels.plain, gpu_wheels.variant):
        done = twine(market, token, wheel)
        assert done.returncode == 0, done.stdout + done.stderr
    done = twine(market, token, gpu_wheels.no_code)  # the upload answers with the verdict
    assert done.returncode != 0
    said = " ".join((done.stdout + done.stderr).split())  # twine wraps long lines
    assert "no shared library in the wheel carries device code" in said
    plain = market.wait_for("opm-gpu", gpu_wheels.plain.name)
    variant = market.wait_for("opm-gpu", gpu_wheels.variant.name)
    no_code = market.wait_for("opm-nocode", gpu_wheels.no_code.name)
    assert plain["status"] == "validated", plain["log"]
    assert variant["status"] == "validated", variant["log"]
    # The API's gpu object says what cuobjdump says of the library.
    sass, ptx = cuobjdump_lists(gpu_wheels.library)
    gpu = plain["gpu"]
    assert {k: gpu[k] for k in ("cuda", "sass", "ptx", "min_compute_capability")} == {
        "cuda": "13.0",
        "sass": sass,
        "ptx": ptx,
        "min_compute_capability": "7.5",
    }
    assert variant["variant"] == "cu13" and plain["variant"] is None
    assert "provider plugins are placeholders" in variant["log"]
    # GPU kernels are never passed without a GPU worker.
    detail = market.json("/api/packages/opm-gpu")
    assert {k["status"] for k in detail["kernels"] if k["device"] == "GPU"} == {"gpu: not run"}
    # Rejected with its reason.
    assert no_code["status"] == "rejected" and no_code["gpu"] is None
    assert "no shared library in the wheel carries device code" in no_code["log"]

    # Search: by CUDA major and by the compute capability a GPU has.
    def found(query: str) -> list[str]:
        return [p["normalized"] for p in market.json(f"/api/packages?{query}")["packages"]]

    assert found("cuda=13") == ["opm-gpu"] and found("cuda=12") == []
    assert found("compute_capability=8.6") == ["opm-gpu"]
    assert found("compute_capability=7.0") == []
    status, _, home = market.get("/?cuda=13&compute_capability=9.0")
    assert status == 200 and b"/project/opm-gpu/" in home and b"opm-nocode" not in home
    status, _, body = market.get("/api/packages?compute_capability=eight")
    assert status == 400 and b"'eight'" in body
    # variants.json beside the simple page, linked from it with its hash.
    status, _, page = market.get("/simple/opm-gpu/")
    link = re.search(rb'href="(/simple/opm-gpu/opm_gpu-1\.0\.0-variants\.json)#sha256=(\w+)"', page)
    assert status == 200 and link is not None, page
    status, _, body = market.get(link.group(1).decode())
    assert status == 200 and hashlib.sha256(body).hexdigest() == link.group(2).decode()
    assert list(json.loads(body)["variants"]) == ["cu13"]
    status, _, body = market.get(
        "/simple/opm-gpu/", headers={"Accept": "application/vnd.pypi.simple.v1+json"}
    )
    index = json.loads(body)  # PEP 691 lists it too
    assert "opm_gpu-1.0.0-variants.json" in [f["filename"] for f in index["files"]]
    # The catalog's page shows the gpu object as badges.
    status, _, html_page = market.get("/project/opm-gpu/")
    assert status == 200
    for badge in ("CUDA 13.0", "sm_80", "sm_90", "compute_75", "CC ≥ 7.5", "variant cu13"):
        assert badge.encode() in html_page, badge
    # A variant wheel that says another thing of the same label is refused at upload.
    clash = nvidia_variant("cu13")
    clash["variants"] = {"cu13": {"nvidia": {"sm_arch": ["75_real"]}}}
    other = gpu_plugin_wheel(
        tmp_path / "clash",
        "opm-gpu",
        "1.0.0",
        library=gpu_wheels.library,
        filename="opm_gpu-1.0.0-py3-none-manylinux_2_17_x86_64-cu13.whl",
        variant=clash,
    )
    done = twine(market, token, other)
    assert done.returncode != 0 and "contradicts" in done.stdout + done.stderr
    # Variant-unaware pip installs the plain wheel and skips the variant one.
    target = tmp_path / "site"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-cache-dir",
            "--target",
            str(target),
            "--index-url",
            f"{market.url}/simple/",
            "-v",
            "opm-gpu",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert gpu_wheels.plain.name in done.stdout
    assert (target / "opm_gpu" / gpu_wheels.library.name).is_file()
    record = next(target.glob("opm_gpu-1.0.0.dist-info")) / "RECORD"
    with zipfile.ZipFile(gpu_wheels.variant) as zf:
        assert "opm_gpu-1.0.0.dist-info/variant.json" in zf.namelist()
    assert "variant.json" not in record.read_text()
    # So does uv (a release without variant support: it skips the variant wheel too).
    uv_target = tmp_path / "uv-site"
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "uv"),
            "pip",
            "install",
            "--no-deps",
            "--no-cache",
            "--python",
            sys.executable,
            "--target",
            str(uv_target),
            "--index-url",
            f"{market.url}/simple/",
            "opm-gpu",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    installed = next(uv_target.glob("opm_gpu-1.0.0.dist-info"))
    assert not (installed / "variant.json").exists(), done.stderr


def _gpu_statuses(detail: Any) -> set[str]:
    return {k["status"] for k in detail["kernels"] if k["device"] == "GPU"}


def _shown(market: Market, what: Callable[[Any], Any], expected: Any) -> Any:
    """The package's JSON once ``what`` of it is ``expected`` (the server sees another
    process's change at its next look at the change log, once a second), else after 30 s
    the last read."""
    deadline = time.monotonic() + 30
    while True:
        detail = market.json("/api/packages/opm-gpu")
        if what(detail) == expected or time.monotonic() > deadline:
            return detail
        time.sleep(0.1)


@pytest.mark.slow
@needs_cuobjdump
def test_gpu_worker_takes_and_records_gpu_kernels(
    gpu_market: Market, gpu_wheels: GpuWheels
) -> None:
    """The GPU worker's CPU-side parts on the validated GPU file: taking its ``gpu: not
    run`` kernels (once only), the lease (renewed, run out, taken again), and recording
    verdicts only while the lease is held."""
    from opmarket.web._app import open_state
    from opmarket.web._settings import Settings
    from opmarket.web.catalog._models import Project
    from opmarket.web.gpu._worker import (
        LEASE_S,
        claim_gpu_file,
        record_gpu_kernels,
        renew_gpu_claim,
    )
    from opmarket.web.validation._steps import KernelRow

    market = gpu_market
    if market.get("/api/packages/opm-gpu")[0] != 200:
        assert twine(market, market.tokens["alice"], gpu_wheels.plain).returncode == 0
    assert market.wait_for("opm-gpu", gpu_wheels.plain.name)["status"] == "validated"
    state = open_state(Settings(data_dir=market.data, validation_workers=0))

    def serial() -> int:
        with state.db.transaction() as session:
            return int(
                session.scalars(select(Project.serial).where(Project.normalized == "opm-gpu")).one()
            )

    first = []
    while True:
        before = serial()
        if (claim := claim_gpu_file(state)) is None:
            break
        first.append(claim)
        # Each claim is a change the index shows ("gpu: running"): it bumps the project's
        # serial, the key every process's kept pages and details are dropped by.
        assert serial() == before + 1
    assert first  # the plain wheel and its variant, each once
    # The server keeps the package's JSON until its next look at the change log (once a
    # second): the claim, made in this process, must reach it through the log.
    kernels = _shown(market, _gpu_statuses, {"gpu: running"})["kernels"]
    assert {k["status"] for k in kernels if k["device"] == "GPU"} == {"gpu: running"}
    assert all(k["message"].startswith("taken at ") for k in kernels if k["device"] == "GPU")
    # A renewed lease holds; one left to run out (a worker killed mid-file) is taken again.
    later = datetime.now(UTC) + timedelta(seconds=LEASE_S + 60)
    assert all(renew_gpu_claim(state, c, now=later - timedelta(seconds=120)) for c in first)
    assert claim_gpu_file(state, now=later) is None  # renewed: still held
    again = []
    while (claim := claim_gpu_file(state, now=later + timedelta(seconds=LEASE_S))) is not None:
        again.append(claim)
    assert sorted(c.file_id for c in again) == sorted(c.file_id for c in first)
    verdict = [KernelRow("Test>OpmGpu", "GPU", "T=float", "passed")]
    # The worker that lost its lease records nothing and cannot renew.
    for claim in first:
        assert not renew_gpu_claim(state, claim)
        assert not record_gpu_kernels(state, claim, verdict, "stale worker")
    for claim in again:
        assert record_gpu_kernels(state, claim, verdict, "GPU conformance on test")
    detail = _shown(market, _gpu_statuses, {"passed"})
    gpu_rows = [k for k in detail["kernels"] if k["device"] == "GPU"]
    assert [(k["op"], k["status"]) for k in gpu_rows] == [("Test>OpmGpu", "passed")]
    assert claim_gpu_file(state) is None
    log = detail["files"][0]["log"]
    assert "[gpu worker] GPU conformance on test" in log and "stale worker" not in log


@needs_cuobjdump
@pytest.mark.parametrize(
    ("requires", "cuda", "warning"),
    [
        ("nvidia-cuda-runtime==13.0.96", "13.0", False),
        ("nvidia-cuda-runtime>=13.2,<14", "13.2", False),
        ("nvidia-cuda-runtime-cu13", "13.0", False),
        ("nvidia-cuda-runtime>=13", "13.0", True),  # allows 14 too: provided, with a warning
    ],
)
def test_which_dependencies_provide_the_runtime(
    tmp_path: Path, gpu_wheels: GpuWheels, requires: str, cuda: str, warning: bool
) -> None:
    wheel = gpu_plugin_wheel(
        tmp_path, "opm-dep", "1.0.0", library=gpu_wheels.library, requires=(requires,)
    )
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "passed", found
    assert found.summary is not None and found.summary["cuda"] == cuda
    assert ("pin <14" in "\n".join(found.log)) is warning


def test_needed_libraries_are_read_from_the_dynamic_section(tmp_path: Path) -> None:
    host = build_host_library(tmp_path)
    done = subprocess.run(["readelf", "-d", str(host)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip("readelf (binutils) is not installed")
    expected = tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", done.stdout))
    assert expected and needed_libraries(host) == expected
    assert needed_libraries(Path(__file__)) == ()  # not ELF
    truncated = tmp_path / "truncated.so"
    truncated.write_bytes(host.read_bytes()[:100])
    assert needed_libraries(truncated) == ()


def _elf64(
    sections: list[tuple[int, ...]],
    body: bytes = b"",
    shnum: int | None = None,
    shstrndx: int = 0,
) -> bytes:
    """A little-endian 64-bit ELF header, ``body``, then the section headers given."""
    count = len(sections) if shnum is None else shnum
    header = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    header += struct.pack(
        "<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, 64 + len(body), 0, 64, 0, 0, 64, count, shstrndx
    )
    return header + body + b"".join(struct.pack("<IIQQQQIIQQ", *sh) for sh in sections)


def test_the_elf_reader_trusts_no_number_in_an_uploaded_library(tmp_path: Path) -> None:
    """The index reads DT_NEEDED of uploaded libraries outside the sandbox: counts and sizes
    beyond the file are a bad file (not an OverflowError or MemoryError), and only the first
    dynamic section is read (a hostile file pointed thousands of headers at one big table)."""
    null = (0,) * 10
    counted = tmp_path / "counted.so"  # extended numbering: 2**62 sections
    counted.write_bytes(_elf64([(0, 0, 0, 0, 0, 2**62, 0, 0, 0, 0)], shnum=0))
    huge = tmp_path / "huge.so"  # a dynamic section of 1 TiB
    huge.write_bytes(_elf64([null, (0, 6, 0, 0, 0, 2**40, 0, 0, 0, 0)]))
    # A .nv_fatbin of 1 TiB (its name from the section names' table, section 1).
    names = b"\0.nv_fatbin\0"
    fatbin = tmp_path / "fatbin.so"
    fatbin.write_bytes(
        _elf64(
            [null, (0, 3, 0, 0, 64, len(names), 0, 0, 0, 0), (1, 1, 0, 0, 64, 2**40, 0, 0, 0, 0)],
            names,
            shstrndx=1,
        )
    )
    for path in (counted, huge, fatbin):
        assert needed_libraries(path) == ()
        assert read_device_code(path) == DeviceCode()  # doctor's reader is the same one
    strings = b"\0liba.so\0libb.so\0"
    first = struct.pack("<qQqQ", 1, 1, 0, 0)  # DT_NEEDED liba.so, DT_NULL
    second = struct.pack("<qQqQ", 1, 8, 0, 0)  # DT_NEEDED libb.so, DT_NULL
    body = strings + first + second
    at = 64 + len(strings)
    twice = tmp_path / "twice.so"
    twice.write_bytes(
        _elf64(
            [
                null,
                (0, 3, 0, 0, 64, len(strings), 0, 0, 0, 0),  # the string table
                (0, 6, 0, 0, at, len(first), 1, 0, 0, 0),
                (0, 6, 0, 0, at + len(first), len(second), 1, 0, 0, 0),
            ],
            body,
        )
    )
    assert needed_libraries(twice) == ("liba.so",)
    # Thousands of entries into one 60 KB name: each name is decoded once, and names that
    # overlap past four times their table are a bad file (was about 1 GB of strings).
    long_name = b"ab:" * 20_000 + b"\0"
    for offsets in ([0] * 20_000, range(0, 20_000 * 3, 3)):
        table = b"".join(struct.pack("<qQ", 1, o) for o in offsets)
        bomb = tmp_path / "bomb.so"
        bomb.write_bytes(
            _elf64(
                [
                    null,
                    (0, 3, 0, 0, 64, len(long_name), 0, 0, 0, 0),
                    (0, 6, 0, 0, 64 + len(long_name), len(table), 1, 0, 0, 0),
                ],
                long_name + table,
            )
        )
        found = read_library(bomb)
        assert sum(map(len, found.needed)) <= 4 * len(long_name) + 64 * 1024


def test_a_wheel_of_more_libraries_than_the_index_reads_is_refused_at_once(
    tmp_path: Path,
) -> None:
    """Each library is read by a sandboxed cuobjdump: thousands of tiny ones would hold a
    worker for minutes, so past MAX_LIBRARIES none is read and the step fails."""
    many = {f"opm_many/lib{i}.so": b"\x7fELF" for i in range(MAX_LIBRARIES + 1)}
    wheel = handmade_wheel(tmp_path, "opm-many", "1.0", many)
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "failed", found
    assert f"{MAX_LIBRARIES + 1} shared libraries" in found.log[0]


def test_gpu_kernels_written_in_python_have_no_device_code_to_check(tmp_path: Path) -> None:
    wheel = gpu_plugin_wheel(tmp_path, "opm-pygpu", "1.0.0", library=None)
    found = inspect_gpu(wheel)
    assert found is not None and found.status == "skipped" and found.summary is None
    assert "no shared library" in found.log[0] and "gpu: not run" in found.log[0]
    # A plugin without GPU kernels or libraries has no GPU step at all.
    plain = gpu_plugin_wheel(tmp_path / "cpu", "opm-cpu", "1.0.0", library=None, gpu_kernel=False)
    assert inspect_gpu(plain) is None
