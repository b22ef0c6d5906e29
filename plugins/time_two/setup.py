"""Two libraries in one wheel: the CPU kernel (pybind11, opmarket's header) always, and the
CUDA kernel (time_two_gpu.cu -> libopm_time_two_gpu.so, a C interface) when nvcc is found.

nvcc is looked up on PATH, then in $CUDA_HOME/bin and /usr/local/cuda/bin;
OPMARKET_TIME_TWO_CUDA=0 skips the GPU library, =1 makes a missing nvcc an error. The GPU
library links the CUDA runtime dynamically (found at run time, see __init__.py) and carries
code for sm_80 and sm_90 plus PTX for compute_75, which newer GPUs compile when loading it.
"""

import os
import shutil
import subprocess
from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

import opmarket.sdk

CUDA_SOURCE = "src/opmarket_time_two/time_two_gpu.cu"
GPU_LIBRARY = "libopm_time_two_gpu.so"
ARCHS = [
    "-gencode",
    "arch=compute_80,code=sm_80",
    "-gencode",
    "arch=compute_90,code=sm_90",
    "-gencode",
    "arch=compute_75,code=compute_75",
]


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and Path(home, "bin", "nvcc").is_file():
            return str(Path(home, "bin", "nvcc"))
    return None


def runtime_dirs(nvcc: str) -> list[str]:
    """The toolkit's library folders holding libcudart (nvcc may be a wrapper script)."""
    homes = [os.environ.get("CUDA_HOME"), str(Path(nvcc).resolve().parent.parent)]
    try:
        # "Cuda compilation tools, release 13.0" -> /usr/local/cuda-13.0, else /usr/local/cuda
        out = subprocess.run(
            [nvcc, "--version"], capture_output=True, text=True, check=False
        ).stdout
        release = out.split("release ", 1)[1].split(",", 1)[0]
        homes += [f"/usr/local/cuda-{release}", "/usr/local/cuda"]
    except (OSError, IndexError):
        homes.append("/usr/local/cuda")
    found = []
    for home in filter(None, homes):
        for sub in ("lib64", "lib"):
            d = Path(home, sub)
            if any(d.glob("libcudart.so*")) and str(d.resolve()) not in found:
                found.append(str(d.resolve()))
    return found


class BuildWithCuda(build_ext):
    """build_ext, then the CUDA library beside the extension module."""

    def run(self) -> None:
        super().run()
        mode = os.environ.get("OPMARKET_TIME_TWO_CUDA", "auto")
        if mode == "0":
            print("OPMARKET_TIME_TWO_CUDA=0: building the CPU kernel only")
            return
        nvcc = find_nvcc()
        if nvcc is None:
            if mode == "1":
                raise RuntimeError("OPMARKET_TIME_TWO_CUDA=1 but nvcc was not found")
            print("nvcc not found: building the CPU kernel only")
            return
        target = Path(self.get_ext_fullpath("opmarket_time_two._time_two")).parent / GPU_LIBRARY
        sources = [Path(CUDA_SOURCE), Path(CUDA_SOURCE).with_name("time_two.h")]
        if target.is_file() and target.stat().st_mtime >= max(s.stat().st_mtime for s in sources):
            print(f"{target} is up to date")
            return
        # Where this toolkit's runtime is, as a run path (found elsewhere at run time too).
        rpaths = [f"-Xlinker=-rpath,{d}" for d in runtime_dirs(nvcc)]
        cmd = [
            nvcc,
            "-O2",
            "-std=c++17",
            "-shared",
            "-Xcompiler",
            "-fPIC,-fvisibility=hidden",
            "-cudart",
            "shared",
            *ARCHS,
            *rpaths,
            "-o",
            str(target),
            CUDA_SOURCE,
        ]
        print(" ".join(cmd))
        subprocess.run(cmd, check=True)


# Rebuilt when opmarket's header changes too, not only the plugin's own sources.
HEADER = str(Path(opmarket.sdk.get_include(), "opmarket", "kernel.h"))

setup(
    ext_modules=[
        Pybind11Extension(
            "opmarket_time_two._time_two",
            ["src/opmarket_time_two/time_two.cc"],
            include_dirs=[opmarket.sdk.get_include()],
            depends=["src/opmarket_time_two/time_two.h", HEADER],
            cxx_std=17,
        )
    ],
    cmdclass={"build_ext": BuildWithCuda},
)
