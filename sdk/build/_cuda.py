"""GPU companions: building a CUDA library with nvcc, and loading it where it may run.

A GPU companion (``opmarket-time-two-cuda13``) ships one shared library built by nvcc with a
C interface, and registers GPU kernels for ops its base plugin declares. The library links
the CUDA runtime *shared* (``-cudart shared``; nvcc links it statically by default) and
finds it at run time in the ``nvidia-cuda-runtime`` wheel, a dependency of the companion:

- at build time, :func:`build_cuda_library` gives the library a run path relative to itself,
  ``$ORIGIN/../nvidia/cu<major>/lib``: from ``site-packages/<package>/`` to the folder where
  that wheel puts ``libcudart.so.<major>``. A plain ``pip install`` needs nothing more.
- at run time, :func:`load_cuda_library` first loads the library as it is; if the dynamic
  linker does not find the runtime (the two wheels in different site folders, ``--target``
  installs), it loads ``libcudart.so.<major>`` by path from every ``sys.path`` entry's
  ``nvidia/cu<major>/lib``, then the library again.

A GPU kernel may also name its *device entry* (:func:`device_entry`): an exported C function
of the library (``opmarket/cuda_kernel.h``) that framework bridges call on their own device
buffers with their CUDA stream, where ``opmarket.ops`` calls the host door through ctypes.

Loading the library never needs a GPU or a driver: the runtime opens ``libcuda.so.1`` only
on the first CUDA call. Every companion library exports ``int opmarket_cuda_devices(void)``:
the number of GPUs the runtime sees, or minus the ``cudaError_t`` it got (35: no driver,
100: no device). Nothing here imports a GPU toolkit's Python package.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from opmarket.sdk._errors import OpmarketError

__all__ = [
    "DEVICE_COUNT_SYMBOL",
    "CudaBuildError",
    "CudaLibrary",
    "DeviceEntry",
    "build_cuda_library",
    "device_entry",
    "entry_of",
    "find_nvcc",
    "load_cuda_library",
    "runtime_wheel_dirs",
]

#: The C function every companion library exports: GPUs seen, or -cudaError_t.
DEVICE_COUNT_SYMBOL = "opmarket_cuda_devices"

# Some cudaError_t values opmarket_cuda_devices may return (negated), as words.
_CUDA_ERRORS = {
    35: "the NVIDIA driver is missing or older than this CUDA runtime",
    100: "no CUDA-capable device is detected",
    999: "unknown CUDA error",
}


class CudaBuildError(OpmarketError, RuntimeError):
    """A CUDA library could not be built: no nvcc, a toolkit of the wrong major version,
    or nvcc failed (its command line is quoted)."""


# --- build --------------------------------------------------------------------------------


def find_nvcc() -> str | None:
    """nvcc in ``$CUDA_HOME/bin`` (else ``$CUDA_PATH/bin``) when that is set: an explicit
    toolkit wins, and one without nvcc means none, as PyTorch's cpp_extension decides; else
    nvcc on PATH, else ``/usr/local/cuda/bin/nvcc``."""
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home:
        candidate = Path(home, "bin", "nvcc")
        return str(candidate) if candidate.is_file() else None
    found = shutil.which("nvcc")
    if found:
        return found
    candidate = Path("/usr/local/cuda/bin/nvcc")
    return str(candidate) if candidate.is_file() else None


def _nvcc_release(nvcc: str) -> str:
    """``13.0.88`` from nvcc's ``Cuda compilation tools, release 13.0, V13.0.88``."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False)
    found = re.search(r"release [\d.]+, V([\d.]+)", out.stdout)
    if found is None:
        raise CudaBuildError(f"{nvcc} --version printed no release: {out.stdout!r}")
    return found.group(1)


