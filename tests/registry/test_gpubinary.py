"""The GPU binary reader finds device code as the CUDA runtime does: a library whose section
headers were stripped (``sstrip``, a zeroed ``e_shoff``), renamed or lie still registers its
fatbins from its loaded segments and runs its kernels, so it must be read as carrying what
the unstripped library carries. Hostile segments are passed over or refused with a reason,
in bounded work."""

from __future__ import annotations

import struct
import subprocess
import sysconfig
from collections.abc import Callable
from pathlib import Path

import pytest

from opmarket.registry import _gpubinary
from opmarket.registry._doctor import gpu_fit
from opmarket.registry._gpubinary import MAX_STRAYS, DeviceCode, read_device_code
from opmarket.registry._machine import Machine
from opmarket.web.gpu._tools import cuobjdump_path
from tests.web.gpu_wheels import NVCC, build_cuda_library, build_stray_library
from tests.web.test_gpu_index import cuobjdump_lists

from .envcheck.conftest import predict
from .envcheck.test_envcheck_cli import handmade_wheel
from .envcheck.test_stripped_elf import stripped

_ELF_HEADER = struct.Struct("<4sBBBBB7sHHIQQQIHHHHHH")
_PROGRAM = struct.Struct("<IIQQQQQQ")
_PT_LOAD, _PF_R, _PF_X = 1, 4, 1
_MAGIC = 0xBA55ED50


def _sections(data: bytes) -> tuple[int, int, int]:
    """Section headers' offset, count and names' index of a 64-bit little-endian file."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shnum, shstrndx = struct.unpack_from("<HH", data, 0x3C)
    return shoff, shnum, shstrndx


def _fatbin_header(data: bytes) -> int:
    """Where the ``.nv_fatbin`` section's header is."""
    shoff, shnum, shstrndx = _sections(data)
    (names,) = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 24)
    for index in range(shnum):
        (name,) = struct.unpack_from("<I", data, shoff + index * 64)
        if data[names + name :].startswith(b".nv_fatbin\0"):
            return shoff + index * 64
    raise AssertionError("no .nv_fatbin section")


def hidden(data: bytes) -> bytes:
    """``data`` whose ``.nv_fatbin`` section is named ``.nv_fatbix`` and holds no file
    bytes (SHT_NOBITS): no section accounts for the fatbins, which still load."""
    out = bytearray(data)
    header = _fatbin_header(data)
    shoff, _, shstrndx = _sections(data)
    (names,) = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 24)
    (name,) = struct.unpack_from("<I", data, header)
    out[names + name + len(".nv_fatbi")] = ord("x")
    struct.pack_into("<I", out, header + 4, 8)  # SHT_NOBITS
    return bytes(out)


def renamed(data: bytes) -> bytes:
    """``data`` whose ``.nv_fatbin`` section is named ``.nv_fatbix``: its bytes, loaded
    where they were, still hold the fatbins the library's constructor registers."""
    out = bytearray(data)
    shoff, _, shstrndx = _sections(data)
    (names,) = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 24)
    (name,) = struct.unpack_from("<I", data, _fatbin_header(data))
    out[names + name + len(".nv_fatbi")] = ord("x")
    return bytes(out)


def unusable(data: bytes) -> bytes:
    """``data`` whose section header table says entries of 1 byte: no section can be read
    from it; the loader reads none."""
    out = bytearray(data)
    struct.pack_into("<H", out, 0x3A, 1)  # e_shentsize
    return bytes(out)


def lying(data: bytes) -> bytes:
    """``data`` whose ``.nv_fatbin`` section header points at the ELF header."""
    out = bytearray(data)
    struct.pack_into("<Q", out, _fatbin_header(data) + 24, 0)
    return bytes(out)


