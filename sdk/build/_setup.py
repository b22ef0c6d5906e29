"""Building a plugin whose package carries one plain shared library, with setuptools.

C-ABI plugins (``opmarket-zero-out-c``, ``opmarket-bitcast``) and GPU companions
(``opmarket-time-two-cuda13``) ship a shared library that uses no Python C API: it fits every
Python version, so the wheel is ``py3-none-<platform>``. Their ``setup.py`` is one call::

    from setuptools import setup
    from opmarket.sdk.build import library_setup

    setup(**library_setup("opmarket_zero_out_c", "libopm_zero_out_c.so",
                          ["src/opmarket_zero_out_c/zero_out.cc"]))

The library is compiled when setuptools builds the package (``build_py``), into the
package's build folder (for an editable install, ``pip install -e``, into the package's
source folder, where the editable install imports it from): C (``.c``, ``-std=c99``) with
``$CC``, C++ (``-std=c++17``) with ``$CXX``, both against opmarket's headers; with
``cuda_runtime`` set, nvcc builds it (:func:`opmarket.sdk.build.build_cuda_library`: the runtime
linked shared, found in the ``nvidia-cuda-runtime`` wheel) and ``cuda_build.json`` records
what it built. No ``-march``: the library runs on any x86-64 CPU. Importing this module
imports nothing but the standard library; setuptools is imported by :func:`library_setup`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["compiler", "library_setup"]


def compiler(language: str) -> list[str]:
    """The compiler command for ``"c"`` (``$CC``, else Python's, else ``cc``) or ``"c++"``
    (``$CXX``, else Python's, else ``c++``), split as a shell would."""
    env, fallback = ("CC", "cc") if language == "c" else ("CXX", "c++")
    return shlex.split(os.environ.get(env) or sysconfig.get_config_var(env) or fallback)


def _compile_library(sources: Sequence[str], output: Path) -> None:
    from opmarket.sdk._native import get_include

    c_only = all(s.endswith(".c") for s in sources)
    command = [
        *compiler("c" if c_only else "c++"),
        "-std=c99" if c_only else "-std=c++17",
        "-O2",
        "-fPIC",
        "-shared",
        "-fvisibility=hidden",
        f"-I{get_include()}",
        *sources,
        "-o",
        str(output),
    ]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)


def library_setup(
    package: str,
    library: str,
    sources: Sequence[str | os.PathLike[str]],
    *,
    cuda_runtime: int | None = None,
) -> dict[str, Any]:
    """Keywords for ``setuptools.setup()``: build ``sources`` into the shared library
    ``library`` inside the import package ``package`` and tag the wheel
    ``py3-none-<platform>``. ``cuda_runtime``: the CUDA major whose nvcc builds the
    sources (they are ``.cu``), recorded with the SASS and PTX built in
    ``cuda_build.json`` beside the library; None compiles C or C++."""
    from setuptools import Distribution
    from setuptools.command.bdist_wheel import bdist_wheel
    from setuptools.command.build_py import build_py

    paths = [str(s) for s in sources]

    class BuildWithLibrary(build_py):
        """build_py, then the library into the package's build folder."""

        def run(self) -> None:
            super().run()
            if getattr(self, "editable_mode", False):  # pip install -e: beside the sources
                folder = Path(self.get_package_dir(package))
            else:
                folder = Path(self.build_lib, package)
            folder.mkdir(parents=True, exist_ok=True)
            if cuda_runtime is None:
                _compile_library(paths, folder / library)
                return
            from opmarket.sdk.build._cuda import build_cuda_library

            record = build_cuda_library(paths, folder / library, runtime_major=cuda_runtime)
            record["library"] = library
            (folder / "cuda_build.json").write_text(json.dumps(record, indent=2) + "\n")

        def get_source_files(self) -> list[str]:
            # What an sdist carries: the library's sources too (they are not package data,
            # so the wheel leaves them out), so a wheel builds from the sdist.
            return [*super().get_source_files(), *paths]

    class BinaryDistribution(Distribution):
        def has_ext_modules(self) -> bool:
            return True  # a platform wheel (platlib): it holds a compiled library

    class Py3Wheel(bdist_wheel):
        def get_tag(self) -> tuple[str, str, str]:
            return "py3", "none", super().get_tag()[2]

    return {
        "distclass": BinaryDistribution,
        "cmdclass": {"build_py": BuildWithLibrary, "bdist_wheel": Py3Wheel},
    }