def build_cuda_library(
    sources: Sequence[str | os.PathLike[str]],
    output: str | os.PathLike[str],
    *,
    sass: Sequence[str] = ("sm_80", "sm_90"),
    ptx: Sequence[str] = ("compute_75",),
    runtime_major: int = 13,
    flags: Sequence[str] = (),
) -> dict[str, object]:
    """Compile ``sources`` with nvcc into the shared library ``output``: SASS for each
    ``sm_XY`` of ``sass``, PTX for each ``compute_XY`` of ``ptx``, the CUDA runtime linked
    shared with the run path ``$ORIGIN/../nvidia/cu<major>/lib``, opmarket's headers on the
    include path (``#include <opmarket/cuda.cuh>``), no host ``-march``.

    Returns the build record (what the companion writes beside its library, what doctor
    shows): nvcc's version, the CUDA runtime major, the SASS and PTX lists. CudaBuildError
    when nvcc is missing, is not CUDA ``runtime_major``, or fails.
    """
    from opmarket.sdk._native import get_include  # lazy: the module stays standard-library only

    nvcc = find_nvcc()
    if nvcc is None:
        raise CudaBuildError(
            "nvcc not found ($CUDA_HOME/bin or $CUDA_PATH/bin when set, else PATH and "
            "/usr/local/cuda/bin): "
            f"a CUDA {runtime_major} GPU companion needs the CUDA {runtime_major} toolkit's "
            "compiler to build; install it, or install only the base plugin (CPU kernels)"
        )
    release = _nvcc_release(nvcc)
    if int(release.split(".")[0]) != runtime_major:
        raise CudaBuildError(
            f"{nvcc} is CUDA {release}, this companion links the CUDA {runtime_major} runtime; "
            f"put a CUDA {runtime_major} nvcc first on PATH or in $CUDA_HOME"
        )
    gencode: list[str] = []
    for arch in sass:
        gencode += ["-gencode", f"arch=compute_{arch.removeprefix('sm_')},code={arch}"]
    for arch in ptx:
        gencode += ["-gencode", f"arch={arch},code={arch}"]
    cmd = [
        nvcc,
        "-O2",
        "-std=c++17",
        "-shared",
        "-Xcompiler",
        "-fPIC,-fvisibility=hidden",
        "-cudart",
        "shared",
        *gencode,
        # No shell runs this: $ORIGIN reaches the linker as it is written.
        f"-Xlinker=-rpath,$ORIGIN/../nvidia/cu{runtime_major}/lib",
        # opmarket's headers: <opmarket/cuda.cuh> (the device count, the host round trip).
        f"-I{get_include()}",
        *flags,
        "-o",
        str(output),
        *(str(s) for s in sources),
    ]
    print(" ".join(cmd), flush=True)
    done = subprocess.run(cmd, check=False)
    if done.returncode != 0:
        raise CudaBuildError(f"nvcc failed (exit {done.returncode}): {' '.join(cmd)}")
    return {
        "nvcc": release,
        "cuda_runtime": runtime_major,
        "sass": list(sass),
        "ptx": list(ptx),
    }


# --- run time -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CudaLibrary:
    """A companion's CUDA library as loaded here: ``handle`` is None when it could not be
    loaded; ``devices`` the GPUs its runtime sees; ``status`` says which case, in words
    (starting ``no GPU visible`` or ``CUDA runtime N not found`` when it cannot run)."""

    path: str
    handle: ctypes.CDLL | None
    devices: int
    status: str
    runtime: str = ""  # the libcudart file the process loaded, when known

    @property
    def available(self) -> bool:
        """Whether kernels in this library can run here (loaded, at least one GPU)."""
        return self.handle is not None and self.devices > 0


def runtime_wheel_dirs(major: int = 13) -> list[Path]:
    """The ``nvidia/cu<major>/lib`` folders of the ``nvidia-cuda-runtime`` wheel on sys.path."""
    found: list[Path] = []
    for entry in sys.path:
        folder = Path(entry or ".", "nvidia", f"cu{major}", "lib")
        if (folder / f"libcudart.so.{major}").is_file() and folder not in found:
            found.append(folder)
    return found


def loaded_runtime(major: int = 13) -> str:
    """The path of the ``libcudart.so.<major>`` this process has loaded, or ``""``."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").partition("/")[2]
                if path and os.path.basename(path).startswith(f"libcudart.so.{major}"):
                    return "/" + path
    except OSError:
        pass
    return ""


#: A C function's ctypes signature: its result type (None: void) and argument types.
Signature = tuple[Any, Sequence[Any]]


def load_cuda_library(
    path: str | os.PathLike[str],
    *,
    runtime_major: int = 13,
    functions: Mapping[str, Signature] | None = None,
) -> CudaLibrary:
    """Load a companion's CUDA library (see the module's docstring for how the runtime is
    found) and ask its runtime how many GPUs it sees. ``functions``: the C functions the
    companion calls, name -> (restype, argtypes), set on the handle once here (a library
    that lacks one cannot run). Never raises for a missing runtime, driver, function or
    GPU: the result's ``status`` says what is missing."""
    lib = _load(Path(path), runtime_major)
    if lib.handle is None:
        return lib
    for name, (restype, argtypes) in (functions or {}).items():
        function = getattr(lib.handle, name, None)
        if function is None:
            return CudaLibrary(lib.path, None, 0, f"{Path(path).name} exports no {name}()")
        function.restype, function.argtypes = restype, list(argtypes)
    return lib