@pytest.fixture(scope="module")
def cuda_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real nvcc build: SASS sm_80 and sm_90, PTX compute_75, in two fatbins."""
    if NVCC is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed")
    return build_cuda_library(tmp_path_factory.mktemp("cuda"))


def _companions() -> list[Path]:
    site = Path(sysconfig.get_paths()["purelib"])
    return sorted(site.glob("opmarket_*_cuda13/**/*.so"))


@pytest.mark.parametrize("damage", [stripped, hidden, renamed, lying, unusable])
def test_a_cuda_library_without_true_section_headers_carries_its_device_code(
    cuda_library: Path, tmp_path: Path, damage: Callable[[bytes], bytes]
) -> None:
    libraries = [cuda_library, *_companions()]
    for library in libraries:
        damaged = tmp_path / f"damaged-{library.name}"
        damaged.write_bytes(damage(library.read_bytes()))
        code = read_device_code(library)
        assert code.has_device_code and code.cuda_runtime == 13
        assert read_device_code(damaged) == code
        assert not code.problem
    code = read_device_code(cuda_library)
    assert (code.sass, code.ptx) == (("sm_80", "sm_90"), ("compute_75",))  # as built


def test_a_fatbin_in_the_code_segment_is_found(
    cuda_library: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A linker without ``-z separate-code`` (binutils before 2.31, as CentOS 7's) puts
    ``.rodata`` and ``.nv_fatbin`` in the one executable segment; stripped, the library
    still registers its fatbins from there."""
    library = build_cuda_library(tmp_path_factory.mktemp("nosep"), "-z", "noseparate-code")
    data = library.read_bytes()
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    (phnum,) = struct.unpack_from("<H", data, 0x38)
    segments = [_PROGRAM.unpack_from(data, phoff + i * _PROGRAM.size) for i in range(phnum)]
    fatbin = struct.unpack_from("<Q", data, _fatbin_header(data) + 24)[0]
    (holder,) = [p for p in segments if p[0] == _PT_LOAD and p[2] <= fatbin < p[2] + p[5]]
    assert holder[1] & _PF_X  # the fatbins are in the code segment
    bare = library.with_name("libbare.so")
    bare.write_bytes(stripped(data))
    assert read_device_code(bare) == read_device_code(cuda_library)
    assert read_device_code(bare).has_device_code


