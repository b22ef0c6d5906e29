"""The C++ kernel, one translation unit, built against opmarket's header with pybind11."""

from pathlib import Path

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

import opmarket.sdk

# Rebuilt when opmarket's header changes too, not only the plugin's own sources.
HEADER = str(Path(opmarket.sdk.get_include(), "opmarket", "kernel.h"))

setup(
    ext_modules=[
        Pybind11Extension(
            "opmarket_zero_out._zero_out",
            ["src/opmarket_zero_out/zero_out.cc"],
            include_dirs=[opmarket.sdk.get_include()],
            depends=[HEADER],
            cxx_std=17,
        )
    ]
)
