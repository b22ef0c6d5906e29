"""What this machine has for running kernels, read without a GPU toolkit: the CPU's SIMD
features (``/proc/cpuinfo``), the NVIDIA GPUs and their compute capability (the driver's
``libcuda.so.1`` through ctypes, when it exists), the driver's version
(``/proc/driver/nvidia/version``), and the CUDA runtimes a companion could load (the
``nvidia-cuda-runtime`` wheels on ``sys.path``, the dynamic linker's cache).

A missing driver, GPU or runtime is a fact, never an error. The part that needs a GPU is
:func:`_driver_gpus` alone: cuInit, cuDeviceGetCount, then per device its name and the
compute capability attributes (75, 76); everything else reads files.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["SIMD_FLAGS", "CudaRuntime", "Gpu", "Machine", "cpu_simd", "machine_facts"]

#: The /proc/cpuinfo flags doctor reports (x86-64, then Arm), in this order when present.
SIMD_FLAGS: tuple[str, ...] = (
    "sse2",
    "ssse3",
    "sse4_1",
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
)

_CU_ATTRIBUTE_CC_MAJOR, _CU_ATTRIBUTE_CC_MINOR = 75, 76


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU the driver reports: its index, name and compute capability (major, minor)."""

    index: int
    name: str
    compute_capability: tuple[int, int]

    @property
    def sm(self) -> str:
        """``sm_90`` for compute capability 9.0."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


@dataclass(frozen=True, slots=True)
class CudaRuntime:
    """A ``libcudart.so.<major>`` a companion could load, and where it is."""

    major: int
    path: str
    source: str  # "wheel" (nvidia-cuda-runtime on sys.path) or "system"


@dataclass(frozen=True, slots=True)
class Machine:
    """The facts doctor decides with; tests build one by hand for every branch."""

    arch: str = ""
    cpu: str = ""
    simd: tuple[str, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    gpu_note: str = ""  # why no GPU is listed, when none is
    driver: str = ""  # the kernel module's version, "580.65.06"
    driver_cuda: tuple[int, int] | None = None  # the newest CUDA the driver supports
    runtimes: tuple[CudaRuntime, ...] = field(default=())

    def runtime(self, major: int) -> CudaRuntime | None:
        """The first CUDA runtime of ``major`` found, or None."""
        return next((r for r in self.runtimes if r.major == major), None)

    def to_json(self) -> dict[str, Any]:
        """The ``machine`` object of ``opmarket doctor --format json``."""
        return {
            "arch": self.arch,
            "cpu": self.cpu,
            "simd": list(self.simd),
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "compute_capability": "{}.{}".format(*g.compute_capability),
                }
                for g in self.gpus
            ],
            "gpu_note": self.gpu_note,
            "driver": self.driver or None,
            "driver_cuda": "{}.{}".format(*self.driver_cuda) if self.driver_cuda else None,
            "cuda_runtimes": [
                {"major": r.major, "path": r.path, "source": r.source} for r in self.runtimes
            ],
        }


def cpu_simd(cpuinfo: str) -> tuple[str, str]:
    """The CPU's model name and its SIMD flags (of :data:`SIMD_FLAGS`, space-separated) from
    the text of ``/proc/cpuinfo``."""
    model = ""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "CPU part") and not model:
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return model, " ".join(f for f in SIMD_FLAGS if f in flags)


def _driver_version() -> str:
    try:
        text = Path("/proc/driver/nvidia/version").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    found = re.search(r"Kernel Module(?: for \S+)?\s+([\d.]+)", text)
    return found.group(1) if found else ""


def _driver_gpus() -> tuple[tuple[Gpu, ...], str, tuple[int, int] | None]:
    """The GPUs libcuda.so.1 reports, why there are none, and the CUDA version the driver
    supports. The GPU-only branch: on a machine without the driver it returns at the first
    step."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return (), "no NVIDIA driver (libcuda.so.1 not found)", None
    version = ctypes.c_int(0)
    driver_cuda = None
    if cuda.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
        driver_cuda = (version.value // 1000, version.value % 1000 // 10)
    status = cuda.cuInit(0)
    if status != 0:
        return (), f"the NVIDIA driver found no usable GPU (cuInit error {status})", driver_cuda
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value <= 0:
        return (), "the NVIDIA driver reports no GPU", driver_cuda
    gpus = []
    for index in range(count.value):
        device = ctypes.c_int(0)
        name = ctypes.create_string_buffer(256)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(device), index)
        cuda.cuDeviceGetName(name, len(name), device)
        cuda.cuDeviceGetAttribute(ctypes.byref(major), _CU_ATTRIBUTE_CC_MAJOR, device)
        cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CU_ATTRIBUTE_CC_MINOR, device)
        gpus.append(Gpu(index, name.value.decode(errors="replace"), (major.value, minor.value)))
    return tuple(gpus), "", driver_cuda


def _runtimes() -> tuple[CudaRuntime, ...]:
    found: list[CudaRuntime] = []
    seen: set[str] = set()
    for entry in sys.path:
        for lib in sorted(Path(entry or ".").glob("nvidia/cu*/lib/libcudart.so.*")):
            major = lib.name.removeprefix("libcudart.so.").partition(".")[0]
            if major.isdigit() and str(lib) not in seen:
                seen.add(str(lib))
                found.append(CudaRuntime(int(major), str(lib), "wheel"))
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        for lib in sorted(Path(home or "/nonexistent").glob("lib*/libcudart.so.*")):
            major = lib.name.removeprefix("libcudart.so.").partition(".")[0]
            if major.isdigit() and str(lib.resolve()) not in seen:
                seen.add(str(lib.resolve()))
                found.append(CudaRuntime(int(major), str(lib.resolve()), "system"))
    system = ctypes.util.find_library("cudart")  # the dynamic linker's cache
    if system:
        major = system.removeprefix("libcudart.so.").partition(".")[0]
        if major.isdigit() and not any(r.major == int(major) for r in found):
            found.append(CudaRuntime(int(major), system, "system"))
    return tuple(found)


def machine_facts() -> Machine:
    """This machine's facts, read now."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        cpuinfo = ""
    model, simd = cpu_simd(cpuinfo)
    gpus, note, driver_cuda = _driver_gpus()
    return Machine(
        arch=platform.machine(),
        cpu=model,
        simd=tuple(simd.split()),
        gpus=gpus,
        gpu_note=note,
        driver=_driver_version(),
        driver_cuda=driver_cuda,
        runtimes=_runtimes(),
    )