def test_sections_past_the_matching_limit_are_not_trusted_but_searched(
    cuda_library: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = read_device_code(cuda_library)
    monkeypatch.setattr(_gpubinary, "_MAX_PAIRS", 1)
    assert read_device_code(cuda_library) == code and code.has_device_code


def test_the_stripped_library_carries_what_cuobjdump_lists_in_the_unstripped_one(
    cuda_library: Path, tmp_path: Path
) -> None:
    if cuobjdump_path() is None:
        pytest.skip("cuobjdump (nvidia-cuda-cuobjdump wheel) is not installed")
    damaged = tmp_path / "stripped.so"
    damaged.write_bytes(stripped(cuda_library.read_bytes()))
    code = read_device_code(damaged)
    assert (list(code.sass), list(code.ptx)) == cuobjdump_lists(cuda_library)


def test_relocatable_device_code_is_not_counted_as_the_librarys(tmp_path: Path) -> None:
    """A library built with ``-rdc`` keeps its relocatable device code (here PTX for
    compute_90) in ``__nv_relfatbin`` for a later device link; the runtime registers only
    the device-linked ``.nv_fatbin`` (SASS sm_80), and cuobjdump lists only that."""
    if NVCC is None:
        pytest.skip("nvcc (the CUDA toolkit) is not installed")
    source = tmp_path / "k.cu"
    source.write_text(
        "__global__ void twice(float *x) { x[threadIdx.x] *= 2; }\n"
        'extern "C" void run(float *x) { twice<<<1, 32>>>(x); }\n'
    )
    library = tmp_path / "librdc.so"
    gencode = [
        "-gencode",
        "arch=compute_80,code=sm_80",
        "-gencode",
        "arch=compute_90,code=compute_90",
    ]
    subprocess.run(
        [
            NVCC,
            "-shared",
            "-rdc=true",
            "-Xcompiler",
            "-fPIC",
            *gencode,
            "-o",
            str(library),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    assert b"__nv_relfatbin" in library.read_bytes()  # the build keeps relocatable code
    code = read_device_code(library)
    assert (code.sass, code.ptx) == (("sm_80",), ())
    if cuobjdump_path() is not None:
        assert (list(code.sass), list(code.ptx)) == cuobjdump_lists(library)


# --- hostile segments: handmade files, no section headers ------------------------------------


def _entry(kind: int, arch: int, payload: int = 8) -> bytes:
    head = struct.pack("<HHIQ", kind, 0x101, 64, payload).ljust(28, b"\0")
    return (head + struct.pack("<I", arch)).ljust(64, b"\0") + b"\xab" * payload


def _fatbin(*entries: bytes, size: int | None = None) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", _MAGIC, 1, 16, len(body) if size is None else size) + body


def _elf(folder: Path, data: bytes, segments: int = 1, flags: int = _PF_R) -> Path:
    """A shared library of ``segments`` PT_LOAD headers, each over all of ``data``."""
    at = 64 + segments * _PROGRAM.size
    header = _ELF_HEADER.pack(
        b"\x7fELF", 2, 1, 1, 0, 0, b"", 3, 62, 1, 0, 64, 0, 0, 64, 56, segments, 64, 0, 0
    )
    load = _PROGRAM.pack(_PT_LOAD, flags, at, at, at, len(data), len(data), 0x1000)
    path = folder / "libhostile.so"
    path.write_bytes(header + load * segments + data)
    return path


def test_a_true_fatbin_is_found_among_magics_that_begin_none(tmp_path: Path) -> None:
    broken = [
        struct.pack("<IHHQ", _MAGIC, 2, 16, 64),  # version 2
        struct.pack("<IHHQ", _MAGIC, 1, 24, 64),  # a 24-byte header
        _fatbin(_entry(2, 70), size=80),  # entries that do not fill it
        _fatbin(struct.pack("<HHIQ", 2, 0, 8, 0).ljust(32, b"\0")),  # an 8-byte entry
        _fatbin(_entry(2, 75), size=1 << 40),  # past its segment
    ]
    true = _fatbin(_entry(2, 86), _entry(1, 80), _entry(4, 90))  # kind 4: neither
    data = b"".join(b + b"\0" * 8 for b in broken) + true + struct.pack("<I", _MAGIC)
    code = read_device_code(_elf(tmp_path, data))
    assert (code.sass, code.ptx, code.problem) == (("sm_86",), ("compute_80",), "")


def test_an_executable_segment_is_searched(tmp_path: Path) -> None:
    """The runtime registers a fatbin by its address, whichever segment holds it."""
    code = read_device_code(_elf(tmp_path, _fatbin(_entry(2, 86)), flags=_PF_R | _PF_X))
    assert (code.sass, code.problem, code.fatbins) == (("sm_86",), "", ((120, 16 + 72),))


def test_a_fatbin_past_its_segment_is_passed_over(tmp_path: Path) -> None:
    code = read_device_code(_elf(tmp_path, _fatbin(_entry(2, 86), size=64 + 9)))
    assert code == DeviceCode() and not code.problem


def test_thousands_of_magics_are_refused(tmp_path: Path) -> None:
    data = _fatbin(_entry(2, 86)) + struct.pack("<IHHQ", _MAGIC, 2, 16, 0) * (MAX_STRAYS + 1)
    code = read_device_code(_elf(tmp_path, data))
    assert code == DeviceCode()
    assert code.problem == f"more than {MAX_STRAYS} fatbin magics that begin no fatbin"


def test_overlapping_segments_are_searched_once_within_the_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = b"\0" * 4096 + _fatbin(_entry(2, 86))
    monkeypatch.setattr(_gpubinary, "MAX_SCANNED", len(data))
    assert read_device_code(_elf(tmp_path, data, segments=1000)).sass == ("sm_86",)
    monkeypatch.setattr(_gpubinary, "MAX_SCANNED", 4000)
    code = read_device_code(_elf(tmp_path, data, segments=1000))
    assert code == DeviceCode() and code.problem == "more than 4000 bytes to search for fatbins"
    for name, problem in (
        ("MAX_FATBINS", "more than 1 fatbins in its segments"),
        ("MAX_ENTRIES", "more than 1 fatbin entries in its segments"),
    ):
        monkeypatch.setattr(_gpubinary, "MAX_SCANNED", 1 << 20)
        monkeypatch.setattr(_gpubinary, name, 1)
        two = _elf(tmp_path, _fatbin(_entry(2, 86)) + _fatbin(_entry(2, 90), _entry(2, 80)))
        assert read_device_code(two).problem == problem
        monkeypatch.undo()


def test_env_check_describes_a_stripped_cuda_library_as_the_unstripped_one(
    cuda_library: Path, tmp_path: Path
) -> None:
    data, documents = cuda_library.read_bytes(), []
    for name, raw in (("plain", data), ("stripped", stripped(data))):
        (tmp_path / name).mkdir()
        wheel = handmade_wheel(tmp_path / name / "x-1.0-py3-none-any.whl", raw)
        documents.append(predict([wheel])[1])
    plain, damaged = (d["files"][0] for d in documents)
    assert damaged["notes"] == plain["notes"] and damaged["problems"] == plain["problems"]
    if not Path("/proc/driver/nvidia/gpus").is_dir():  # no GPU: the note names the code
        assert [n["detail"] for n in plain["notes"]] == [
            "no GPU visible: its sm_80/sm_90/compute_75 code does not run here"
        ]


def test_a_hostile_nv_fatbin_section_is_read_within_the_limits() -> None:
    """The ``.nv_fatbin`` section the segments agree with is read with the scan's limits:
    a container of more entries than :data:`MAX_ENTRIES` (each 32 bytes, no payload) is
    refused, not walked; so are more unaligned magics than :data:`MAX_STRAYS`; a real
    container after a stretch of padding is still found."""
    from opmarket.registry._elffile import _Refused

    entry = struct.pack("<HHIQ", 2, 0, 32, 0) + bytes(12) + struct.pack("<I", 80)
    count = _gpubinary.MAX_ENTRIES + 1
    many = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 32 * count) + entry * count
    with pytest.raises(_Refused, match="fatbin entries"):
        _gpubinary._fatbins(many, set(), set())
    strays = (bytes(3) + struct.pack("<I", 0xBA55ED50) + bytes(1)) * (MAX_STRAYS + 3)
    with pytest.raises(_Refused, match="magics that begin no fatbin"):
        _gpubinary._fatbins(strays, set(), set())
    sass: set[str] = set()
    one = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 32) + entry
    _gpubinary._fatbins(bytes(1 << 20) + one, sass, set())
    assert sass == {"sm_80"}


def test_why_device_code_was_not_read_is_shown_by_env_check_and_doctor(tmp_path: Path) -> None:
    """A real library (it loads) whose data holds more magics that begin no fatbin than the
    search passes over: env-check notes why its device code was not read, and doctor's
    reason for a GPU kernel built from it ends with why."""
    library = build_stray_library(tmp_path, MAX_STRAYS + 1)
    code = read_device_code(library)
    reason = f"more than {MAX_STRAYS} fatbin magics that begin no fatbin"
    assert code.problem == reason and not code.has_device_code
    wheel = handmade_wheel(tmp_path / "x-1.0-py3-none-any.whl", library.read_bytes())
    _, document = predict([wheel])
    (report,) = document["files"]
    assert f"its device code cannot be read: {reason}" in [n["detail"] for n in report["notes"]]
    assert report["works"] and not report["problems"]  # it loads: a note, not a problem
    fits, why = gpu_fit(Machine(arch="x86_64", cpu="", simd=()), [code])
    assert (fits, why) == (False, f"no GPU visible; device code not read: {reason}")


def test_doctor_says_why_an_installed_librarys_device_code_was_not_read(tmp_path: Path) -> None:
    """``opmarket doctor`` with a plugin installed whose manifest declares a GPU kernel and
    whose library's device code cannot be read: the GPU kernel's reason names the library
    and why; the exit code is what it was."""
    import os
    import subprocess
    import sys

    from tests.web.gpu_wheels import gpu_plugin_wheel

    from .envcheck.conftest import BIN

    library = build_stray_library(tmp_path, MAX_STRAYS + 1)
    wheel = gpu_plugin_wheel(tmp_path / "wheel", "opm-strays", "1.0.0", library=library)
    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", site, wheel],
        check=True,
    )
    env = {**os.environ, "OPMARKET_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(site)}
    env.pop("OPMARKET_PLUGINS", None)
    env.pop("OPMARKET_DISABLE_PLUGINS", None)
    done = subprocess.run(
        [BIN / "opmarket", "doctor"], capture_output=True, text=True, check=False, env=env
    )
    reason = f"more than {MAX_STRAYS} fatbin magics that begin no fatbin"
    lines = done.stdout.split("  Test>OpmStrays\n", 1)[1].splitlines()
    (line,) = [n for n in lines[:3] if n.startswith("    GPU ")]
    assert line.endswith(f"; device code not read: libopm_strays.so: {reason}"), done.stdout
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_large_nv_fatbin_section_is_read_without_its_size_in_memory(tmp_path: Path) -> None:
    """The index reads each uploaded library's device code in its own process: a linked
    library whose ``.nv_fatbin`` section (agreeing with the segments) is large is searched
    through a read-only map of the file, not copied into the process's memory, so a
    section of hundreds of MiB (a 1 GiB upload limit, zeros compress 200 to 1) costs no
    data memory. Run with the data limit (``RLIMIT_DATA``) a few MiB above what the
    interpreter already uses, in a real subprocess."""
    import subprocess
    import sys

    size = 96 << 20
    source = tmp_path / "big.c"
    source.write_text(
        '__attribute__((section(".nv_fatbin"), aligned(8), used))\n'
        f"const unsigned char opm_big[{size}] = {{1}};\n"
    )
    library = tmp_path / "libopm_big.so"
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", library, source], check=True, capture_output=True
    )
    code = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from opmarket.registry._gpubinary import read_device_code\n"
        "read_device_code(Path(sys.argv[1]))  # everything it imports, loaded\n"
        "status = open('/proc/self/status').read()\n"
        "used = int(status.split('VmData:')[1].split()[0]) * 1024\n"
        "limit = used + (32 << 20)\n"
        "resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))\n"
        "code = read_device_code(Path(sys.argv[1]))\n"
        "print(repr(code.problem), code.sass)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, library], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["''", "()"]
