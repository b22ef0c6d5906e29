"""The CUDA library of a GPU companion: nvcc builds libopm_time_two_cuda13.so beside the
package (opmarket.sdk.build_cuda_library: CUDA runtime linked shared, run path into the
nvidia-cuda-runtime wheel, SASS for sm_80 and sm_90, PTX for compute_75) and records what it
built in cuda_build.json. Without a CUDA 13 nvcc the build fails and says so: there is no
CPU-only build of a GPU companion (the base plugin is that).
"""

import json
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_ext import build_ext

from opmarket.sdk import build_cuda_library

PACKAGE = "opmarket_time_two_cuda13"
LIBRARY = "libopm_time_two_cuda13.so"
SOURCES = [f"src/{PACKAGE}/time_two.cu"]


class BuildCuda(build_ext):
    """Build the CUDA library into the package (nvcc, not a Python extension)."""

    def run(self) -> None:
        folder = Path(self.build_lib if not self.inplace else "src", PACKAGE)
        folder.mkdir(parents=True, exist_ok=True)
        record = build_cuda_library(SOURCES, folder / LIBRARY, runtime_major=13)
        record["library"] = LIBRARY
        (folder / "cuda_build.json").write_text(json.dumps(record, indent=2) + "\n")

    def get_outputs(self) -> list[str]:
        folder = Path(self.build_lib, PACKAGE)
        return [str(folder / LIBRARY), str(folder / "cuda_build.json")]


class PlatformWheel(bdist_wheel):
    """py3-none-<platform>: the library is native code, but uses no Python C API."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self) -> tuple[str, str, str]:
        return "py3", "none", super().get_tag()[2]


class NativeDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True


setup(
    distclass=NativeDistribution,
    cmdclass={"build_ext": BuildCuda, "bdist_wheel": PlatformWheel},
)