def _load(file: Path, runtime_major: int) -> CudaLibrary:
    if not file.is_file():
        return CudaLibrary(str(file), None, 0, f"no CUDA library at {file}")
    try:
        handle = ctypes.CDLL(str(file))
    except OSError as first:
        for folder in runtime_wheel_dirs(runtime_major):
            try:
                ctypes.CDLL(str(folder / f"libcudart.so.{runtime_major}"), ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
        try:
            handle = ctypes.CDLL(str(file))
        except OSError:
            return CudaLibrary(
                str(file),
                None,
                0,
                f"CUDA runtime {runtime_major} not found; install the cuda{runtime_major} "
                f"extra ({first})",
            )
    runtime = loaded_runtime(runtime_major)
    count_fn = getattr(handle, DEVICE_COUNT_SYMBOL, None)
    if count_fn is None:
        return CudaLibrary(
            str(file), None, 0, f"{file.name} exports no {DEVICE_COUNT_SYMBOL}()", runtime
        )
    count_fn.restype, count_fn.argtypes = ctypes.c_int, []
    count = int(count_fn())
    if count <= 0:
        why = _CUDA_ERRORS.get(-count, f"cudaError {-count}") if count < 0 else "0 devices"
        return CudaLibrary(str(file), handle, 0, f"no GPU visible (CUDA runtime: {why})", runtime)
    return CudaLibrary(str(file), handle, count, f"available: {count} GPU(s)", runtime)


_F = TypeVar("_F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class DeviceEntry:
    """A GPU kernel's device entry (``opmarket/cuda_kernel.h``): the C function ``symbol``
    of the companion's CUDA library (``library()``, loaded once), which framework bridges
    call on their own device buffers and CUDA stream."""

    symbol: str
    library: Callable[[], CudaLibrary]

    def address(self) -> tuple[int, str]:
        """(the entry's address, "") where its library loads here (a GPU is not needed to
        load it), else (0, why not)."""
        lib = self.library()
        if lib.handle is None:
            return 0, lib.status
        try:
            function = getattr(lib.handle, self.symbol)
        except AttributeError:
            return 0, f"{Path(lib.path).name} exports no {self.symbol}()"
        return int(ctypes.cast(function, ctypes.c_void_p).value or 0), ""

    def kernel_version(self) -> int:
        """The ``OPM_CudaKernelCall`` version the entry's library reads (its
        ``opmarket_cuda_kernel_version()``, from ``opmarket/cuda.cuh``): 2 and later honour
        the synchronizing mode; 1 for a library built before that; 0 where it does not load."""
        lib = self.library()
        if lib.handle is None:
            return 0
        try:
            function = lib.handle.opmarket_cuda_kernel_version
        except AttributeError:
            return 1
        function.restype, function.argtypes = ctypes.c_int, []
        return int(function())


def device_entry(symbol: str, library: Callable[[], CudaLibrary]) -> Callable[[_F], _F]:
    """Name the device entry of the decorated GPU kernel: ``symbol``, an
    ``OPM_CudaKernelFn`` exported by ``library()``'s CUDA library. The kernel itself stays
    the host door ``opmarket.ops`` calls; the bridges find the entry with
    :func:`entry_of`."""

    def decorate(impl: _F) -> _F:
        setattr(impl, _ENTRY_ATTR, DeviceEntry(symbol, library))
        return impl

    return decorate


# The attribute device_entry sets on a kernel function.
_ENTRY_ATTR = "opm_device_entry"


def entry_of(impl: object) -> DeviceEntry | None:
    """The device entry a kernel function names (:func:`device_entry`), or None."""
    found = getattr(impl, _ENTRY_ATTR, None)
    return found if isinstance(found, DeviceEntry) else None
