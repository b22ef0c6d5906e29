"""Build step: compile zero_out.cc into a plain shared library (no Python) beside the
package, and tag the wheel py3-none-<platform>: it fits every Python version. Only the C API
crosses into opmarket; the C++ layer (opmarket/c_api.hpp) is compiled in."""

import os
import shlex
import subprocess
import sysconfig
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

import opmarket.sdk

LIBRARY = "libopm_zero_out_c.so"
SOURCE = Path("src", "opmarket_zero_out_c", "zero_out.cc")


class BuildWithLibrary(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib, "opmarket_zero_out_c", LIBRARY)
        target.parent.mkdir(parents=True, exist_ok=True)
        cc = shlex.split(os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++")
        command = [
            *cc,
            "-std=c++17",
            "-O2",
            "-fPIC",
            "-shared",
            "-fvisibility=hidden",
            f"-I{opmarket.sdk.get_include()}",
            str(SOURCE),
            "-o",
            str(target),
        ]
        print(" ".join(command))
        subprocess.run(command, check=True)


class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True  # a platform wheel (platlib): it holds a compiled library


class Py3Wheel(bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(
    distclass=BinaryDistribution, cmdclass={"build_py": BuildWithLibrary, "bdist_wheel": Py3Wheel}
)
